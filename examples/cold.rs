//! Cold-path profile: a fresh compile (DFA cache cleared), a fresh constraint, the first
//! pass over a document's canonical tokenization, with a breakdown of where time goes.
//! `cargo run --release --example cold -- TOKENIZER.json (GRAMMAR.gbnf | SCHEMA.json) DOC [REPEAT]`
use corral::engine::*;
use corral::{grammar as corral_grammar, trie as corral_trie};
use std::sync::Arc;
use std::time::Instant;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let hf = tokenizers::Tokenizer::from_file(&a[1]).unwrap();
    let vocab = corral_trie::Vocabulary::from_tokenizer(&hf).unwrap();
    let eos = vocab.default_eos().into_iter().collect();
    let space = Arc::new(corral_trie::TokenSpace::new(vocab, None, eos));
    let text = std::fs::read_to_string(&a[3]).unwrap();
    let text = text.trim_end();
    let cont = corral_trie::continuation_tokenizer(&hf);
    let toks = cont
        .encode(text, false)
        .unwrap()
        .get_ids()
        .iter()
        .map(|&t| corral::trie::TokenId(t))
        .collect::<Vec<_>>();
    let repeat: usize = a.get(4).map_or(1, |r| r.parse().unwrap());
    for _ in 0..repeat {
        let t0 = Instant::now();
        let src = std::fs::read_to_string(&a[2]).unwrap();
        let g = if a[2].ends_with(".json") {
            corral::compile_json_schema(&src, &Default::default())
                .unwrap()
                .grammar
        } else {
            corral_grammar::compile_gbnf(&src, &Default::default()).unwrap()
        };
        let t_compile = t0.elapsed();
        let t0 = Instant::now();
        let c = Constraint::new(g, space.clone());
        let t_setup = t0.elapsed();
        let mut ad = RobustConstrainedAdapter::new(c.clone());
        let mut m = ad.empty_mask();
        let mut times = Vec::new();
        for &t in &toks {
            let t0 = Instant::now();
            ad.compute_mask(&mut m).unwrap();
            times.push(t0.elapsed().as_secs_f64() * 1e6);
            if std::env::var_os("COLD_VERBOSE").is_some() && *times.last().unwrap() > 500.0 {
                let out = ad.output();
                eprintln!(
                    "{:8.0} us at {:?}",
                    times.last().unwrap(),
                    String::from_utf8_lossy(&out[out.len().saturating_sub(24)..])
                );
            }
            ad.step_with_token(t).unwrap();
        }
        let corral::engine::replay::Summary { mean, p50, p99 } =
            corral::engine::replay::stats(&times);
        let max = times.iter().cloned().fold(0.0, f64::max);
        eprintln!(
            "{} tokens: compile {:.2?}, setup {:.2?}, first-pass mask mean {mean:.1} us p50 {p50:.1} p99 {p99:.1} max {max:.1}, states {}",
            toks.len(),
            t_compile,
            t_setup,
            c.cached_states()
        );
    }
}
