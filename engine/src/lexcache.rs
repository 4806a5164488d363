//! Token sets cached per lexeme DFA state: the reason masks are fast.
//!
//! Inside a lexeme (a JSON string body, a number) most tokens keep the lexeme's DFA alive
//! without the lexeme ending, and which ones do depends only on the DFA state. So for a
//! `(lexeme, state)` pair we walk the token trie once with the DFA alone and keep:
//!
//! - `inside`: the tokens all of whose bytes the DFA accepts (it may pass through accepting
//!   states on the way, it only must not die). Such a token is allowed whatever the Earley
//!   state is: the lexeme simply goes on (or ends exactly at the token's end).
//! - `endings`: the tokens on which the DFA dies, but only after passing an accepting state
//!   at some byte `k`. Such a token is allowed iff the grammar can continue after the lexeme
//!   ends at `k` with the token's remaining bytes. Grouped by the DFA state at the *first*
//!   such `k` (later ends are reached from there), the remaining bytes of each group form a
//!   small trie of suffixes.
//!
//! Tokens the DFA kills before any accepting state are never allowed through this lexeme.
//! The mask for a run is `inside`, plus, for each ending group, a walk of its suffix trie
//! by the recognizer placed just after the lexeme's end. That walk visits a few hundred
//! nodes where the full trie has hundreds of thousands. (llguidance's "slicer" and
//! XGrammar's "context-independent tokens" are published forms of the same idea.)

use corral_grammar::{Grammar, LexemeDfa, LexemeId};
use corral_grammar::DEAD;
use corral_trie::{FixedBitSet, NO_TOKEN, TokenSpace, TokenTrie};
use std::sync::{Arc, OnceLock};

/// The token sets of one `(lexeme, DFA state)`. See the module docs.
#[derive(Debug)]
pub struct LexTokens {
    pub inside: FixedBitSet,
    /// `(DFA state where the lexeme first ends, trie of the remaining bytes)`.
    pub endings: Vec<(u32, TokenTrie)>,
}

/// Lazily filled `(lexeme, state) -> LexTokens`, shared by every adapter of one constraint.
#[derive(Debug)]
pub struct LexCache {
    per_lexeme: Vec<Box<[OnceLock<Arc<LexTokens>>]>>,
}

impl LexCache {
    pub fn new(g: &Grammar) -> LexCache {
        LexCache {
            per_lexeme: g
                .lexemes()
                .iter()
                .map(|l| (0..l.dfa.len()).map(|_| OnceLock::new()).collect())
                .collect(),
        }
    }

    /// The token sets for `lexeme` in (tagged) DFA `state`, computed on first use.
    pub fn get(&self, g: &Grammar, space: &TokenSpace, lexeme: LexemeId, state: u32) -> &Arc<LexTokens> {
        self.per_lexeme[lexeme.0 as usize][LexemeDfa::index(state)]
            .get_or_init(|| Arc::new(compute(&g.lexeme(lexeme).dfa, state, space)))
    }

    /// Number of `(lexeme, state)` entries computed so far.
    pub fn computed(&self) -> usize {
        self.per_lexeme.iter().map(|v| v.iter().filter(|c| c.get().is_some()).count()).sum()
    }
}

/// One walk of the whole trie with the DFA alone.
fn compute(dfa: &LexemeDfa, start: u32, space: &TokenSpace) -> LexTokens {
    let trie = space.trie();
    let nodes = trie.nodes();
    let vocab = space.vocab();
    let mut inside = FixedBitSet::with_capacity(space.width());
    // endings[group] = (end state, entries)
    let mut groups: Vec<(u32, Vec<(Vec<u8>, u32)>)> = Vec::new();
    // Per depth on the current path: DFA state, and the first accepting point (depth, state).
    let mut state_at: Vec<u32> = vec![start];
    let mut accept_at: Vec<Option<(usize, u32)>> = vec![None];
    let mut i = 1;
    while i < nodes.len() {
        let n = nodes[i];
        let d = n.depth as usize;
        let q = state_at[d - 1];
        let acc = accept_at[d - 1];
        let next = dfa.next(q, n.byte);
        if next == DEAD {
            if let Some((k, end_state)) = acc {
                // Every token in this subtree ends the lexeme at k, then needs the parser.
                let group = match groups.iter().position(|g| g.0 == end_state) {
                    Some(p) => p,
                    None => {
                        groups.push((end_state, Vec::new()));
                        groups.len() - 1
                    }
                };
                for j in i..i + n.subtree as usize {
                    if nodes[j].token != NO_TOKEN {
                        for t in trie.tokens_at(j) {
                            let bytes = vocab.token_bytes(t).expect("trie tokens have bytes");
                            groups[group].1.push((bytes[k..].to_vec(), t));
                        }
                    }
                }
            }
            i += n.subtree as usize;
            continue;
        }
        let acc = acc.or_else(|| dfa.is_accepting(next).then_some((d, next)));
        if state_at.len() <= d {
            state_at.push(next);
            accept_at.push(acc);
        } else {
            state_at[d] = next;
            accept_at[d] = acc;
        }
        trie.mark(i, &mut inside);
        i += 1;
    }
    LexTokens {
        inside,
        endings: groups
            .into_iter()
            .map(|(state, entries)| (state, TokenTrie::from_entries(entries)))
            .collect(),
    }
}
