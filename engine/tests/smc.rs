//! The SMC and CARS samplers against a distribution known in closed form: a hand-written model over
//! five tokens whose favourite first token mostly leads outside the grammar.
//!
//! Model: the first token is `a` (0.3) or `b` (0.7); after `a`, the end (0.9) or `d`;
//! after `b`, `c` (0.01) or `d` (0.99); after `bc`, the end (0.9) or `d`. Grammar:
//! `"a" | "bc"`. The model restricted to the grammar gives `a` 0.27 and `bc` 0.0063, so
//! `a` with probability 0.977; masking each step gives `bc` 0.7 (after `b` only `c` is
//! left, and takes all the mass).

use corral_engine::{
    BatchItem, Cars, CarsOptions, CausalLm, Constraint, CpuLogits, GenerateError, GenerateOptions,
    Logits, ModelError, SamplerMethod, SamplingOptions, Sequence, SmcOptions, check_tails,
    generate,
};
use corral_grammar::{CompileOptions, compile_gbnf};
use corral_trie::{TokenId, TokenSpace, Vocabulary};
use std::sync::Arc;

const EOS: u32 = 4;
const WIDTH: usize = 5;
const PROMPT: [TokenId; 2] = [TokenId(3), TokenId(3)];

fn space() -> Arc<TokenSpace> {
    let words = ["a", "b", "c", "d"]
        .iter()
        .enumerate()
        .map(|(i, w)| (TokenId(i as u32), w.as_bytes().to_vec()));
    let vocab = Vocabulary::from_parts(words, [(TokenId(EOS), "</s>".to_string())]);
    Arc::new(TokenSpace::new(vocab, Some(WIDTH), vec![TokenId(EOS)]))
}

/// The next token's probabilities after `out` (the tokens after the prompt).
fn next(out: &[u32]) -> [f32; WIDTH] {
    match out {
        [] => [0.3, 0.7, 0.0, 0.0, 0.0],
        [0] | [1, 2] => [0.0, 0.0, 0.0, 0.1, 0.9],
        [1] => [0.0, 0.0, 0.01, 0.99, 0.0],
        _ => [0.0, 0.0, 0.0, 0.5, 0.5],
    }
}

/// A table of next-token probabilities as a model; each sequence holds its tokens.
/// `copies`: whether it copies caches (otherwise the sampler runs a fork's tokens again).
struct TableLm {
    table: fn(&[u32]) -> [f32; WIDTH],
    copies: bool,
    /// The cache `forward` runs on.
    own: Vec<u32>,
}

impl TableLm {
    fn new(copies: bool) -> TableLm {
        TableLm {
            table: next,
            copies,
            own: Vec::new(),
        }
    }

    fn logits(&self, seq: &[u32]) -> Box<dyn Logits> {
        let out = &seq[PROMPT.len().min(seq.len())..];
        Box::new(CpuLogits(
            (self.table)(out).iter().map(|p| p.ln()).collect(),
        ))
    }
}

impl CausalLm for TableLm {
    fn forward(&mut self, tokens: &[TokenId], pos: usize) -> Result<Box<dyn Logits>, ModelError> {
        self.own.truncate(pos);
        self.own.extend(tokens.iter().map(|t| t.0));
        Ok(self.logits(&self.own))
    }
    fn logit_width(&self) -> usize {
        WIDTH
    }
    fn max_positions(&self) -> usize {
        1024
    }
    fn reset(&mut self) {}
    fn new_sequence(&self) -> Sequence {
        Sequence::new(Vec::<u32>::new())
    }
    fn forward_batch(
        &mut self,
        items: &mut [BatchItem<'_>],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        items
            .iter_mut()
            .map(|it| {
                let seq = it.sequence.downcast_mut::<Vec<u32>>().unwrap();
                assert_eq!(seq.len(), it.pos, "the sampler feeds at the positions held");
                seq.extend(it.tokens.iter().map(|t| t.0));
                Ok(self.logits(seq))
            })
            .collect()
    }
    fn copy_prefix(&self, sequence: &Sequence, positions: usize) -> Option<Sequence> {
        let seq = sequence.downcast_ref::<Vec<u32>>().unwrap();
        self.copies
            .then(|| Sequence::new(seq[..positions].to_vec()))
    }
}

/// [`TableLm`] answering [`CausalLm::forward_batch_tails`] in one call, as a model that
/// reads every wanted position from one pass does; counts those calls.
struct OnePass {
    lm: TableLm,
    calls: usize,
}

impl CausalLm for OnePass {
    fn forward(&mut self, tokens: &[TokenId], pos: usize) -> Result<Box<dyn Logits>, ModelError> {
        self.lm.forward(tokens, pos)
    }
    fn logit_width(&self) -> usize {
        WIDTH
    }
    fn max_positions(&self) -> usize {
        self.lm.max_positions()
    }
    fn reset(&mut self) {}
    fn new_sequence(&self) -> Sequence {
        self.lm.new_sequence()
    }
    fn forward_batch(
        &mut self,
        items: &mut [BatchItem<'_>],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        self.lm.forward_batch(items)
    }
    fn forward_batch_tails(
        &mut self,
        items: &mut [BatchItem<'_>],
        tails: &[usize],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        check_tails(items, tails)?;
        self.calls += 1;
        let mut out = Vec::new();
        for (it, &k) in items.iter_mut().zip(tails) {
            let seq = it.sequence.downcast_mut::<Vec<u32>>().unwrap();
            assert_eq!(seq.len(), it.pos, "the sampler feeds at the positions held");
            seq.extend(it.tokens.iter().map(|t| t.0));
            for end in seq.len() + 1 - k..=seq.len() {
                out.push(self.lm.logits(&seq[..end]));
            }
        }
        Ok(out)
    }
    fn copy_prefix(&self, sequence: &Sequence, positions: usize) -> Option<Sequence> {
        self.lm.copy_prefix(sequence, positions)
    }
}

/// Temperature 1, nothing cut, at most 8 tokens.
fn options(method: SamplerMethod, seed: u64) -> GenerateOptions {
    GenerateOptions {
        max_tokens: 8,
        sampling: SamplingOptions {
            temperature: 1.0,
            top_p: None,
            seed,
            method,
            ..SamplingOptions::default()
        },
        ..GenerateOptions::default()
    }
}

/// How often `a` comes out of `runs` generations, and the mean of the evidence estimates.
fn share_of_a(method: SamplerMethod, runs: u64, copies: bool) -> (f64, f64) {
    let space = space();
    let g = compile_gbnf(r#"root ::= "a" | "bc""#, &CompileOptions::default()).unwrap();
    let c = Constraint::new(g, space.clone());
    let mut lm = TableLm::new(copies);
    let mut a = 0;
    let mut evidence = 0.0;
    for seed in 0..runs {
        let out = generate(
            &mut lm,
            &space,
            Some(&c),
            &PROMPT,
            &options(method, seed),
            &mut |_| {},
        )
        .unwrap();
        assert!(out.text == "a" || out.text == "bc", "{:?}", out.text);
        a += usize::from(out.text == "a");
        if let Some(s) = &out.stats.smc {
            evidence += s.log_evidence.exp();
            let total: f64 = out.particles.iter().map(|p| p.weight).sum();
            assert!((total - 1.0).abs() < 1e-9, "weights sum to 1");
            assert_eq!(out.particles.len(), s.particles);
        }
    }
    (a as f64 / runs as f64, evidence / runs as f64)
}

#[test]
fn masking_each_step_over_weights_the_prefix_the_model_likes() {
    let (a, _) = share_of_a(SamplerMethod::Plain, 400, true);
    // 0.3 expected; the exact answer is 0.977.
    assert!((0.22..0.38).contains(&a), "plain: a {a}");
}

#[test]
fn smc_draws_from_the_model_restricted_to_the_grammar() {
    for copies in [true, false] {
        let (a, z) = share_of_a(SamplerMethod::Smc(SmcOptions::new(8)), 400, copies);
        // Exact: 0.27 / 0.2763 = 0.977. With 8 particles, a run gives `bc` only where no
        // particle drew `a` (0.7^8 = 0.058) or by weight (about 0.0063 / 0.27 a particle).
        assert!(a > 0.9, "smc, copies {copies}: a {a}");
        // The evidence estimate is unbiased: P(output in the grammar) = 0.2763.
        assert!((z - 0.2763).abs() < 0.03, "evidence {z}");
    }
}

#[test]
fn a_forced_span_is_weighed_in_the_pass_that_runs_it() {
    // After `b` the grammar forces `c`: it is appended after the draw (jump-forward) and
    // weighed by its probability (0.01), read from the pass that runs `b` and `c` together.
    let space = space();
    let g = compile_gbnf(r#"root ::= "a" | "bc""#, &CompileOptions::default()).unwrap();
    let c = Constraint::new(g, space.clone());
    let mut lm = OnePass {
        lm: TableLm::new(true),
        calls: 0,
    };
    let runs = 300;
    let (mut a, mut bc, mut evidence) = (0, 0, 0.0);
    for seed in 0..runs {
        let opts = options(SamplerMethod::Smc(SmcOptions::new(8)), seed);
        let out = generate(&mut lm, &space, Some(&c), &PROMPT, &opts, &mut |_| {}).unwrap();
        a += usize::from(out.text == "a");
        bc += out.particles.iter().filter(|p| p.text == "bc").count();
        // The prompt's pass, then one: `a`, or `b` with `c`; then each ends.
        assert_eq!(out.stats.forward_passes, 2, "seed {seed}");
        evidence += out.stats.smc.unwrap().log_evidence.exp();
    }
    assert!(bc > 0, "some particles went through the forced span");
    assert_eq!(
        lm.calls, runs as usize,
        "one call of forward_batch_tails a run"
    );
    // Exact: `a` 0.977; the evidence 0.2763.
    let a = a as f64 / runs as f64;
    assert!(a > 0.9, "a {a}");
    let z = evidence / runs as f64;
    assert!((z - 0.2763).abs() < 0.03, "evidence {z}");
}

/// `c` first (0.9) or `a`; after `a`, `b`, `d` or the end; after `ab`, the end.
fn c_first(out: &[u32]) -> [f32; WIDTH] {
    match out {
        [] => [0.1, 0.0, 0.9, 0.0, 0.0],
        [0] => [0.0, 0.5, 0.0, 0.25, 0.25],
        _ => [0.0, 0.0, 0.0, 0.0, 1.0],
    }
}

#[test]
fn a_budgets_completion_is_not_also_jumped_over() {
    // Under `"ab" | "cdddd"` in 3 tokens, a drawn `c` cannot complete, so the budget puts
    // the completion `ab` in its place one token a step. `b` is also what the grammar
    // forces after `a`: it is appended once, by the completion, not by jump-forward too.
    let space = space();
    let g = compile_gbnf(r#"root ::= "ab" | "cdddd""#, &CompileOptions::default()).unwrap();
    let c = Constraint::new(g, space.clone());
    let mut lm = TableLm {
        table: c_first,
        ..TableLm::new(true)
    };
    for seed in 0..20 {
        let opts = GenerateOptions {
            max_tokens: 3,
            ..options(SamplerMethod::Smc(SmcOptions::new(4)), seed)
        };
        let out = generate(&mut lm, &space, Some(&c), &PROMPT, &opts, &mut |_| {}).unwrap();
        assert_eq!(out.text, "ab", "seed {seed}");
        for p in &out.particles {
            assert_eq!(p.text, "ab", "seed {seed}");
        }
    }
}

/// First `a` or `b` (even); then `c` or `d`: even after `a`, `c` 0.99 after `b`; then the
/// end. Under `"a" ("c" | "d") | "bd"`, the mask after `b` keeps 0.01 of the mass.
fn fork_in_two(out: &[u32]) -> [f32; WIDTH] {
    match out {
        [] => [0.5, 0.5, 0.0, 0.0, 0.0],
        [0] => [0.0, 0.0, 0.5, 0.5, 0.0],
        [1] => [0.0, 0.0, 0.99, 0.01, 0.0],
        _ => [0.0, 0.0, 0.0, 0.0, 1.0],
    }
}

#[test]
fn particles_resampled_on_a_step_draw_its_token_apart() {
    // The mass a step's mask keeps is known before its token is drawn, so resampling on it
    // comes first and each copy of an `a` particle draws its second token itself. Were the
    // copies made after the draw, they would repeat their ancestors' tokens: all eight
    // would end alike in about 2 * 0.75^8 = 0.2 of the runs, rather than 2 * 0.5^8.
    let space = space();
    let g = compile_gbnf(
        r#"root ::= "a" ("c" | "d") | "bd""#,
        &CompileOptions::default(),
    )
    .unwrap();
    let c = Constraint::new(g, space.clone());
    let mut lm = TableLm {
        table: fork_in_two,
        ..TableLm::new(true)
    };
    let runs = 200;
    let mut alike = 0;
    let method = SamplerMethod::Smc(SmcOptions {
        particles: 8,
        ess_threshold: 1.0,
    });
    for seed in 0..runs {
        let opts = options(method, seed);
        let out = generate(&mut lm, &space, Some(&c), &PROMPT, &opts, &mut |_| {}).unwrap();
        let texts: Vec<&str> = out.particles.iter().map(|p| p.text.as_str()).collect();
        assert!(
            texts.iter().all(|t| ["ac", "ad", "bd"].contains(t)),
            "{texts:?}"
        );
        let a: Vec<&&str> = texts.iter().filter(|t| t.starts_with('a')).collect();
        alike += usize::from(a.len() == 8 && a.iter().all(|t| *t == a[0]));
    }
    assert!(
        alike < 10,
        "{alike} of {runs} runs had eight `a` particles that ended alike"
    );
}

#[test]
fn smc_refuses_cuts_it_cannot_weigh() {
    let space = space();
    let g = compile_gbnf(r#"root ::= "a" | "bc""#, &CompileOptions::default()).unwrap();
    let c = Constraint::new(g, space.clone());
    let mut lm = TableLm::new(true);
    let smc = SamplerMethod::Smc(SmcOptions::new(4));
    for (sampling, field) in [
        (
            SamplingOptions {
                method: smc,
                ..SamplingOptions::default()
            },
            "top_p",
        ),
        (
            SamplingOptions {
                method: smc,
                top_p: None,
                top_k: Some(3),
                ..SamplingOptions::default()
            },
            "top_k",
        ),
        (
            SamplingOptions {
                method: smc,
                ..SamplingOptions::greedy()
            },
            "temperature",
        ),
        (
            SamplingOptions {
                method: SamplerMethod::Smc(SmcOptions::new(0)),
                top_p: None,
                ..SamplingOptions::default()
            },
            "particles",
        ),
    ] {
        let opts = GenerateOptions {
            sampling,
            ..GenerateOptions::default()
        };
        let e = generate(&mut lm, &space, Some(&c), &PROMPT, &opts, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains(field), "{field}: {e}");
    }
}

fn a_or_bc() -> Arc<Constraint> {
    let g = compile_gbnf(r#"root ::= "a" | "bc""#, &CompileOptions::default()).unwrap();
    Constraint::new(g, space())
}

#[test]
fn cars_draws_exactly_from_the_model_restricted_to_the_grammar() {
    let c = a_or_bc();
    let opts = CarsOptions {
        max_tokens: 8,
        ..CarsOptions::default()
    };
    // A fresh sampler for each output, and one kept across outputs: both are exact.
    for copies in [true, false] {
        let mut lm = TableLm::new(copies);
        let runs = 400;
        let mut fresh_a = 0;
        for seed in 0..runs {
            let mut cars = Cars::new(c.clone(), &PROMPT, opts).unwrap();
            let d = cars.draw(&mut lm, seed).unwrap();
            assert!(d.text == "a" || d.text == "bc", "{:?}", d.text);
            fresh_a += usize::from(d.text == "a");
        }
        // 0.977 exactly; the binomial's standard deviation at 400 is 0.0075.
        let share = fresh_a as f64 / runs as f64;
        assert!(
            (share - 0.977).abs() < 0.03,
            "fresh, copies {copies}: a {share}"
        );
        let mut cars = Cars::new(c.clone(), &PROMPT, opts).unwrap();
        let runs = 2000;
        let mut kept_a = 0;
        for seed in 0..runs {
            kept_a += usize::from(cars.draw(&mut lm, seed).unwrap().text == "a");
        }
        let share = kept_a as f64 / runs as f64;
        assert!(
            (share - 0.977).abs() < 0.015,
            "kept, copies {copies}: a {share}"
        );
        // Every prefix with mass was reached (the root, a, b, bc), each run once, and the
        // root's live share is the grammar's mass: 0.3 * 0.9 + 0.7 * 0.01 * 0.9.
        let s = cars.stats();
        assert_eq!((s.prefixes, s.forward_passes, s.draws), (4, 4, 2000));
        let z = cars.live_mass().unwrap();
        assert!((z - 0.2763).abs() < 1e-6, "live mass {z}");
    }
}

/// [`next`], with NaN for `a` at the first token.
fn nan_first(out: &[u32]) -> [f32; WIDTH] {
    match out {
        [] => [f32::NAN, 0.7, 0.0, 0.0, 0.0],
        _ => next(out),
    }
}

#[test]
fn cars_fails_where_the_grammar_has_no_mass_or_a_limit_is_reached() {
    let mut lm = TableLm::new(true);
    // The model never starts with `c`.
    let g = compile_gbnf(r#"root ::= "c""#, &CompileOptions::default()).unwrap();
    let c = Constraint::new(g, space());
    let mut cars = Cars::new(c, &PROMPT, CarsOptions::default()).unwrap();
    assert!(matches!(
        cars.draw(&mut lm, 1),
        Err(GenerateError::NothingToSample)
    ));
    // After `b` only `c` is allowed, and after `bc` the model never ends: mass at the
    // root, none below it, found by the draw.
    let g = compile_gbnf(r#"root ::= "bc""#, &CompileOptions::default()).unwrap();
    let c = Constraint::new(g, space());
    let ends_never = |out: &[u32]| match out {
        [1, 2] => [0.0, 0.0, 0.0, 1.0, 0.0],
        _ => next(out),
    };
    let mut never = TableLm {
        table: ends_never,
        copies: true,
        own: Vec::new(),
    };
    let mut cars = Cars::new(c, &PROMPT, CarsOptions::default()).unwrap();
    assert!(matches!(
        cars.draw(&mut never, 1),
        Err(GenerateError::NothingToSample)
    ));
    assert_eq!(cars.live_mass(), Some(0.0));
    // One prefix (the root) cannot finish any output; nor can a few bytes hold the root.
    for (opts, what) in [
        (
            CarsOptions {
                max_prefixes: 1,
                ..CarsOptions::default()
            },
            "prefixes",
        ),
        (
            CarsOptions {
                max_bytes: 10,
                ..CarsOptions::default()
            },
            "bytes",
        ),
    ] {
        let mut cars = Cars::new(a_or_bc(), &PROMPT, opts).unwrap();
        match cars.draw(&mut lm, 1) {
            Err(GenerateError::CarsLimit { what: w, .. }) => assert_eq!(w, what),
            other => panic!("{other:?}"),
        }
    }
    // No output fits in one token: refused before any pass.
    let g = compile_gbnf(r#"root ::= "bc""#, &CompileOptions::default()).unwrap();
    let opts = CarsOptions {
        max_tokens: 1,
        ..CarsOptions::default()
    };
    assert!(matches!(
        Cars::new(Constraint::new(g, space()), &PROMPT, opts),
        Err(GenerateError::BudgetTooSmall { needed: 2, .. })
    ));
    // A NaN logit is the model's error, not an output.
    let mut nan = TableLm {
        table: nan_first,
        copies: true,
        own: Vec::new(),
    };
    let mut cars = Cars::new(a_or_bc(), &PROMPT, CarsOptions::default()).unwrap();
    assert!(matches!(
        cars.draw(&mut nan, 1),
        Err(GenerateError::Model(_))
    ));
}

#[test]
fn cars_refuses_settings_out_of_range() {
    for t in [0.0, -1.0, f32::NAN, f32::INFINITY, 1e-40] {
        let opts = CarsOptions {
            temperature: t,
            ..CarsOptions::default()
        };
        assert!(
            matches!(
                Cars::new(a_or_bc(), &PROMPT, opts),
                Err(GenerateError::Sampling(_))
            ),
            "temperature {t}"
        );
    }
    for (opts, name) in [
        (
            CarsOptions {
                max_tokens: 0,
                ..CarsOptions::default()
            },
            "max_tokens",
        ),
        (
            CarsOptions {
                max_prefixes: 0,
                ..CarsOptions::default()
            },
            "max_prefixes",
        ),
    ] {
        match Cars::new(a_or_bc(), &PROMPT, opts) {
            Err(GenerateError::Sampling(e)) => assert_eq!(e.name, name),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        Cars::new(a_or_bc(), &[], CarsOptions::default()),
        Err(GenerateError::EmptyPrompt)
    ));
}

#[test]
fn cars_keeps_to_max_tokens_and_the_temperature() {
    let mut lm = TableLm::new(true);
    // Within one token only `a` is left: the grammar's mass is 0.3 * 0.9, `b` is refused.
    let opts = CarsOptions {
        max_tokens: 1,
        ..CarsOptions::default()
    };
    let mut cars = Cars::new(a_or_bc(), &PROMPT, opts).unwrap();
    for seed in 0..50 {
        assert_eq!(cars.draw(&mut lm, seed).unwrap().text, "a");
    }
    assert_eq!(cars.stats().prefixes, 3, "the root, a and b");
    let z = cars.live_mass().unwrap();
    assert!((z - 0.27).abs() < 1e-6, "live mass {z}");
    // At temperature 2 each step's probabilities go as their square roots, renormalized.
    let t2 = |ps: &[f64]| -> Vec<f64> {
        let total: f64 = ps.iter().map(|p| p.sqrt()).sum();
        ps.iter().map(|p| p.sqrt() / total).collect()
    };
    let (root, after_a, after_b) = (t2(&[0.3, 0.7]), t2(&[0.1, 0.9]), t2(&[0.01, 0.99]));
    let a = root[0] * after_a[1];
    let bc = root[1] * after_b[0] * after_a[1];
    let opts = CarsOptions {
        temperature: 2.0,
        max_tokens: 8,
        ..CarsOptions::default()
    };
    let mut cars = Cars::new(a_or_bc(), &PROMPT, opts).unwrap();
    let runs = 2000;
    let mut kept_a = 0;
    for seed in 0..runs {
        kept_a += usize::from(cars.draw(&mut lm, seed).unwrap().text == "a");
    }
    // a: 0.878 (at temperature 1, 0.977); the standard deviation at 2,000 is 0.0073.
    let share = kept_a as f64 / runs as f64;
    assert!((share - a / (a + bc)).abs() < 0.03, "a {share}");
    let z = cars.live_mass().unwrap();
    assert!(
        (z - (a + bc)).abs() < 1e-6,
        "live mass {z} against {}",
        a + bc
    );
}
