use corral_engine::*;
use std::sync::Arc;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let space = Arc::new(
        corral_trie::TokenSpace::from_tokenizer_json(std::path::Path::new(&a[1])).unwrap(),
    );
    let g = corral_grammar::compile_gbnf(
        &std::fs::read_to_string(&a[2]).unwrap(),
        &Default::default(),
    )
    .unwrap();
    let text = std::fs::read(&a[3]).unwrap();
    let c = Constraint::new(g, space.clone());
    let mut x = 1u64;
    let toks = space
        .trie()
        .random_segmentation(&text, &mut || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .unwrap();
    let mut ad = RobustConstrainedAdapter::new(c.clone());
    let mut m = ad.new_mask();
    let mut worst = (0.0, 0);
    for (i, &t) in toks.iter().enumerate() {
        let before = c.cached_states();
        let t0 = std::time::Instant::now();
        ad.compute_mask(&mut m).unwrap();
        let dt = t0.elapsed().as_secs_f64() * 1e3;
        if c.cached_states() > before {
            eprintln!(
                "step {i}: {} new states, {:.2} ms, pos {} {:?}",
                c.cached_states() - before,
                dt,
                ad.output().len(),
                String::from_utf8_lossy(&ad.output()[ad.output().len().saturating_sub(12)..])
            );
        }
        if dt > worst.0 {
            worst = (dt, i);
        }
        ad.step_with_token(t).unwrap();
    }
    eprintln!("worst {:?}", worst);
}
