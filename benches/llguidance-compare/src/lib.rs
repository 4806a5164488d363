//! corral beside llguidance 1.9, in one process: the same tokenizer, the same documents,
//! equivalent grammars (llama.cpp's json.gbnf for corral, its Lark transliteration for
//! llguidance, which has no GBNF front end; or one JSON Schema for both). Shared by the
//! report (`src/main.rs`) and the test that the two engines' masks are equal
//! (`tests/equal_masks.rs`).

use anyhow::{Context, Result, anyhow};
use corral_engine::{Constraint, MaskBase, MaskCache};
use corral_grammar::{CompileOptions, Grammar, compile_gbnf};
use corral_trie::{FixedBitSet, TokenId, TokenSpace, Vocabulary, continuation_tokenizer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// llama.cpp's json.gbnf, transliterated to Lark (an explicit `ws` rule, the same string and
/// number lexemes).
pub const JSON_LARK: &str = include_str!("../../data/json.lark");

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `../shared/conformance` beside the repository.
pub fn conformance() -> PathBuf {
    root().join("../shared/conformance")
}

/// A grammar both engines compile.
#[derive(Clone, Debug)]
pub enum Source {
    /// llama.cpp's json.gbnf (and its Lark form for llguidance).
    Json { gbnf: String },
    /// Lark text, for llguidance only.
    Lark(String),
    /// A JSON Schema, each engine with its default options.
    Schema {
        text: String,
        value: serde_json::Value,
    },
}

impl Source {
    pub fn json() -> Result<Source> {
        let path = root().join("tests/data/llama_cpp/grammars/json.gbnf");
        Ok(Source::Json {
            gbnf: std::fs::read_to_string(&path).with_context(|| path.display().to_string())?,
        })
    }

    pub fn schema(path: &Path) -> Result<Source> {
        let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
        let value = serde_json::from_str(&text)?;
        Ok(Source::Schema { text, value })
    }

    /// corral's grammar, compiled from scratch (no DFA cache).
    pub fn corral(&self) -> Result<Arc<Grammar>> {
        Ok(match self {
            Source::Json { gbnf } => compile_gbnf(gbnf, &CompileOptions::default())?,
            Source::Lark(_) => return Err(anyhow!("corral has no Lark front end")),
            Source::Schema { text, .. } => {
                corral_schema::compile_json_schema(text, &Default::default())?.grammar
            }
        })
    }

    pub fn llguidance(&self) -> llguidance::api::TopLevelGrammar {
        match self {
            Source::Json { .. } => {
                llguidance::api::TopLevelGrammar::from_lark(JSON_LARK.to_string())
            }
            Source::Lark(text) => llguidance::api::TopLevelGrammar::from_lark(text.clone()),
            Source::Schema { value, .. } => {
                llguidance::api::TopLevelGrammar::from_json_schema(value.clone())
            }
        }
    }
}

/// One tokenizer loaded for both engines.
pub struct Engines {
    pub name: String,
    /// corral's tokens (with the slice precomputed).
    pub space: Arc<TokenSpace>,
    /// Tokenizes continuations (no SentencePiece prefix space).
    pub tokenizer: tokenizers::Tokenizer,
    pub factory: llguidance::ParserFactory,
    /// Seconds to load each engine's tokenizer data.
    pub setup: (f64, f64),
    /// corral's token sets of the lexemes every default schema grammar shares, made once
    /// for the tokenizer ([`Engines::with_shared_lexemes`]); cold constraints read them.
    pub base: Option<MaskBase>,
}

impl Engines {
    pub fn load(name: &str, path: &Path) -> Result<Engines> {
        let t1 = std::time::Instant::now();
        let env = toktrie_hf_tokenizers::ByteTokenizer::from_file(path)?.into_tok_env(None)?;
        let mut factory = llguidance::ParserFactory::new_simple(&env)?;
        factory.quiet();
        let llg_setup = t1.elapsed().as_secs_f64();
        // Both engines end on the same token: llguidance's choice of EOS.
        let eos = vec![TokenId(env.tok_trie().eos_token())];
        let t0 = std::time::Instant::now();
        let hf = tokenizers::Tokenizer::from_file(path).map_err(|e| anyhow!("{e}"))?;
        let vocab = Vocabulary::from_tokenizer(&hf)?;
        let space = Arc::new(TokenSpace::new(vocab, None, eos));
        space.prepare_slices();
        let corral_setup = t0.elapsed().as_secs_f64();
        Ok(Engines {
            name: name.to_string(),
            tokenizer: continuation_tokenizer(&hf),
            space,
            factory,
            setup: (corral_setup, llg_setup),
            base: None,
        })
    }

    /// Makes corral's token sets of the lexemes every schema compiled with the default
    /// options shares (`corral_schema::shared_lexemes`), once for the tokenizer, as part of
    /// its setup: the seconds are added to `setup.0`. Returns the seconds and the states
    /// reached.
    pub fn with_shared_lexemes(&mut self) -> Result<(f64, usize)> {
        let t0 = std::time::Instant::now();
        let grammar = corral_schema::shared_lexemes(&Default::default())?;
        let (base, states) = MaskCache::prefilled(self.space.clone(), &grammar);
        let secs = t0.elapsed().as_secs_f64();
        self.base = Some(base);
        self.setup.0 += secs;
        Ok((secs, states))
    }

    /// The canonical tokenization of `text`.
    pub fn tokens(&self, text: &str) -> Result<Vec<TokenId>> {
        let ids = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| anyhow!("{e}"))?
            .get_ids()
            .to_vec();
        Ok(TokenId::all(&ids))
    }

    /// A constraint for `source` from scratch: compiled with no DFA cache, on a fresh
    /// token-set cache (over the tokenizer's shared lexemes, where they were made).
    pub fn cold_constraint(&self, source: &Source) -> Result<Arc<Constraint>> {
        let cache = match &self.base {
            Some(base) => MaskCache::with_base(base, Default::default()),
            None => MaskCache::new(self.space.clone()),
        };
        Ok(Constraint::with_cache(source.corral()?, &cache))
    }

    /// A fresh llguidance matcher for `source`.
    pub fn matcher(&self, source: &Source) -> Result<llguidance::Matcher> {
        Ok(llguidance::Matcher::new(Ok(self
            .factory
            .create_parser(source.llguidance())?)))
    }
}

/// llguidance's mask as a bitset `width` wide.
pub fn llg_mask(m: &mut llguidance::Matcher, width: usize) -> Result<FixedBitSet> {
    let v = m.compute_mask().map_err(|e| anyhow!("{e}"))?;
    let mut out = FixedBitSet::with_capacity(width);
    v.iter_set_entries(|t| {
        if t < width {
            out.insert(t)
        }
    });
    Ok(out)
}

/// The asset tokenizers fetched by `scripts/fetch-assets`, by name, where present.
pub fn asset_tokenizers(names: &[&str]) -> Vec<(String, PathBuf)> {
    names
        .iter()
        .map(|n| {
            (
                n.to_string(),
                root()
                    .join("assets/tokenizers")
                    .join(n)
                    .join("tokenizer.json"),
            )
        })
        .filter(|(_, p)| p.exists())
        .collect()
}

/// `(mean, p50, p99, max)` of a sample.
pub fn stats(xs: &[f64]) -> (f64, f64, f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0, 0.0, 0.0);
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (
        v.iter().sum::<f64>() / v.len() as f64,
        pct(0.5),
        pct(0.99),
        v[v.len() - 1],
    )
}
