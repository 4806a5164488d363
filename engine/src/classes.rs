//! Classes of lexeme DFA states that no token tells apart.
//!
//! A state's generic token sets ([`crate::tokens::LexTokens`]) depend only on what the DFA
//! does with byte strings no longer than the longest token: where each path dies, accepts
//! or goes on. Two states that agree on that for every string of up to `depth` bytes (the
//! longest token's length) have the same token sets, and the first one walked serves both.
//! That matters for counted repetitions: `[a-z ]{1,4000}` has 4,000 states, each of which
//! used to cost one walk of the whole vocabulary the first time it was reached, though all
//! but the last `depth` of them behave alike for any token.
//!
//! A state's class is its *signature* at `depth`: `sig(s, 0)` is its flags (dead,
//! accepting, can continue), and `sig(s, d)` its flags with the signatures at `d - 1` of the
//! states each byte class leads to. Signatures are interned (a tuple seen before gets the
//! same number), so equal numbers mean equal behavior, exactly: no hashing of behavior, no
//! collisions. Computing one visits the `(state, depth)` pairs within `depth` bytes of the
//! state, memoized per DFA: for a counter, `depth` new pairs per state.
//!
//! The classes are only worth their cost for DFAs that reach many states along narrow paths
//! (counters of a class), so a DFA gets them from its [`CLASSES_AFTER`]th distinct walked
//! state on, and a DFA whose signature for one state takes more than [`SIGNATURE_BUDGET`]
//! transitions gives up and keeps one entry per state: a wide DFA (a date-time format, a
//! trie of enum strings) would pay more for signatures than its walks cost, and shares
//! little. (Measured: without that bound the order schema's cold masks were 1.3-1.8x
//! slower.)

use corral_grammar::{DEAD, LexemeDfa, StateId};
use rustc_hash::FxHashMap;

/// Distinct states of one DFA walked by state before its classes are computed.
pub(crate) const CLASSES_AFTER: usize = 4;

/// Most transitions one signature may follow (memoized ones are free); past it the DFA
/// keeps per-state entries. A counter of a class costs about the longest token's length
/// times its byte classes (a few hundred to a few thousand).
pub(crate) const SIGNATURE_BUDGET: usize = 4096;

/// Memoized `(state, depth)` pairs kept per DFA (then the memo restarts; interned
/// signatures stay).
const MEMO_LIMIT: usize = 1 << 18;

/// Interned signatures kept per DFA before it gives up (each holds one number per byte
/// class: a few megabytes at most).
const INTERN_LIMIT: usize = 1 << 16;

/// The signature of the dead state, at every depth.
const DEAD_SIG: u32 = 0;

/// One DFA's state classes. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct StateClasses {
    /// Distinct states walked by state so far (until [`CLASSES_AFTER`]).
    walked: usize,
    gave_up: bool,
    /// `(flags, children's signatures)` -> signature.
    intern: FxHashMap<(u8, Box<[u32]>), u32>,
    /// `(state index, depth)` -> signature.
    memo: FxHashMap<(u32, u16), u32>,
}

impl StateClasses {
    /// The class of `state` at `depth` (the longest token's bytes), or `None` where the DFA
    /// keeps per-state entries (not enough states walked yet, or it gave up). Called on
    /// each state the cache does not hold yet: until [`CLASSES_AFTER`] of them, it only
    /// counts.
    pub(crate) fn class(&mut self, dfa: &LexemeDfa, state: StateId, depth: usize) -> Option<u32> {
        if self.gave_up || depth > u16::MAX as usize {
            return None;
        }
        if self.walked < CLASSES_AFTER {
            self.walked += 1;
            return None;
        }
        if self.memo.len() > MEMO_LIMIT {
            self.memo.clear();
        }
        let bytes = dfa.class_bytes();
        let mut steps = 0usize;
        let sig = self.signature(dfa, &bytes, state, depth as u16, &mut steps);
        if sig.is_none() || self.intern.len() > INTERN_LIMIT {
            self.gave_up = true;
            self.memo = FxHashMap::default();
            self.intern = FxHashMap::default();
            return None;
        }
        sig
    }

    fn signature(
        &mut self,
        dfa: &LexemeDfa,
        bytes: &[u8],
        state: StateId,
        depth: u16,
        steps: &mut usize,
    ) -> Option<u32> {
        if state == DEAD {
            return Some(DEAD_SIG);
        }
        let key = (state.index() as u32, depth);
        if let Some(&s) = self.memo.get(&key) {
            return Some(s);
        }
        *steps += if depth > 0 { bytes.len() } else { 1 };
        if *steps > SIGNATURE_BUDGET {
            return None;
        }
        let flags = u8::from(state.is_accepting()) | u8::from(state.can_continue()) << 1;
        let children: Box<[u32]> = match depth {
            0 => Box::new([]),
            d => {
                let mut c = Vec::with_capacity(bytes.len());
                for &b in bytes {
                    c.push(self.signature(dfa, bytes, dfa.next(state, b), d - 1, steps)?);
                }
                c.into_boxed_slice()
            }
        };
        let next = self.intern.len() as u32 + 1;
        let sig = *self.intern.entry((flags, children)).or_insert(next);
        self.memo.insert(key, sig);
        Some(sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::dfa;

    /// The states of a long counter are one class until the bound is within reach; the
    /// last `depth` states each differ. Brute force: two states are in one class exactly
    /// when every string of up to `depth` bytes over the relevant bytes gives the same
    /// flags from both.
    #[test]
    fn classes_are_exactly_bounded_behavior() {
        let d = dfa("[ab]{1,40}c?");
        let depth = 4;
        let mut classes = StateClasses {
            walked: CLASSES_AFTER,
            ..StateClasses::default()
        };
        let mut states = vec![d.start()];
        let mut s = d.start();
        for _ in 0..40 {
            s = d.next(s, b'a');
            states.push(s);
        }
        let sigs: Vec<u32> = states
            .iter()
            .map(|&s| classes.class(&d, s, depth).unwrap())
            .collect();
        // All strings over {a, b, c, x} of up to `depth` bytes.
        let mut words: Vec<Vec<u8>> = vec![vec![]];
        for _ in 0..depth {
            let longer: Vec<Vec<u8>> = words
                .iter()
                .filter(|w| w.len() == words.last().unwrap().len())
                .flat_map(|w| {
                    b"abcx".iter().map(move |&b| {
                        let mut w = w.clone();
                        w.push(b);
                        w
                    })
                })
                .collect();
            words.extend(longer);
        }
        let behavior = |s: StateId| -> Vec<(bool, bool, bool)> {
            words
                .iter()
                .map(|w| {
                    let t = d.run(s, w);
                    (t == DEAD, t.is_accepting(), t.can_continue())
                })
                .collect()
        };
        for i in 0..states.len() {
            for j in 0..states.len() {
                assert_eq!(
                    sigs[i] == sigs[j],
                    behavior(states[i]) == behavior(states[j]),
                    "states {i} and {j}"
                );
            }
        }
        // 1..=36 alike (more than `depth` left), then each its own.
        assert!(sigs[1..=36].iter().all(|&x| x == sigs[1]));
        assert_eq!(
            sigs.iter().collect::<std::collections::HashSet<_>>().len(),
            1 + 1 + 4
        );
    }

    #[test]
    fn classes_wait_for_enough_states_and_give_up_when_too_costly() {
        let d = dfa("[ab]{1,40}");
        let mut classes = StateClasses::default();
        for _ in 0..CLASSES_AFTER {
            assert_eq!(classes.class(&d, d.start(), 4), None);
        }
        assert!(classes.class(&d, d.start(), 4).is_some());
        // Many states within reach at depth 20: past the budget.
        let wide = dfa("[a-z]{20}");
        let mut classes = StateClasses {
            walked: CLASSES_AFTER,
            ..StateClasses::default()
        };
        // 10,000 words of 12 random letters: a trie of about 100,000 states.
        let mut x = 7u64;
        let alternatives: Vec<String> = (0..10_000)
            .map(|_| {
                (0..12)
                    .map(|_| {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (b'a' + (x >> 59) as u8 % 26) as char
                    })
                    .collect()
            })
            .collect();
        let big = dfa(&alternatives.join("|"));
        assert!(classes.class(&wide, wide.start(), 20).is_some());
        let mut classes = StateClasses {
            walked: CLASSES_AFTER,
            ..StateClasses::default()
        };
        assert_eq!(classes.class(&big, big.start(), 64), None);
        assert!(classes.gave_up);
    }
}
