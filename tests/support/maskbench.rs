//! MaskBench conformance: every schema of the JSONSchemaBench subset in
//! `../shared/conformance/jsonschemabench` compiled (strict mode), every instance matched,
//! beside llguidance's published per-schema results. Used by the conformance test
//! (`tests/schema_conformance.rs`) and printed in full by `examples/maskbench.rs`.
//!
//! Instances are written compactly (`serde_json`, keys in their order in the data). An
//! instance the default (schema) property order refuses but that is accepted with its keys
//! in schema order (or under `PropertyOrder::Any`) counts as "out of order", apart from
//! false rejections.
#![allow(dead_code)]

use corral::grammar::{DfaCache, MatchOutcome, match_bytes};
use corral::schema::{CompiledSchema, JsonSchemaOptions, PropertyOrder, compile_json_schema};
use corral::schema::{SchemaError, SchemaErrorKind};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Only schemas whose `Collection/file` contains this.
    pub filter: String,
    /// Print each refusal, false rejection and false accept as it happens.
    pub verbose: bool,
    /// Also time each compile with the lexeme cache cleared first (a second compile).
    pub cold_timings: bool,
}

/// The counts of a run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub schemas: usize,
    pub compiled: usize,
    pub valid_ok: usize,
    pub invalid_ok: usize,
    pub false_rejects: usize,
    pub out_of_order: usize,
    pub false_accepts: usize,
    pub schemas_with_failures: usize,
    /// Refusals by reason.
    pub refused: BTreeMap<String, usize>,
    pub llg_compiled: usize,
    pub llg_failing: usize,
    pub both: usize,
    pub only_corral: usize,
    pub only_llg: usize,
    pub cold_ms: Vec<f64>,
    pub warm_ms: Vec<f64>,
    /// Details of false accepts and false rejections.
    pub failures: Vec<String>,
}

/// Runs the subset in `dir` (the `jsonschemabench` folder).
pub fn run(dir: &Path, o: &Options) -> Report {
    let dir = dir.display().to_string();
    let (filter, verbose) = (o.filter.as_str(), o.verbose);
    let llg: BTreeMap<String, Value> = std::fs::read_to_string(format!(
        "{dir}/../llguidance/json_stats/expected_maskbench.json"
    ))
    .ok()
    .and_then(|t| serde_json::from_str(&t).ok())
    .unwrap_or_default();

    let mut t = Report::default();
    let cache = DfaCache::default();
    let mut files: Vec<_> = std::fs::read_dir(format!("{dir}/_instances"))
        .expect("instances folder")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    for path in files {
        let coll = path.file_stem().unwrap().to_string_lossy().to_string();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let rec: Value = serde_json::from_str(line).unwrap();
            let file = rec["file"].as_str().unwrap();
            if !format!("{coll}/{file}").contains(filter) {
                continue;
            }
            let text = std::fs::read_to_string(format!("{dir}/{coll}/{file}")).unwrap();
            t.schemas += 1;
            let source = rec["source"].as_str().unwrap_or_default();
            let key = source.rsplit('/').next().unwrap_or_default();
            let llg_result = llg.get(key);
            let llg_compiled = llg_result.is_some_and(|v| v.get("json_error").is_none());
            t.llg_compiled += llg_compiled as usize;
            t.llg_failing +=
                llg_result.is_some_and(|v| v.get("validation_error").is_some()) as usize;

            let opts = JsonSchemaOptions::default().with_origin(file);
            if o.cold_timings {
                // No DFA cache: every lexeme built.
                let t0 = Instant::now();
                let _ = compile_json_schema(&text, &opts);
                t.cold_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            // Warm: the DFAs of this schema (and of those before it) in the cache.
            let opts = opts.with_dfa_cache(Some(cache.clone()));
            let _ = compile_json_schema(&text, &opts);
            let t0 = Instant::now();
            let compiled = compile_json_schema(&text, &opts);
            t.warm_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            if verbose && t.warm_ms[t.warm_ms.len() - 1] > 100.0 {
                println!(
                    "slow {coll}/{file}: {:.0} ms",
                    t.warm_ms[t.warm_ms.len() - 1]
                );
            }
            let c = match compiled {
                Err(e) => {
                    if verbose {
                        println!(
                            "refused {coll}/{file} (llguidance: {}): {}",
                            if llg_compiled { "compiles" } else { "refuses" },
                            refusal(&e)
                        );
                    }
                    *t.refused.entry(refusal(&e)).or_default() += 1;
                    t.only_llg += llg_compiled as usize;
                    continue;
                }
                Ok(c) => c,
            };
            t.compiled += 1;
            if llg_compiled {
                t.both += 1;
            } else {
                t.only_corral += 1;
            }
            let mut any_order: Option<Option<CompiledSchema>> = None;
            let mut failed = false;
            for test in rec["tests"].as_array().unwrap() {
                let valid = test["valid"].as_bool().unwrap();
                let data = serde_json::to_string(&test["data"]).unwrap();
                let outcome = match_bytes(&c.grammar, data.as_bytes());
                let accepted = matches!(outcome, Ok(MatchOutcome::Accepted));
                match (valid, accepted) {
                    (true, true) => t.valid_ok += 1,
                    (false, false) => t.invalid_ok += 1,
                    (true, false) => {
                        let unordered = any_order.get_or_insert_with(|| {
                            compile_json_schema(
                                &text,
                                &opts.clone().with_property_order(PropertyOrder::Any),
                            )
                            .ok()
                        });
                        let accepts = |s: &str| {
                            matches!(
                                match_bytes(&c.grammar, s.as_bytes()),
                                Ok(MatchOutcome::Accepted)
                            )
                        };
                        let schema: Value = serde_json::from_str(&text).unwrap();
                        let in_order =
                            reorder(&test["data"], &expand(&schema, &schema, 0), &schema);
                        let reordered = accepts(&serde_json::to_string(&in_order).unwrap())
                            || unordered.as_ref().is_some_and(|u| {
                                matches!(
                                    match_bytes(&u.grammar, data.as_bytes()),
                                    Ok(MatchOutcome::Accepted)
                                )
                            });
                        if reordered {
                            t.out_of_order += 1;
                        } else {
                            t.false_rejects += 1;
                            failed = true;
                            if verbose {
                                println!(
                                    "false reject {coll}/{file}: {outcome:?}\n  {}",
                                    clip(&data)
                                );
                            }
                        }
                    }
                    (false, true) => {
                        t.false_accepts += 1;
                        failed = true;
                        let line = format!("false accept {coll}/{file}: {}", clip(&data));
                        if verbose {
                            println!("{line}");
                        }
                        t.failures.push(line);
                    }
                }
            }
            t.schemas_with_failures += failed as usize;
        }
    }
    t
}

impl Report {
    /// The report, as `examples/maskbench.rs` prints it.
    pub fn print(&mut self) {
        let mut r: Vec<_> = self.refused.iter().collect();
        r.sort_by_key(|x| std::cmp::Reverse(*x.1));
        println!("refused, by reason:");
        for (k, n) in &r {
            println!("  {n:5}  {k}");
        }
        println!();
        println!("schemas                      {}", self.schemas);
        println!(
            "compiled by corral           {} ({:.1}%)",
            self.compiled,
            100.0 * self.compiled as f64 / self.schemas.max(1) as f64
        );
        println!(
            "compiled by llguidance       {} (expected_maskbench.json: no json_error)",
            self.llg_compiled
        );
        println!(
            "  both {}, only corral {}, only llguidance {}",
            self.both, self.only_corral, self.only_llg
        );
        println!("valid instances accepted     {}", self.valid_ok);
        println!("invalid instances refused    {}", self.invalid_ok);
        println!("false rejections             {}", self.false_rejects);
        println!(
            "out of schema order          {} (valid, refused only for property order)",
            self.out_of_order
        );
        println!("false accepts                {}", self.false_accepts);
        println!(
            "schemas with a failing test  corral {}, llguidance {} (validation_error)",
            self.schemas_with_failures, self.llg_failing
        );
        if !self.cold_ms.is_empty() {
            println!(
                "compile ms, cold (lexeme cache cleared): {}",
                pct(&mut self.cold_ms)
            );
        }
        println!(
            "compile ms, warm (process cache):        {}",
            pct(&mut self.warm_ms)
        );
    }
}

/// The schema nodes that apply at a place: the node, and what its references and
/// combinators lead to.
/// In the order the compiler merges them: the node, its `$ref` target and `allOf` parts
/// first, then the branches of `anyOf`/`oneOf`.
fn expand<'a>(s: &'a Value, root: &'a Value, depth: u32) -> Vec<&'a Value> {
    let mut base = Vec::new();
    let mut branches = Vec::new();
    collect(s, root, depth, &mut base, &mut branches);
    base.extend(branches);
    base
}

fn collect<'a>(
    s: &'a Value,
    root: &'a Value,
    depth: u32,
    base: &mut Vec<&'a Value>,
    branches: &mut Vec<&'a Value>,
) {
    base.push(s);
    if depth > 12 {
        return;
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str)
        && let Some(t) = r.strip_prefix('#').and_then(|p| root.pointer(p))
    {
        collect(t, root, depth + 1, base, branches);
    }
    for b in s
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        collect(b, root, depth + 1, base, branches);
    }
    for k in ["anyOf", "oneOf"] {
        for b in s.get(k).and_then(Value::as_array).into_iter().flatten() {
            branches.extend(expand(b, root, depth + 1));
        }
    }
}

/// The instance with every object's keys in the order the schema lists them (for telling
/// out-of-order instances apart).
fn reorder(v: &Value, schemas: &[&Value], root: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut order: Vec<&str> = Vec::new();
            for s in schemas {
                for k in s
                    .get("properties")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flat_map(|p| p.keys())
                {
                    if !order.contains(&k.as_str()) {
                        order.push(k);
                    }
                }
                for k in s
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(k) = k.as_str()
                        && !order.contains(&k)
                    {
                        order.push(k);
                    }
                }
            }
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_by_key(|k| order.iter().position(|o| o == k).unwrap_or(usize::MAX));
            let mut out = serde_json::Map::new();
            for k in keys {
                let mut kids = Vec::new();
                for s in schemas {
                    let sub = s.get("properties").and_then(|p| p.get(k.as_str()));
                    for x in sub.into_iter().chain(s.get("additionalProperties")) {
                        kids.extend(expand(x, root, 0));
                    }
                    for (_, x) in s
                        .get("patternProperties")
                        .and_then(Value::as_object)
                        .into_iter()
                        .flatten()
                    {
                        kids.extend(expand(x, root, 0));
                    }
                }
                out.insert(k.clone(), reorder(&m[k], &kids, root));
            }
            Value::Object(out)
        }
        Value::Array(xs) => Value::Array(
            xs.iter()
                .enumerate()
                .map(|(i, x)| {
                    let mut kids = Vec::new();
                    for s in schemas {
                        for key in ["prefixItems", "items"] {
                            match s.get(key) {
                                Some(Value::Array(p)) => {
                                    if let Some(x) = p.get(i) {
                                        kids.extend(expand(x, root, 0));
                                    }
                                }
                                Some(x) => kids.extend(expand(x, root, 0)),
                                None => {}
                            }
                        }
                        if let Some(x) = s.get("additionalItems") {
                            kids.extend(expand(x, root, 0));
                        }
                    }
                    reorder(x, &kids, root)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn refusal(e: &SchemaError) -> String {
    match &e.kind {
        SchemaErrorKind::Unsupported {
            keyword, reason, ..
        } => format!("{keyword}: {reason}"),
        SchemaErrorKind::Limit { limit_name, .. } => format!("limit {limit_name}"),
        SchemaErrorKind::Grammar(g) => match &g.kind {
            corral::grammar::ErrorKind::Limit { limit_name, .. } => format!("limit {limit_name}"),
            other => other.to_string().chars().take(80).collect(),
        },
        SchemaErrorKind::Invalid { message, .. } => {
            format!(
                "invalid schema: {}",
                message.chars().take(60).collect::<String>()
            )
        }
        other => other.to_string().chars().take(80).collect(),
    }
}

fn clip(s: &str) -> String {
    s.chars().take(240).collect()
}

fn pct(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| {
        v.get(((v.len().max(1) - 1) as f64 * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    format!(
        "median {:.2}, p90 {:.2}, p99 {:.2}, max {:.2}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    )
}
