//! Warm-path profile: `compute_mask` time per token over a document's canonical tokenization,
//! three passes through fresh adapters on one shared constraint, so the first pass fills the
//! constraint's caches and the later ones reuse them. For passes 1 and 3 it prints the 12
//! slowest steps (microseconds, with the 15 output bytes before each) and the mean, median and
//! 99th percentile. A JSON Schema (`.json`) gets outer whitespace allowed.
//! `cargo run --release --example warm -- TOKENIZER.json (GRAMMAR.gbnf | SCHEMA.json) DOC`
use corral::engine::*;
use corral::{grammar as corral_grammar, schema as corral_schema, trie as corral_trie};
use std::sync::Arc;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let space = Arc::new(
        corral_trie::TokenSpace::from_tokenizer_json(std::path::Path::new(&a[1])).unwrap(),
    );
    let src = std::fs::read_to_string(&a[2]).unwrap();
    let g = if a[2].ends_with(".json") {
        let opts = corral_schema::JsonSchemaOptions::default().with_outer_whitespace(true);
        corral_schema::compile_json_schema(&src, &opts)
            .unwrap()
            .grammar
    } else {
        corral_grammar::compile_gbnf(&src, &Default::default()).unwrap()
    };
    let text = std::fs::read(&a[3]).unwrap();
    let tok = tokenizers::Tokenizer::from_file(&a[1]).unwrap();
    let toks = tok
        .encode(std::str::from_utf8(&text).unwrap(), false)
        .unwrap()
        .get_ids()
        .iter()
        .map(|&t| corral::trie::TokenId(t))
        .collect::<Vec<_>>();
    let c = Constraint::new(g, space.clone());
    for pass in 0..3 {
        let mut ad = RobustConstrainedAdapter::new(c.clone());
        let mut m = ad.empty_mask();
        let mut times = vec![];
        for &t in toks.iter() {
            let t0 = std::time::Instant::now();
            ad.compute_mask(&mut m).unwrap();
            let dt = t0.elapsed().as_secs_f64() * 1e6;
            times.push((dt, ad.output().len()));
            ad.step_with_token(t).unwrap();
        }
        if pass == 0 || pass == 2 {
            eprintln!("pass {pass}");
            let mut s = times.clone();
            s.sort_by(|a, b| b.0.total_cmp(&a.0));
            for (dt, pos) in s.iter().take(12) {
                let o = &text[..*pos];
                eprintln!(
                    "{dt:.1}us at {:?}",
                    String::from_utf8_lossy(&o[o.len().saturating_sub(15)..])
                );
            }
            let mean: f64 = times.iter().map(|t| t.0).sum::<f64>() / times.len() as f64;
            let mut v: Vec<f64> = times.iter().map(|t| t.0).collect();
            v.sort_by(f64::total_cmp);
            eprintln!(
                "warm mean {mean:.2} p50 {:.2} p99 {:.2}",
                v[v.len() / 2],
                v[v.len() * 99 / 100]
            );
        }
    }
}
