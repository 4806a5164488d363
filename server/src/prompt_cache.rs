//! The prompt cache: the KV caches of finished requests' prompts, kept within a budget in
//! bytes, so that a request whose prompt starts with the same tokens (the chat template's
//! system turn, a conversation's earlier turns, the same prompt with another schema) runs
//! only the rest of its prompt.
//!
//! Only prompts are kept, not the outputs after them: a conversation's next prompt holds
//! the output as the chat template writes it, which need not be the tokens sampled. A new
//! request copies the longest prefix any entry shares with its prompt, at most all but its
//! last token (the model must run at least one position to give logits); the entry stays
//! for others. The least recently used entries go first when the budget is exceeded; an
//! entry larger than the whole budget is not kept.

use corral_engine::{CausalLm, Sequence};
use corral_trie::TokenId;

/// One kept prompt: its tokens and the sequence whose cache holds exactly their positions.
struct Entry {
    tokens: Vec<TokenId>,
    sequence: Sequence,
    bytes: usize,
}

/// What [`PromptCache::take`] found.
pub struct Hit {
    /// A new sequence holding the cached positions.
    pub sequence: Sequence,
    /// How many of the prompt's tokens it holds.
    pub positions: usize,
}

pub struct PromptCache {
    /// Least recently used first.
    entries: Vec<Entry>,
    bytes: usize,
    budget: usize,
}

impl PromptCache {
    /// A cache of at most `budget` bytes (0: nothing is kept).
    pub fn new(budget: usize) -> PromptCache {
        PromptCache {
            entries: Vec::new(),
            bytes: 0,
            budget,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A sequence holding the longest prefix of `prompt` that an entry shares with it
    /// (all but its last token at most), or `None` when no entry shares a token or the
    /// model cannot copy.
    pub fn take(&mut self, lm: &dyn CausalLm, prompt: &[TokenId]) -> Option<Hit> {
        let limit = prompt.len().saturating_sub(1);
        let (best, shared) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, common_prefix(&e.tokens, prompt).min(limit)))
            .max_by_key(|&(i, n)| (n, i))?;
        if shared == 0 {
            return None;
        }
        let sequence = lm.copy_prefix(&self.entries[best].sequence, shared)?;
        let entry = self.entries.remove(best);
        self.entries.push(entry);
        Some(Hit {
            sequence,
            positions: shared,
        })
    }

    /// Keeps the first `tokens.len()` positions of `sequence` (which holds `held`, at
    /// least that many) under `tokens`: an entry whose tokens start the new ones is
    /// replaced, and nothing is added when an entry already starts with them.
    pub fn insert(
        &mut self,
        lm: &dyn CausalLm,
        tokens: &[TokenId],
        sequence: &Sequence,
        held: usize,
    ) {
        if tokens.is_empty() || self.budget == 0 {
            return;
        }
        if let Some(e) = self
            .entries
            .iter()
            .position(|e| e.tokens.starts_with(tokens))
        {
            let entry = self.entries.remove(e);
            self.entries.push(entry);
            return;
        }
        // No copy that could exceed the budget is made: the sequence's bytes per position
        // (its buffers' spare room counted) bound the copy's.
        match lm.sequence_bytes(sequence) {
            Some(b) if held >= tokens.len() && b / held * tokens.len() <= self.budget => {}
            _ => return,
        }
        let Some(copy) = lm.copy_prefix(sequence, tokens.len()) else {
            return;
        };
        let Some(bytes) = lm.sequence_bytes(&copy) else {
            return;
        };
        if bytes > self.budget {
            return;
        }
        self.entries.retain(|e| {
            let superseded = tokens.starts_with(&e.tokens);
            if superseded {
                self.bytes -= e.bytes;
            }
            !superseded
        });
        self.entries.push(Entry {
            tokens: tokens.to_vec(),
            sequence: copy,
            bytes,
        });
        self.bytes += bytes;
        while self.bytes > self.budget {
            let old = self.entries.remove(0);
            self.bytes -= old.bytes;
        }
    }
}

fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_engine::{BatchItem, Logits, ModelError};

    /// A model whose sequences are the count of positions they hold, 10 bytes each; it
    /// counts the copies it makes.
    struct Counting {
        copies: std::cell::Cell<usize>,
    }

    fn lm() -> Counting {
        Counting {
            copies: std::cell::Cell::new(0),
        }
    }

    impl CausalLm for Counting {
        fn forward(&mut self, _: &[TokenId], _: usize) -> Result<Box<dyn Logits>, ModelError> {
            unreachable!("the cache runs no model")
        }
        fn logit_width(&self) -> usize {
            1
        }
        fn max_positions(&self) -> usize {
            1 << 20
        }
        fn reset(&mut self) {}
        fn new_sequence(&self) -> Sequence {
            Sequence::new(0usize)
        }
        fn forward_batch(
            &mut self,
            _: &mut [BatchItem<'_>],
        ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
            unreachable!("the cache runs no model")
        }
        fn copy_prefix(&self, sequence: &Sequence, positions: usize) -> Option<Sequence> {
            let held = *sequence.downcast_ref::<usize>()?;
            self.copies.set(self.copies.get() + 1);
            Some(Sequence::new(positions.min(held)))
        }
        fn sequence_bytes(&self, sequence: &Sequence) -> Option<usize> {
            Some(10 * sequence.downcast_ref::<usize>()?)
        }
    }

    fn ids(v: &[u32]) -> Vec<TokenId> {
        TokenId::all(v)
    }

    /// Puts `tokens` in the cache as a sequence that ran them all.
    fn keep(cache: &mut PromptCache, tokens: &[u32]) {
        cache.insert(
            &lm(),
            &ids(tokens),
            &Sequence::new(tokens.len()),
            tokens.len(),
        );
    }

    fn held(hit: &Hit) -> usize {
        *hit.sequence.downcast_ref::<usize>().unwrap()
    }

    #[test]
    fn the_longest_shared_prefix_is_copied_and_the_last_token_left_to_run() {
        let mut cache = PromptCache::new(1000);
        keep(&mut cache, &[1, 2, 3]);
        keep(&mut cache, &[1, 2, 7, 8, 9]);
        let hit = cache.take(&lm(), &ids(&[1, 2, 7, 8, 5])).unwrap();
        assert_eq!((hit.positions, held(&hit)), (4, 4));
        // The same prompt again: all but its last token.
        let hit = cache.take(&lm(), &ids(&[1, 2, 3])).unwrap();
        assert_eq!((hit.positions, held(&hit)), (2, 2));
        // Entries stay for later prompts.
        assert_eq!(cache.entries.len(), 2);
        assert!(cache.take(&lm(), &ids(&[4, 1, 2])).is_none());
        assert!(cache.take(&lm(), &ids(&[1])).is_none());
        assert!(cache.take(&lm(), &ids(&[])).is_none());
    }

    #[test]
    fn bytes_stay_within_the_budget_least_recently_used_first() {
        let mut cache = PromptCache::new(100);
        keep(&mut cache, &[1, 1, 1, 1]);
        keep(&mut cache, &[2, 2, 2, 2]);
        assert_eq!(cache.bytes(), 80);
        // Using the first makes the second the oldest.
        assert!(cache.take(&lm(), &ids(&[1, 1, 5])).is_some());
        keep(&mut cache, &[3, 3, 3]);
        assert_eq!(cache.bytes(), 70);
        assert!(cache.take(&lm(), &ids(&[2, 2, 5])).is_none());
        assert!(cache.take(&lm(), &ids(&[1, 1, 5])).is_some());
        // Larger than the whole budget: not kept, nothing evicted.
        keep(&mut cache, &[4; 11]);
        assert_eq!(cache.bytes(), 70);
        let mut off = PromptCache::new(0);
        keep(&mut off, &[1, 2, 3]);
        assert!(off.take(&lm(), &ids(&[1, 2, 3, 4])).is_none());
    }

    #[test]
    fn a_longer_prompt_replaces_its_own_prefix_and_a_shorter_adds_nothing() {
        let mut cache = PromptCache::new(1000);
        keep(&mut cache, &[1, 2]);
        keep(&mut cache, &[1, 2, 3, 4]);
        assert_eq!((cache.entries.len(), cache.bytes()), (1, 40));
        keep(&mut cache, &[1, 2, 3]);
        assert_eq!((cache.entries.len(), cache.bytes()), (1, 40));
        // Only the positions asked for are kept, however many the sequence holds.
        cache.insert(&lm(), &ids(&[9, 9]), &Sequence::new(50usize), 50);
        assert_eq!(cache.bytes(), 60);
    }

    #[test]
    fn a_prompt_too_large_for_the_budget_is_not_copied() {
        let lm = lm();
        let mut cache = PromptCache::new(100);
        cache.insert(&lm, &ids(&[1; 11]), &Sequence::new(11usize), 11);
        assert_eq!((lm.copies.get(), cache.bytes()), (0, 0));
        cache.insert(&lm, &ids(&[1; 10]), &Sequence::new(10usize), 10);
        assert_eq!((lm.copies.get(), cache.bytes()), (1, 100));
    }
}
