//! A Hugging Face model folder (local, or fetched from the Hub): `config.json`,
//! `tokenizer.json`, `tokenizer_config.json` and safetensors weights.

use crate::{LoadError, hub};
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use std::path::{Path, PathBuf};

/// The files of a model, resolved to local paths.
#[derive(Debug)]
pub struct HfFolder {
    /// The source as given: a folder path or a Hub repository id (named in error messages).
    pub name: String,
    /// `config.json`, as parsed.
    pub config: serde_json::Value,
    /// The tokenizer, from `tokenizer.json`.
    pub tokenizer: tokenizers::Tokenizer,
    /// `tokenizer_config.json` (chat template, BOS and EOS tokens, `add_bos_token`), where
    /// the folder has one.
    pub tokenizer_config: Option<serde_json::Value>,
    /// The safetensors files: those `model.safetensors.index.json` names (sorted, each
    /// once), or `model.safetensors` where there is no index.
    pub weights: Vec<PathBuf>,
}

fn read_json(path: &Path) -> Result<serde_json::Value, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| LoadError::Json {
        what: format!("{} is not valid JSON", path.display()),
        source: e,
    })
}

impl HfFolder {
    /// From a local folder, or a Hub repository id.
    pub fn open(source: &str) -> Result<HfFolder, LoadError> {
        let get = |file: &str| -> Result<PathBuf, LoadError> {
            if hub::is_repo_id(source) {
                hub::fetch(source, file)
            } else {
                let p = Path::new(source).join(file);
                if p.exists() {
                    Ok(p)
                } else {
                    Err(LoadError::NotFound(format!("{} has no {file}", source)))
                }
            }
        };
        let config = read_json(&get("config.json")?)?;
        let tok_path = get("tokenizer.json")?;
        let tokenizer = tokenizers::Tokenizer::from_file(&tok_path)
            .map_err(|e| LoadError::tokenizer(tok_path.display().to_string(), e))?;
        // Optional files: absent is fine; a failure to fetch one is the load's error (a
        // chat template must not go missing because the network did).
        let optional = |file: &str| match get(file) {
            Ok(p) => Ok(Some(p)),
            Err(LoadError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        };
        let tokenizer_config = optional("tokenizer_config.json")?
            .map(|p| read_json(&p))
            .transpose()?;
        let weights = match optional("model.safetensors.index.json")? {
            Some(index) => {
                let index = read_json(&index)?;
                let mut files: Vec<String> = index["weight_map"]
                    .as_object()
                    .ok_or_else(|| {
                        LoadError::Format("model.safetensors.index.json has no weight_map".into())
                    })?
                    .values()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect();
                files.sort();
                files.dedup();
                files
                    .iter()
                    .map(|f| get(f))
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => vec![get("model.safetensors")?],
        };
        Ok(HfFolder {
            name: source.to_string(),
            config,
            tokenizer,
            tokenizer_config,
            weights,
        })
    }

    /// `config.json`'s `model_type`.
    pub fn model_type(&self) -> &str {
        self.config["model_type"].as_str().unwrap_or("")
    }

    /// The config as a typed struct.
    pub fn config_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, LoadError> {
        serde_json::from_value(self.config.clone()).map_err(|e| LoadError::Json {
            what: format!(
                "{}: config.json does not describe this architecture",
                self.name
            ),
            source: e,
        })
    }

    /// The weights, memory-mapped.
    pub fn var_builder(
        &self,
        dtype: DType,
        device: &Device,
    ) -> Result<VarBuilder<'static>, LoadError> {
        // SAFETY: the safetensors files are memory-mapped read-only; they must not be
        // changed while the model is loaded (the same condition as every mmap-based loader;
        // the Hub cache never rewrites a file in place).
        unsafe { VarBuilder::from_mmaped_safetensors(&self.weights, dtype, device) }
            .map_err(|e| LoadError::candle(format!("{}: cannot map the weights", self.name), e))
    }

    /// The chat template and the special tokens it may use, from `tokenizer_config.json`.
    pub fn chat_template(&self) -> Option<(String, String, String)> {
        let tc = self.tokenizer_config.as_ref()?;
        let template = match &tc["chat_template"] {
            serde_json::Value::String(s) => s.clone(),
            // A list of named templates: take "default".
            serde_json::Value::Array(list) => list
                .iter()
                .find(|t| t["name"] == "default")
                .and_then(|t| t["template"].as_str())
                .map(String::from)?,
            _ => return None,
        };
        let token = |k: &str| match &tc[k] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Object(o) => o
                .get("content")
                .and_then(|c| c.as_str())
                .unwrap_or("")
                .to_string(),
            _ => String::new(),
        };
        Some((template, token("bos_token"), token("eos_token")))
    }

    /// End-of-generation tokens: `eos_token_id` of config.json (a number or a list) and the
    /// tokenizer config's `eos_token`.
    pub fn eos_ids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        match &self.config["eos_token_id"] {
            serde_json::Value::Number(n) => out.extend(n.as_u64().map(|x| x as u32)),
            serde_json::Value::Array(a) => {
                out.extend(a.iter().filter_map(|x| x.as_u64()).map(|x| x as u32))
            }
            _ => {}
        }
        if let Some((_, _, eos)) = self.chat_template()
            && let Some(id) = self.tokenizer.token_to_id(&eos)
            && !out.contains(&id)
        {
            out.push(id);
        }
        out
    }
}
