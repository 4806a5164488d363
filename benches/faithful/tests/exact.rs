//! The exact walk against a distribution known in closed form: a model over the tokens
//! `a`, `b`, `c`, `bc` and an end, whose next-token probabilities depend on the text so far,
//! under the grammar `"a" | "bc"` (where `bc` has two tokenizations).

use corral::engine::{BatchItem, CausalLm, Constraint, CpuLogits, Logits, ModelError, Sequence};
use corral::grammar::{CompileOptions, compile_gbnf};
use corral::trie::{TokenId, TokenSpace, Vocabulary};
use corral_faithful::{PromptCached, exact, greedy_mass};
use std::sync::Arc;

const WORDS: [&str; 4] = ["a", "b", "c", "bc"];
const EOS: u32 = 4;
const WIDTH: usize = 5;

/// Next-token probabilities after the output `text` (the prompt is one token, `c`).
fn next(text: &str) -> [f32; WIDTH] {
    match text {
        "" => [0.3, 0.5, 0.0, 0.2, 0.0],
        "a" => [0.1, 0.0, 0.0, 0.0, 0.9],
        "b" => [0.0, 0.0, 0.01, 0.0, 0.99],
        "bc" => [0.0, 0.0, 0.0, 0.5, 0.5],
        _ => [0.2; WIDTH],
    }
}

/// Each sequence holds its token ids; the first is the prompt's.
struct TableLm;

impl CausalLm for TableLm {
    fn forward(&mut self, _: &[TokenId], _: usize) -> Result<Box<dyn Logits>, ModelError> {
        Err(ModelError::Backend("sequences only".into()))
    }
    fn logit_width(&self) -> usize {
        WIDTH
    }
    fn max_positions(&self) -> usize {
        64
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
                seq.truncate(it.pos);
                seq.extend(it.tokens.iter().map(|t| t.0));
                let text: String = seq[1..].iter().map(|&t| WORDS[t as usize]).collect();
                let l = next(&text).iter().map(|p| p.ln()).collect();
                Ok(Box::new(CpuLogits(l)) as Box<dyn Logits>)
            })
            .collect()
    }
    fn copy_prefix(&self, sequence: &Sequence, positions: usize) -> Option<Sequence> {
        let seq = sequence.downcast_ref::<Vec<u32>>().unwrap();
        Some(Sequence::new(seq[..positions].to_vec()))
    }
}

fn constraint() -> Arc<Constraint> {
    let words = WORDS
        .iter()
        .enumerate()
        .map(|(i, w)| (TokenId(i as u32), w.as_bytes().to_vec()));
    let vocab = Vocabulary::from_parts(words, [(TokenId(EOS), "</s>".to_string())]);
    let space = Arc::new(TokenSpace::new(vocab, Some(WIDTH), vec![TokenId(EOS)]));
    let g = compile_gbnf(r#"root ::= "a" | "bc""#, &CompileOptions::default()).unwrap();
    Constraint::new(g, space)
}

#[test]
fn the_walk_finds_every_tokenization_and_the_end_tokens_probability() {
    let c = constraint();
    let prompt = [TokenId(2)];
    let mut lm = TableLm;
    // `a` then the end: 0.3 * 0.9; `b` `c` then the end: 0.5 * 0.01 * 0.5; `bc` then the
    // end: 0.2 * 0.5.
    let (a, bc) = (0.27, 0.0025 + 0.1);
    let ex = exact(&mut lm, &c, &prompt, 0.0, 100).unwrap();
    assert!((ex.found - (a + bc)).abs() < 1e-6, "{ex:?}");
    assert_eq!(ex.sequences, 3, "{ex:?}");
    assert!((ex.dist["a"] - a / (a + bc)).abs() < 1e-6, "{ex:?}");
    assert!((ex.dist["bc"] - bc / (a + bc)).abs() < 1e-6, "{ex:?}");
    assert_eq!(ex.pruned, 0.0);
    // The greedy output: `b` (0.5), then `c`, the only token left, then the end.
    let g = greedy_mass(&mut lm, &c, &prompt).unwrap();
    assert!((g - 0.0025).abs() < 1e-6, "{g}");
    // A bound above `b` `c`'s prefix (0.005) prunes it, and says how much it pruned.
    let ex = exact(&mut lm, &c, &prompt, 0.01, 100).unwrap();
    assert!((ex.pruned - 0.005).abs() < 1e-6, "{ex:?}");
    assert!((ex.found - 0.37).abs() < 1e-6, "{ex:?}");
    // Too many prefixes for the limit is an error, not a partial answer.
    assert!(exact(&mut lm, &c, &prompt, 0.0, 1).is_err());
    // Through the prompt cache, the same.
    let mut cached = PromptCached::new(&mut lm, &prompt).unwrap();
    let ex = exact(&mut cached, &c, &prompt, 0.0, 100).unwrap();
    assert!((ex.found - (a + bc)).abs() < 1e-6, "{ex:?}");
}
