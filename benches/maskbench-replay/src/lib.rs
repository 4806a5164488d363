//! MaskBench replayed: every JSONSchemaBench schema of `../shared/conformance` that has valid
//! instances, compiled cold in corral and in llguidance 1.9 (one process, the same
//! tokenizer), each valid instance replayed as its canonical tokenization, and corral's
//! masks checked against brute force. Shared by the report (`src/main.rs`) and the CI
//! sample (`tests/sample.rs`).
//!
//! - [`corpus`] reads the schemas and their valid instances;
//! - [`documents`] writes an instance the ways the grammar takes it (compact; pretty where
//!   the whitespace fits corral's default bound);
//! - [`time_schema`] times cold compiles and first-pass masks in both engines, then warm
//!   masks in corral (single-threaded: run it alone);
//! - [`brute_schema`] checks every mask of a replay against brute force (parallel).

use anyhow::{Context, Result, anyhow};
use corral_engine::replay::brute_force_mask;
use corral_engine::{Constraint, RobustConstrainedAdapter};
use corral_llguidance_compare::{Engines, Source};
use corral_schema::{JsonSchemaOptions, PropertyOrder, Whitespace};
use corral_trie::TokenId;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// One schema with the instances the benchmark marks valid.
#[derive(Clone, Debug)]
pub struct Entry {
    /// `Collection/file.json`.
    pub name: String,
    pub path: PathBuf,
    pub instances: Vec<Value>,
}

/// `../shared/conformance/jsonschemabench`.
pub fn bench_dir() -> PathBuf {
    corral_llguidance_compare::conformance().join("jsonschemabench")
}

/// Every schema of `dir` with at least one valid instance, sorted by name. Schemas whose
/// file the snapshot lacks are left out and named in the second list.
pub fn corpus(dir: &Path) -> Result<(Vec<Entry>, Vec<String>)> {
    let inst = dir.join("_instances");
    let mut entries = Vec::new();
    let mut missing = Vec::new();
    let files = std::fs::read_dir(&inst)
        .with_context(|| format!("{} (../shared/conformance)", inst.display()))?;
    for f in files {
        let f = f?.path();
        let Some(coll) = f
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".jsonl"))
        else {
            continue;
        };
        let text = std::fs::read_to_string(&f)?;
        for (i, line) in text.lines().enumerate() {
            let v: Value =
                serde_json::from_str(line).with_context(|| format!("{}:{}", f.display(), i + 1))?;
            let file = v["file"]
                .as_str()
                .ok_or_else(|| anyhow!("{}:{}: no file", f.display(), i + 1))?;
            let instances: Vec<Value> = v["tests"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| t["valid"] == Value::Bool(true))
                .map(|t| t["data"].clone())
                .collect();
            if instances.is_empty() {
                continue;
            }
            let name = format!("{coll}/{file}");
            let path = dir.join(coll).join(file);
            if path.exists() {
                entries.push(Entry {
                    name,
                    path,
                    instances,
                });
            } else {
                missing.push(name);
            }
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((entries, missing))
}

/// `n` entries chosen by `seed` (the same for the same corpus and seed), in name order.
pub fn sample(entries: &[Entry], n: usize, seed: u64) -> Vec<Entry> {
    let key = |name: &str| {
        // FNV-1a of the name, mixed with the seed (splitmix64's finalizer).
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in name.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        let mut z = h ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut keyed: Vec<(u64, &Entry)> = entries.iter().map(|e| (key(&e.name), e)).collect();
    keyed.sort_by_key(|(k, e)| (*k, e.name.clone()));
    let mut out: Vec<Entry> = keyed.into_iter().take(n).map(|(_, e)| e.clone()).collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// How an instance is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    Compact,
    /// Two-space indentation.
    Pretty,
}

/// An instance written one way.
#[derive(Clone, Debug)]
pub struct Document {
    pub instance: usize,
    pub form: Form,
    pub text: String,
}

/// The longest whitespace run corral's default schema grammar takes between tokens.
fn whitespace_bound() -> usize {
    match JsonSchemaOptions::default().whitespace {
        Whitespace::Compact => 0,
        Whitespace::Spaced => 1,
        Whitespace::Lines { max_indent } => 1 + max_indent as usize,
        Whitespace::Flexible { max } => max as usize,
    }
}

/// The instances of `e` (the first `limit`), compact, and pretty where every run of
/// indentation fits the default whitespace bound.
pub fn documents(e: &Entry, limit: usize) -> Vec<Document> {
    let bound = whitespace_bound();
    let mut out = Vec::new();
    for (i, v) in e.instances.iter().take(limit).enumerate() {
        let compact = serde_json::to_string(v).expect("a JSON value serializes");
        let pretty = serde_json::to_string_pretty(v).expect("a JSON value serializes");
        out.push(Document {
            instance: i,
            form: Form::Compact,
            text: compact.clone(),
        });
        let longest = pretty
            .lines()
            .map(|l| 1 + l.len() - l.trim_start().len())
            .max()
            .unwrap_or(0);
        if pretty != compact && longest <= bound {
            out.push(Document {
                instance: i,
                form: Form::Pretty,
                text: pretty,
            });
        }
    }
    out
}

/// One engine's first pass over a document.
#[derive(Clone, Debug, Default)]
pub struct Pass {
    /// Microseconds per mask: one before each token and one after the last.
    pub masks_us: Vec<f64>,
    /// The token refused, if any (the mask after it is not computed); `Some(len)` if the
    /// output was complete but EOS was refused.
    pub refused_at: Option<usize>,
}

fn corral_pass(c: &Arc<Constraint>, tokens: &[TokenId]) -> Pass {
    let mut a = RobustConstrainedAdapter::new(c.clone());
    let mut mask = a.empty_mask();
    let mut pass = Pass::default();
    for i in 0..=tokens.len() {
        let t0 = Instant::now();
        let ok = a.compute_mask(&mut mask).is_ok();
        pass.masks_us.push(t0.elapsed().as_secs_f64() * 1e6);
        let allowed = match tokens.get(i) {
            Some(&t) => ok && mask.contains(t.index()) && a.step_with_token(t).is_ok(),
            None => {
                ok && a
                    .constraint()
                    .space()
                    .eos()
                    .iter()
                    .any(|e| mask.contains(e.index()))
            }
        };
        if !allowed {
            pass.refused_at = Some(i);
            break;
        }
    }
    pass
}

fn llg_pass(m: &mut llguidance::Matcher, eos: u32, tokens: &[TokenId]) -> Pass {
    let mut pass = Pass::default();
    for i in 0..=tokens.len() {
        let t0 = Instant::now();
        let mask = m.compute_mask_or_eos();
        pass.masks_us.push(t0.elapsed().as_secs_f64() * 1e6);
        let allowed = match (mask, tokens.get(i)) {
            (Ok(mask), Some(&t)) => mask.is_allowed(t.get()) && m.consume_token(t.get()).is_ok(),
            (Ok(mask), None) => mask.is_allowed(eos),
            (Err(_), _) => false,
        };
        if !allowed {
            pass.refused_at = Some(i);
            break;
        }
    }
    pass
}

/// A document as both engines saw it.
#[derive(Clone, Debug, Serialize)]
pub struct DocTiming {
    pub instance: usize,
    pub form: Form,
    pub tokens: usize,
    pub corral_compile_ms: f64,
    pub llg_compile_ms: f64,
    /// The token each engine refused (`tokens` = EOS at the end).
    pub corral_refused_at: Option<usize>,
    pub llg_refused_at: Option<usize>,
    /// Sums over the document's masks, cold and llguidance only where both engines took
    /// the whole document (else 0).
    pub cold_us: f64,
    /// Summed over every mask of all `warm` passes (so `warm` times one pass's worth),
    /// wherever corral took the whole document, whatever llguidance did.
    pub warm_us: f64,
    pub llg_us: f64,
    #[serde(skip)]
    pub cold: Vec<f64>,
    #[serde(skip)]
    pub warm: Vec<f64>,
    #[serde(skip)]
    pub llg: Vec<f64>,
}

/// A schema's timing: one cold compile per document in each engine.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SchemaTiming {
    pub corral_error: Option<String>,
    pub llg_error: Option<String>,
    pub docs: Vec<DocTiming>,
}

/// Times `docs` of the schema at `path`: per document, a cold compile and first pass in
/// corral (no DFA cache, a fresh token-set cache), a fresh llguidance parser and its pass,
/// then `warm` more corral passes on the same constraint. Run it alone: it measures time.
pub fn time_schema(e: &Engines, path: &Path, docs: &[Document], warm: usize) -> SchemaTiming {
    let mut out = SchemaTiming::default();
    let source = match Source::schema(path) {
        Ok(s) => s,
        Err(err) => {
            out.corral_error = Some(format!("{err:#}"));
            out.llg_error = out.corral_error.clone();
            return out;
        }
    };
    let eos = e.factory.tok_env().tok_trie().eos_token();
    for d in docs {
        let Ok(tokens) = e.tokens(&d.text) else {
            continue;
        };
        let t0 = Instant::now();
        let c = match e.cold_constraint(&source) {
            Ok(c) => c,
            Err(err) => {
                out.corral_error = Some(format!("{err:#}"));
                // llguidance is still tried, so its count of compiled schemas is its own.
                if let Err(err) = e.matcher(&source) {
                    out.llg_error = Some(format!("{err:#}"));
                }
                break;
            }
        };
        let corral_compile_ms = t0.elapsed().as_secs_f64() * 1e3;
        let cold = corral_pass(&c, &tokens);
        let t0 = Instant::now();
        let mut m = match e.matcher(&source) {
            Ok(m) => m,
            Err(err) => {
                out.llg_error = Some(format!("{err:#}"));
                break;
            }
        };
        let llg_compile_ms = t0.elapsed().as_secs_f64() * 1e3;
        let llg = llg_pass(&mut m, eos, &tokens);
        let mut warm_us = Vec::new();
        if cold.refused_at.is_none() {
            for _ in 0..warm {
                warm_us.extend(corral_pass(&c, &tokens).masks_us);
            }
        }
        let both = cold.refused_at.is_none() && llg.refused_at.is_none();
        let (cold_v, llg_v) = if both {
            (cold.masks_us, llg.masks_us)
        } else {
            (Vec::new(), Vec::new())
        };
        out.docs.push(DocTiming {
            instance: d.instance,
            form: d.form,
            tokens: tokens.len(),
            corral_compile_ms,
            llg_compile_ms,
            corral_refused_at: cold.refused_at,
            llg_refused_at: llg.refused_at,
            cold_us: cold_v.iter().sum(),
            warm_us: warm_us.iter().sum(),
            llg_us: llg_v.iter().sum(),
            cold: cold_v,
            warm: warm_us,
            llg: llg_v,
        });
    }
    out
}

/// Where corral's mask and brute force first differed.
#[derive(Clone, Debug, Serialize)]
pub struct WrongMask {
    pub instance: usize,
    pub form: Form,
    pub step: usize,
    /// The output before the step (lossy UTF-8).
    pub output: String,
    /// Allowed by corral alone, refused by it alone (at most 10 each, as token text).
    pub extra: Vec<String>,
    pub missing: Vec<String>,
}

/// A valid instance corral refused, with brute force agreeing that the refused token
/// (or EOS) cannot follow.
#[derive(Clone, Debug, Serialize)]
pub struct Refusal {
    pub instance: usize,
    pub form: Form,
    pub step: usize,
    pub output: String,
    /// Why the refusal is right, if it is: the instance breaks a format the benchmark did
    /// not assert (a validator with formats asserted gives this error), or its properties
    /// are out of the schema's order, which corral's default grammar keeps (the instance
    /// with its keys put in the schema's order is taken). `None`: a false rejection.
    pub explained: Option<String>,
}

/// A schema's brute-force check.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BruteCheck {
    pub corral_error: Option<String>,
    /// Masks compared with brute force.
    pub steps: usize,
    pub wrong: Vec<WrongMask>,
    pub refused: Vec<Refusal>,
    /// Documents the tokenizer could not encode.
    pub untokenized: Vec<String>,
}

impl BruteCheck {
    /// Refusals of instances valid even with formats asserted.
    pub fn false_rejections(&self) -> usize {
        self.refused
            .iter()
            .filter(|r| r.explained.is_none())
            .count()
    }

    /// Wrong masks, false rejections and documents left untokenized.
    pub fn failures(&self) -> usize {
        self.wrong.len() + self.false_rejections() + self.untokenized.len()
    }
}

/// [`brute_schema`] on the first `instances` instances of each entry, written in `forms`
/// (an instance without a pretty form counts once), in parallel across schemas.
pub fn brute_all(
    e: &Engines,
    entries: &[Entry],
    instances: usize,
    forms: &[Form],
) -> Vec<BruteCheck> {
    use rayon::prelude::*;
    entries
        .par_iter()
        .map(|entry| {
            let docs: Vec<_> = documents(entry, instances)
                .into_iter()
                .filter(|d| forms.contains(&d.form))
                .collect();
            brute_schema(e, entry, &docs)
        })
        .collect()
}

fn token_text(e: &Engines, t: usize) -> String {
    let bytes = e
        .space
        .vocab()
        .token_bytes(TokenId(t as u32))
        .unwrap_or(b"");
    format!("{t}:{:?}", String::from_utf8_lossy(bytes))
}

/// Replays `docs` through a cold constraint for the schema at `path`, comparing corral's
/// mask with [`brute_force_mask`] before every token and after the last.
pub fn brute_schema(e: &Engines, entry: &Entry, docs: &[Document]) -> BruteCheck {
    let mut out = BruteCheck::default();
    let c = match Source::schema(&entry.path).and_then(|s| e.cold_constraint(&s)) {
        Ok(c) => c,
        Err(err) => {
            out.corral_error = Some(format!("{err:#}"));
            return out;
        }
    };
    let eos = c.space().eos().to_vec();
    for d in docs {
        let tokens = match e.tokens(&d.text) {
            Ok(t) => t,
            Err(err) => {
                out.untokenized
                    .push(format!("instance {}: {err:#}", d.instance));
                continue;
            }
        };
        let mut a = RobustConstrainedAdapter::new(c.clone());
        let mut mask = a.empty_mask();
        for i in 0..=tokens.len() {
            let output = String::from_utf8_lossy(a.output()).into_owned();
            let computed = a.compute_mask(&mut mask);
            let brute = brute_force_mask(&a);
            out.steps += 1;
            if computed.is_err() || mask != brute {
                let diff = |x: &corral_trie::FixedBitSet, y: &corral_trie::FixedBitSet| {
                    x.difference(y).take(10).map(|t| token_text(e, t)).collect()
                };
                let (extra, missing) = if computed.is_err() {
                    (Vec::new(), diff(&brute, &mask))
                } else {
                    (diff(&mask, &brute), diff(&brute, &mask))
                };
                out.wrong.push(WrongMask {
                    instance: d.instance,
                    form: d.form,
                    step: i,
                    output,
                    extra,
                    missing,
                });
                break;
            }
            let taken = match tokens.get(i) {
                Some(&t) => mask.contains(t.index()) && a.step_with_token(t).is_ok(),
                None => eos.iter().any(|t| mask.contains(t.index())),
            };
            if !taken {
                out.refused.push(Refusal {
                    instance: d.instance,
                    form: d.form,
                    step: i,
                    output,
                    explained: explain_refusal(
                        e,
                        &entry.path,
                        &entry.instances[d.instance],
                        &d.text,
                    ),
                });
                break;
            }
        }
    }
    out
}

/// Why corral may rightly refuse `instance` (written as `text`) under the schema at `path`:
/// a format error, or properties out of the schema's order. `None` if neither holds.
fn explain_refusal(e: &Engines, path: &Path, instance: &Value, text: &str) -> Option<String> {
    if let Some(err) = validator_error(path, instance) {
        return Some(format!("format: {err}"));
    }
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let mut maps = Vec::new();
    property_lists(&schema, &mut maps);
    let reordered = serde_json::to_string(&in_schema_order(instance, &maps)).ok()?;
    let takes = |grammar: Arc<corral_grammar::Grammar>, text: &str| {
        let mut a = RobustConstrainedAdapter::new(Constraint::new(grammar, e.space.clone()));
        a.push_bytes(text.as_bytes()) == Ok(true) && a.is_accepting()
    };
    let text_of_schema = std::fs::read_to_string(path).ok()?;
    let compiled = corral_schema::compile_json_schema(&text_of_schema, &Default::default()).ok()?;
    if reordered != text && takes(compiled.grammar.clone(), &reordered) {
        return Some("property order: taken with its keys in the schema's order".to_string());
    }
    // Subschemas merged (`allOf`, `oneOf` branches) order their properties in ways the
    // reordering above does not follow: search for an order of each object's keys that the
    // grammar takes.
    let mut a = RobustConstrainedAdapter::new(Constraint::new(compiled.grammar, e.space.clone()));
    if push_in_taken_order(&mut a, instance, &mut 10_000) && a.is_accepting() {
        return Some("property order: taken with each key where the grammar takes it".to_string());
    }
    // Or the grammar with any property order takes it (small objects only: it grows as 2^n).
    let any = JsonSchemaOptions {
        property_order: PropertyOrder::Any,
        ..JsonSchemaOptions::default()
    };
    let grammar = corral_schema::compile_json_schema(&text_of_schema, &any)
        .ok()?
        .grammar;
    takes(grammar, text).then(|| "property order: taken in any property order".to_string())
}

/// Pushes `v` (compact) on `a`, each object's keys in an order the grammar takes: at each
/// member a key whose `"key":` it takes there, the next such key tried when the rest of the
/// object then fails, within `budget` tries in all. Whether all of it was taken.
fn push_in_taken_order(a: &mut RobustConstrainedAdapter, v: &Value, budget: &mut u32) -> bool {
    let push = |a: &mut RobustConstrainedAdapter, s: &str| a.push_bytes(s.as_bytes()) == Ok(true);
    match v {
        Value::Object(m) => {
            let left: Vec<&String> = m.keys().collect();
            push(a, "{") && members(a, m, &left, true, budget)
        }
        Value::Array(xs) => {
            if !push(a, "[") {
                return false;
            }
            for (i, x) in xs.iter().enumerate() {
                if (i > 0 && !push(a, ",")) || !push_in_taken_order(a, x, budget) {
                    return false;
                }
            }
            push(a, "]")
        }
        scalar => push(
            a,
            &serde_json::to_string(scalar).expect("a JSON value serializes"),
        ),
    }
}

/// The members `left` of object `m`, then its closing brace, for [`push_in_taken_order`].
fn members(
    a: &mut RobustConstrainedAdapter,
    m: &serde_json::Map<String, Value>,
    left: &[&String],
    first: bool,
    budget: &mut u32,
) -> bool {
    if left.is_empty() {
        return a.push_bytes(b"}") == Ok(true);
    }
    for (i, k) in left.iter().enumerate() {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        let key = serde_json::to_string(k).expect("a string serializes");
        let head = format!("{}{key}:", if first { "" } else { "," });
        let mut f = a.fork();
        if f.push_bytes(head.as_bytes()) != Ok(true) || !push_in_taken_order(&mut f, &m[*k], budget)
        {
            continue;
        }
        let rest: Vec<&String> = left
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, k)| *k)
            .collect();
        if members(&mut f, m, &rest, false, budget) {
            *a = f;
            return true;
        }
    }
    false
}

/// The property names of every `properties` keyword in `schema`, each list in its order.
fn property_lists(schema: &Value, out: &mut Vec<Vec<String>>) {
    match schema {
        Value::Object(m) => {
            if let Some(Value::Object(props)) = m.get("properties") {
                out.push(props.keys().cloned().collect());
            }
            m.values().for_each(|v| property_lists(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| property_lists(v, out)),
        _ => {}
    }
}

/// `v` with each object's keys in the order of the `properties` list that names most of
/// them, the keys it does not name after, as they were: the order
/// corral's default grammar keeps, found without resolving which subschema applies.
fn in_schema_order(v: &Value, lists: &[Vec<String>]) -> Value {
    match v {
        Value::Object(m) => {
            let named = |l: &Vec<String>| m.keys().filter(|k| l.contains(k)).count();
            let best = lists
                .iter()
                .max_by(|a, b| named(a).cmp(&named(b)).then(std::cmp::Ordering::Greater));
            let rank = |k: &String| {
                best.and_then(|l| l.iter().position(|x| x == k))
                    .unwrap_or(usize::MAX)
            };
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_by_key(|k| rank(k));
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), in_schema_order(&m[k], lists)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| in_schema_order(x, lists)).collect()),
        other => other.clone(),
    }
}

/// The first error of `instance` under the schema at `path` with formats asserted. `None`
/// if it is valid, and also where the schema cannot be read or the validator cannot be
/// built: a refusal is explained only by an error the validator found in the instance.
fn validator_error(path: &Path, instance: &Value) -> Option<String> {
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let validator = corral_schema::validate::Validator::new(&schema).ok()?;
    validator.errors(instance).into_iter().next()
}
