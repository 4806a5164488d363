//! corral vs llguidance 1.9, same process, same tokenizer, same documents, equivalent
//! grammars: llama.cpp's json.gbnf for corral, its Lark transliteration (an explicit `ws`
//! rule, the same string and number lexemes) for llguidance, which has no GBNF front end.
//!
//! For each document: its canonical tokenization is replayed `REPS` times through a fresh
//! matcher of each engine, timing one `compute_mask` per token. The first repetition of
//! corral includes filling its per-lexeme-state caches (shared by later matchers of the
//! same grammar, as in serving); llguidance keeps no such cache across matchers. Compile
//! times are medians over 50 compiles.
//!
//! Run: `cargo run --release -p corral-llguidance-compare -- [--schema S.json] [TOKENIZER.json] [DOC.json...]`
//! (defaults: assets/tokenizers/llama3_1/tokenizer.json and generated documents). With
//! `--schema`, both engines compile the JSON Schema instead (corral's schema front end,
//! llguidance's `TopLevelGrammar::from_json_schema`), each with its default options.

use anyhow::{Context, Result, anyhow};
use corral_engine::replay::stats;
use corral_engine::{Constraint, RobustConstrainedAdapter};
use corral_grammar::{CompileOptions, compile_gbnf};
use corral_trie::{TokenSpace, Vocabulary, continuation_tokenizer};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

const REPS: usize = 5;

/// llama.cpp's json.gbnf, transliterated to Lark (from ../shared/FACTS.md).
const JSON_LARK: &str = r#"start: object
value: object | array | string | number | ("true" | "false" | "null") ws
object: "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array: "[" ws ( value ("," ws value)* )? "]" ws
string: STRING ws
number: NUMBER ws
STRING: /"([^"\\\x7F\x00-\x1F]|\\(["\\bfnrt]|u[0-9a-fA-F]{4}))*"/
NUMBER: /-?([0-9]|[1-9][0-9]{0,15})(\.[0-9]+)?([eE][-+]?[0-9][1-9]{0,15})?/
ws: /( |\n[ \t]{0,20})?/
"#;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Row {
    engine: &'static str,
    rep: usize,
    mean: f64,
    p50: f64,
    p99: f64,
}

/// The grammar both engines compile.
enum Source {
    Json {
        gbnf: String,
    },
    Schema {
        text: String,
        value: serde_json::Value,
    },
}

impl Source {
    fn corral(&self) -> Arc<corral_grammar::Grammar> {
        match self {
            Source::Json { gbnf } => compile_gbnf(gbnf, &CompileOptions::default()).unwrap(),
            Source::Schema { text, .. } => {
                corral_schema::compile_json_schema(text, &Default::default())
                    .unwrap()
                    .grammar
            }
        }
    }

    fn llguidance(&self) -> llguidance::api::TopLevelGrammar {
        match self {
            Source::Json { .. } => {
                llguidance::api::TopLevelGrammar::from_lark(JSON_LARK.to_string())
            }
            Source::Schema { value, .. } => {
                llguidance::api::TopLevelGrammar::from_json_schema(value.clone())
            }
        }
    }
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let schema = match args.iter().position(|a| a == "--schema") {
        Some(i) => {
            let path = args.remove(i + 1);
            args.remove(i);
            let text = std::fs::read_to_string(&path).with_context(|| path.clone())?;
            let value = serde_json::from_str(&text)?;
            Some(Source::Schema { text, value })
        }
        None => None,
    };
    let tok_path = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("assets/tokenizers/llama3_1/tokenizer.json"));
    let source = match schema {
        Some(s) => s,
        None => Source::Json {
            gbnf: std::fs::read_to_string(
                root().join("../shared/conformance/llama_cpp/grammars/json.gbnf"),
            )
            .context("json.gbnf from ../shared/conformance")?,
        },
    };
    let docs: Vec<(String, String)> = if args.len() > 1 {
        args[1..]
            .iter()
            // A JSON value, without the file's final line break.
            .map(|p| {
                Ok((
                    p.clone(),
                    std::fs::read_to_string(p)?.trim_end().to_string(),
                ))
            })
            .collect::<Result<_>>()?
    } else {
        vec![
            (
                "pretty-3.7KB".into(),
                std::fs::read_to_string(root().join("benches/data/pretty.json"))?,
            ),
            (
                "strings-450tok".into(),
                std::fs::read_to_string(root().join("benches/data/strings.json"))?,
            ),
        ]
    };

    // corral setup
    let t0 = Instant::now();
    let hf = tokenizers::Tokenizer::from_file(&tok_path).map_err(|e| anyhow!("{e}"))?;
    let vocab = Vocabulary::from_tokenizer(&hf)?;
    let eos = vocab.default_eos().into_iter().collect();
    let space = Arc::new(TokenSpace::new(vocab, None, eos));
    let corral_setup = t0.elapsed();
    // llguidance setup
    let t0 = Instant::now();
    let env = toktrie_hf_tokenizers::ByteTokenizer::from_file(&tok_path)?.into_tok_env(None)?;
    let mut factory = llguidance::ParserFactory::new_simple(&env)?;
    factory.quiet();
    let llg_setup = t0.elapsed();
    println!(
        "tokenizer {} ({} ids)",
        tok_path.display(),
        space.vocab().len()
    );
    println!(
        "one-time setup per tokenizer: corral {corral_setup:.2?} (vocabulary + trie), llguidance {llg_setup:.2?}"
    );

    // Compile times.
    let mut cc = Vec::new();
    let mut lc = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let g = source.corral();
        cc.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(g);
        let t = Instant::now();
        let p = factory.create_parser(source.llguidance())?;
        lc.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(p);
    }
    let (_, c_med, _) = stats(&cc);
    let (_, l_med, _) = stats(&lc);
    println!("compile the grammar, median of 50: corral {c_med:.3} ms, llguidance {l_med:.3} ms");

    let cont = continuation_tokenizer(&hf);
    for (name, doc) in &docs {
        let ids = cont
            .encode(doc.as_str(), false)
            .map_err(|e| anyhow!("{e}"))?
            .get_ids()
            .to_vec();
        println!("\n== {name}: {} bytes, {} tokens", doc.len(), ids.len());
        let constraint = Constraint::new(source.corral(), space.clone());
        let mut rows = Vec::new();
        for rep in 0..REPS {
            // corral
            let mut a = RobustConstrainedAdapter::new(constraint.clone());
            let mut mask = a.new_mask();
            let mut times = Vec::with_capacity(ids.len());
            for &t in &ids {
                let s = Instant::now();
                a.compute_mask(&mut mask).unwrap();
                times.push(s.elapsed().as_secs_f64() * 1e6);
                assert!(mask.contains(t as usize), "corral refused token {t}");
                a.step_with_token(corral_trie::TokenId(t)).unwrap();
            }
            a.compute_mask(&mut mask).unwrap();
            assert!(
                space.eos().iter().any(|&e| mask.contains(e.index())),
                "corral: EOS at the end"
            );
            let (mean, p50, p99) = stats(&times);
            rows.push(Row {
                engine: "corral",
                rep,
                mean,
                p50,
                p99,
            });
            // llguidance
            let parser = factory.create_parser(source.llguidance())?;
            let mut m = llguidance::Matcher::new(Ok(parser));
            let mut times = Vec::with_capacity(ids.len());
            for &t in &ids {
                let s = Instant::now();
                let mask = m.compute_mask().map_err(|e| anyhow!("{e}"))?;
                times.push(s.elapsed().as_secs_f64() * 1e6);
                assert!(mask.is_allowed(t), "llguidance refused token {t}");
                m.consume_token(t).map_err(|e| anyhow!("{e}"))?;
            }
            assert!(
                m.is_accepting().unwrap_or(false),
                "llguidance: accepting at the end"
            );
            let (mean, p50, p99) = stats(&times);
            rows.push(Row {
                engine: "llguidance",
                rep,
                mean,
                p50,
                p99,
            });
        }
        println!(
            "{:<11} {:>4} {:>10} {:>10} {:>10}",
            "engine", "rep", "mean us", "p50 us", "p99 us"
        );
        for r in &rows {
            println!(
                "{:<11} {:>4} {:>10.2} {:>10.2} {:>10.2}",
                r.engine, r.rep, r.mean, r.p50, r.p99
            );
        }
        let avg = |e: &str, warm: bool| {
            let v: Vec<&Row> = rows
                .iter()
                .filter(|r| r.engine == e && (!warm || r.rep > 0))
                .collect();
            let n = v.len() as f64;
            (
                v.iter().map(|r| r.mean).sum::<f64>() / n,
                v.iter().map(|r| r.p50).sum::<f64>() / n,
                v.iter().map(|r| r.p99).sum::<f64>() / n,
            )
        };
        let (cm, cp50, cp99) = avg("corral", false);
        let (lm, lp50, lp99) = avg("llguidance", false);
        let (cwm, _, cwp99) = avg("corral", true);
        println!(
            "summary {name}: mean over {REPS} reps corral {cm:.2} us (p50 {cp50:.2}, p99 {cp99:.2}), llguidance {lm:.2} us (p50 {lp50:.2}, p99 {lp99:.2}); corral/llguidance = {:.2}; corral warm reps only: mean {cwm:.2} us, p99 {cwp99:.2} us",
            cm / lm
        );
    }
    Ok(())
}
