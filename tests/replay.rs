//! Replays on the real asset tokenizers (scripts/fetch-assets): valid JSON documents under
//! llama.cpp's json.gbnf, canonical and 100 random tokenizations each, are never refused and
//! end where EOS is allowed; invalid documents are refused at the right byte; the other
//! shipped grammars replay inputs written for them. Also the `corral replay` CLI contract.
//!
//! Skipped, with a note, when the assets or ../shared/conformance are missing.

mod common;

use common::{llama_cpp_data, run_corral};
use corral::engine::Constraint;
use corral::engine::replay::replay;
use corral::grammar::{CompileOptions, compile_gbnf};
use corral::trie::{TokenId, TokenSpace, Vocabulary, continuation_tokenizer};
use std::path::PathBuf;
use std::sync::Arc;

const TOKENIZERS: [&str; 8] = [
    "llama3_1",
    "qwen3",
    "gptoss",
    "llama2",
    "gemma3",
    "deepseek_v3",
    "gpt4o",
    "mistral_nemo",
];

/// More families, replayed canonically and in a few random tokenizations (the heavier
/// tests above run on TOKENIZERS). `llama2` above is Mistral-7B's vocabulary (the package's
/// name); `gpt4` is cl100k.
const MORE_TOKENIZERS: [&str; 9] = [
    "gpt4",
    "gpt2",
    "gemma",
    "chatglm3",
    "baichuan2",
    "yi",
    "claude",
    "internlm2",
    "command_r_plus",
];

fn tokenizer_path(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("assets/tokenizers")
        .join(name)
        .join("tokenizer.json");
    common::require_input(p, "run scripts/fetch-assets")
}

fn documents() -> Vec<(String, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![
        (
            "person".to_string(),
            std::fs::read_to_string(root.join("examples/data/person.json")).unwrap(),
        ),
        (
            "pretty".to_string(),
            std::fs::read_to_string(root.join("benches/data/pretty.json")).unwrap(),
        ),
        (
            "strings".to_string(),
            std::fs::read_to_string(root.join("benches/data/strings.json")).unwrap(),
        ),
    ];
    docs.push((
        "mixed".into(),
        "{\"empty\": {}, \"list\": [], \"n\": [-0.5, 12, 3e-7, 1E+22], \"s\": \"tab\\t \\\"q\\\" \\u00e9 é 日本 😀\",\n\"deep\": [[[[{\"k\": null}]]]], \"b\": [true,false]}".into(),
    ));
    docs
}

struct Setup {
    name: &'static str,
    tok: tokenizers::Tokenizer,
    space: Arc<TokenSpace>,
}

fn setups() -> &'static [Setup] {
    static SETUPS: std::sync::OnceLock<Vec<Setup>> = std::sync::OnceLock::new();
    SETUPS.get_or_init(load_setups)
}

fn load_setups() -> Vec<Setup> {
    TOKENIZERS
        .iter()
        .map(|&name| {
            let tok = tokenizers::Tokenizer::from_file(tokenizer_path(name)).unwrap();
            let vocab = Vocabulary::from_tokenizer(&tok).unwrap();
            let eos = vocab.default_eos().into_iter().collect();
            Setup {
                name,
                tok: continuation_tokenizer(&tok),
                space: Arc::new(TokenSpace::new(vocab, None, eos)),
            }
        })
        .collect()
}

fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn json_documents_replay_on_every_tokenizer() {
    let dir = llama_cpp_data();
    let gbnf = std::fs::read_to_string(dir.join("grammars/json.gbnf")).unwrap();
    let grammar = compile_gbnf(&gbnf, &CompileOptions::default()).unwrap();
    for s in setups().iter() {
        let c = Constraint::new(grammar.clone(), s.space.clone());
        for (doc_name, doc) in documents() {
            let canonical = s
                .tok
                .encode(doc.as_str(), false)
                .unwrap()
                .get_ids()
                .iter()
                .map(|&t| TokenId(t))
                .collect::<Vec<_>>();
            assert_eq!(
                s.space.vocab().decode_bytes(&canonical),
                doc.as_bytes(),
                "{}: canonical bytes",
                s.name
            );
            let mut next = rng(doc.len() as u64);
            let mut runs = vec![canonical];
            for _ in 0..100 {
                runs.push(
                    s.space
                        .trie()
                        .random_segmentation(doc.as_bytes(), &mut next)
                        .unwrap(),
                );
            }
            let report = replay(&c, &runs);
            assert!(
                report.first_reject.is_none(),
                "{} {doc_name}: {:?}",
                s.name,
                report.first_reject
            );
            assert!(
                report.eos_allowed_at_end,
                "{} {doc_name}: EOS at the end",
                s.name
            );
            let corral::engine::replay::Summary { mean, p50, p99 } = report.mask_stats();
            eprintln!(
                "{} {doc_name}: {} runs, {} tokens, mask mean {mean:.1} us p50 {p50:.1} p99 {p99:.1}",
                s.name, report.runs, report.tokens
            );
        }
    }
}

/// Every document's canonical tokenization, and five random ones, replay on the other
/// families, with the end token the model's configuration names (or the family's usual
/// one) allowed at the end.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn json_documents_replay_on_more_families() {
    let dir = llama_cpp_data();
    let gbnf = std::fs::read_to_string(dir.join("grammars/json.gbnf")).unwrap();
    let grammar = compile_gbnf(&gbnf, &CompileOptions::default()).unwrap();
    for name in MORE_TOKENIZERS {
        let path = tokenizer_path(name);
        let tok = tokenizers::Tokenizer::from_file(&path).unwrap();
        let vocab = Vocabulary::from_tokenizer(&tok).unwrap();
        let eos = vocab
            .configured_eos(path.parent().unwrap())
            .or_else(|| vocab.default_eos().map(|e| vec![e]))
            .unwrap_or_else(|| panic!("{name}: no end token"));
        let tok = continuation_tokenizer(&tok);
        let space = Arc::new(TokenSpace::new(vocab, None, eos));
        let c = Constraint::new(grammar.clone(), space.clone());
        for (doc_name, doc) in documents() {
            let canonical = TokenId::all(tok.encode(doc.as_str(), false).unwrap().get_ids());
            assert_eq!(
                space.vocab().decode_bytes(&canonical),
                doc.as_bytes(),
                "{name} {doc_name}: canonical bytes"
            );
            let mut next = rng(doc.len() as u64);
            let mut runs = vec![canonical];
            for _ in 0..5 {
                let run = space.trie().random_segmentation(doc.as_bytes(), &mut next);
                runs.push(run.unwrap());
            }
            let report = replay(&c, &runs);
            assert!(
                report.first_reject.is_none(),
                "{name} {doc_name}: {:?}",
                report.first_reject
            );
            assert!(report.eos_allowed_at_end, "{name} {doc_name}: end token");
        }
    }
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn invalid_documents_are_refused_at_the_right_byte() {
    let dir = llama_cpp_data();
    let gbnf = dir.join("grammars/json.gbnf");
    let tok = tokenizer_path("llama3_1");
    let tmp = std::env::temp_dir().join(format!("corral-replay-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for (doc, bad_byte) in [
        (r#"{"a": 01}"#, 7),
        (r#"{"a": [1, 2,]}"#, 12),
        (r#"{"a": tru}"#, 9),
        (r#"{"a" 1}"#, 5),
        ("{\"a\": \"x\ny\"}", 8),
        (r#"{"a": 1}}"#, 8),
    ] {
        let path = tmp.join("doc.json");
        std::fs::write(&path, doc).unwrap();
        for tokenization in ["canonical", "random"] {
            let (code, out, err) = run_corral(
                &[
                    "replay",
                    "--tokenizer",
                    tok.to_str().unwrap(),
                    "--grammar",
                    gbnf.to_str().unwrap(),
                    "--text",
                    path.to_str().unwrap(),
                    "--tokenization",
                    tokenization,
                    "--runs",
                    "20",
                ],
                b"",
            );
            assert_eq!(code, 1, "{doc}: {err}");
            let last: serde_json::Value =
                serde_json::from_str(out.lines().last().unwrap()).unwrap();
            assert_eq!(last["rejected"], true);
            assert_eq!(
                last["first_reject"]["byte_offset"], bad_byte,
                "{doc} ({tokenization}): {last}"
            );
            assert_eq!(last["first_reject"]["run"], 0);
        }
    }
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
#[ignore = "needs scripts/fetch-assets"]
fn replay_cli_reports_the_contract_fields() {
    let dir = llama_cpp_data();
    let tok = tokenizer_path("qwen3");
    let gbnf = dir.join("grammars/json.gbnf");
    let doc = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/person.json");
    let args = |t: &'static str, runs: &'static str| {
        vec![
            "replay".to_string(),
            "--tokenizer".into(),
            tok.display().to_string(),
            "--grammar".into(),
            gbnf.display().to_string(),
            "--text".into(),
            doc.display().to_string(),
            "--tokenization".into(),
            t.into(),
            "--runs".into(),
            runs.into(),
            "--seed".into(),
            "7".into(),
        ]
    };
    for (t, runs) in [("canonical", "1"), ("random", "100")] {
        let a = args(t, runs);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (code, out, err) = run_corral(&a, b"");
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        for field in [
            "tokens",
            "runs",
            "rejected",
            "first_reject",
            "eos_allowed_at_end",
            "mask_us",
            "compile_ms",
        ] {
            assert!(v.get(field).is_some(), "missing {field}: {v}");
        }
        assert_eq!(v["runs"], runs.parse::<u64>().unwrap());
        assert_eq!(v["rejected"], false);
        assert!(v["first_reject"].is_null());
        assert_eq!(v["eos_allowed_at_end"], true);
        for k in ["mean", "p50", "p99"] {
            assert!(v["mask_us"][k].as_f64().unwrap() > 0.0);
        }
    }
    // Bad arguments: exit 2.
    let (code, _, err) = run_corral(
        &[
            "replay",
            "--tokenizer",
            "/nonexistent.json",
            "--grammar",
            gbnf.to_str().unwrap(),
            "--text",
            doc.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(code, 2, "{err}");
}

/// The other grammars shipped with llama.cpp, on inputs written for them.
#[test]
#[ignore = "needs scripts/fetch-assets"]
fn other_shipped_grammars_replay() {
    let dir = llama_cpp_data();
    let cases: &[(&str, &[&str])] = &[
        ("arithmetic.gbnf", &["1+2=3\n", "x1 *(y+2)=  z\n12/4=3\n"]),
        (
            "chess.gbnf",
            &[
                "1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n",
                "1. d4 d5\n2. c4 dxc4\n10. O-O O-O-O\n",
            ],
        ),
        ("list.gbnf", &["- apples\n- pears and plums\n- 3 kiwis\n"]),
        ("english.gbnf", &["The cat sat on the mat.\nIt was happy!"]),
        ("japanese.gbnf", &["こんにちは、世界。\nカタカナと漢字"]),
        ("json_arr.gbnf", &["[\n{\"a\": 1},\n[2, 3],\n\"x\"]"]),
        (
            "c.gbnf",
            &[
                "int main(){int x = 1;while(x<10){x = x+1;}return x;}",
                "float f(int a){return a*2;}char c(){}",
            ],
        ),
    ];
    for s in setups().iter() {
        for (file, inputs) in cases {
            let g = compile_gbnf(
                &std::fs::read_to_string(dir.join("grammars").join(file)).unwrap(),
                &CompileOptions::default(),
            )
            .unwrap();
            let c = Constraint::new(g, s.space.clone());
            for input in *inputs {
                let mut next = rng(input.len() as u64);
                let mut runs = vec![
                    s.tok
                        .encode(*input, false)
                        .unwrap()
                        .get_ids()
                        .iter()
                        .map(|&t| TokenId(t))
                        .collect::<Vec<_>>(),
                ];
                for _ in 0..20 {
                    runs.push(
                        s.space
                            .trie()
                            .random_segmentation(input.as_bytes(), &mut next)
                            .unwrap(),
                    );
                }
                let report = replay(&c, &runs);
                assert!(
                    report.first_reject.is_none(),
                    "{} {file} {input:?}: {:?}",
                    s.name,
                    report.first_reject
                );
                assert!(report.eos_allowed_at_end, "{} {file} {input:?}", s.name);
            }
        }
    }
}
