//! Token sets cached per lexeme DFA state: the reason masks are fast.
//!
//! Inside a lexeme (a JSON string body, a number) most tokens keep the lexeme's DFA alive
//! without the lexeme ending, and which ones do depends only on the DFA state. So for a
//! `(lexeme, state)` pair we walk the token trie once with the DFA alone and keep:
//!
//! - `inside`: the tokens all of whose bytes the DFA accepts (it may pass through accepting
//!   states on the way, it only must not die). Such a token is allowed whatever the Earley
//!   state is: the lexeme simply goes on (or ends exactly at the token's end).
//! - endings: where the DFA first accepts on a trie path (the lexeme can end there), with
//!   the DFA state at that point. A token below such a node that the DFA then kills is
//!   allowed iff the grammar can continue after the lexeme ends there with the token's
//!   remaining bytes; that depends on the Earley state, so it is not cached: the mask walks
//!   those remaining bytes with the recognizer placed just after the lexeme's end
//!   ([`corral_grammar::Recognizer::push_lexeme_end`]). Only the first accepting node on a
//!   path counts (deeper ends are reached from it). Two forms:
//!   - `suffixes`: for ending nodes with small subtrees (inside a JSON string: every token
//!     holding a closing quote, `abc",`), the remaining bytes of the tokens the DFA kills,
//!     merged into one small trie per end state, so `",` is walked once for all of them;
//!   - `subtrees`: ending nodes with large subtrees (a space after which anything may
//!     follow) are walked in place in the main trie; the recognizer prunes them at their
//!     first bytes.
//!
//! Tokens the DFA kills before any accepting state are never allowed through this lexeme.
//! (llguidance's "slicer" and XGrammar's "context-independent tokens" are published forms
//! of the same idea.)

use corral_grammar::DEAD;
use corral_grammar::{Grammar, LexemeDfa, LexemeId};
use corral_trie::{FixedBitSet, TokenId, TokenSpace, TokenTrie};
use std::sync::{Arc, OnceLock};

/// The token sets of one `(lexeme, DFA state)`. See the module docs.
#[derive(Debug)]
pub struct LexTokens {
    pub inside: FixedBitSet,
    /// `(end state, trie of the remaining bytes of tokens that need the parser)`.
    pub suffixes: Vec<(u32, TokenTrie)>,
    /// `(end state, main-trie node)`: walk the node's subtree in place. Sorted by state.
    pub subtrees: Vec<(u32, u32)>,
}

/// The bytes of a token after a lexeme's end, and the token.
type Suffix = (Vec<u8>, TokenId);

/// Ending nodes with at most this many nodes below them are merged into suffix tries.
const MERGE_SUBTREE: u32 = 256;

/// Lazily filled `(lexeme, state class) -> LexTokens`, shared by every adapter of one
/// constraint. States are grouped into classes that no token can tell apart
/// ([`LexemeDfa::bounded_classes`] up to the longest token): in a counted lexeme such as
/// `[^"]{0,500}` every count far from the bound shares one entry, and one mask.
#[derive(Debug)]
pub struct LexCache {
    /// Per lexeme: state index -> class.
    classes: Vec<Box<[u32]>>,
    per_lexeme: Vec<Box<[OnceLock<Arc<LexTokens>>]>>,
}

impl LexCache {
    /// `max_token_len`: the longest token's bytes.
    pub fn new(g: &Grammar, max_token_len: usize) -> LexCache {
        let classes: Vec<Box<[u32]>> = g
            .lexemes()
            .iter()
            .map(|l| l.dfa.bounded_classes(max_token_len + 1).into_boxed_slice())
            .collect();
        LexCache {
            per_lexeme: classes
                .iter()
                .map(|c| {
                    let n = c.iter().max().map_or(1, |&m| m as usize + 1);
                    (0..n).map(|_| OnceLock::new()).collect()
                })
                .collect(),
            classes,
        }
    }

    /// The class of (tagged) DFA `state` of `lexeme`.
    #[inline]
    pub fn class(&self, lexeme: LexemeId, state: u32) -> u32 {
        self.classes[lexeme.0 as usize][LexemeDfa::index(state)]
    }

    /// The token sets for `lexeme` in (tagged) DFA `state`, computed on first use of its
    /// class.
    pub fn get(
        &self,
        g: &Grammar,
        space: &TokenSpace,
        lexeme: LexemeId,
        state: u32,
    ) -> &Arc<LexTokens> {
        self.per_lexeme[lexeme.0 as usize][self.class(lexeme, state) as usize]
            .get_or_init(|| Arc::new(compute(&g.lexeme(lexeme).dfa, state, space)))
    }

    /// Number of `(lexeme, state)` entries computed so far.
    pub fn computed(&self) -> usize {
        self.per_lexeme
            .iter()
            .map(|v| v.iter().filter(|c| c.get().is_some()).count())
            .sum()
    }
}

/// One walk of the whole trie with the DFA alone.
fn compute(dfa: &LexemeDfa, start: u32, space: &TokenSpace) -> LexTokens {
    const NONE: u32 = u32::MAX;
    let trie = space.trie();
    let nodes = trie.nodes();
    let vocab = space.vocab();
    let mut inside = FixedBitSet::with_capacity(space.width());
    let mut subtrees = Vec::new();
    // (end state, (remaining bytes, token)) per group.
    let mut groups: Vec<(u32, Vec<Suffix>)> = Vec::new();
    // Per depth on the current path: the DFA state, and the first node below the root
    // where the lexeme could end (NONE if none yet).
    let mut state_at: Vec<u32> = vec![start];
    let mut ended_at: Vec<u32> = vec![NONE];
    let mut i = 1;
    while i < nodes.len() {
        let n = nodes[i];
        let d = n.depth as usize;
        let next = dfa.next(state_at[d - 1], n.byte);
        let ended = ended_at[d - 1];
        if next == DEAD {
            if ended != NONE && nodes[ended as usize].subtree <= MERGE_SUBTREE {
                // The tokens below need the parser after the lexeme's end at `ended`.
                let a = ended as usize;
                let k = nodes[a].depth as usize;
                let end_state = state_at[k];
                let g = match groups.iter().position(|g| g.0 == end_state) {
                    Some(g) => g,
                    None => {
                        groups.push((end_state, Vec::new()));
                        groups.len() - 1
                    }
                };
                for j in i..i + n.subtree as usize {
                    for t in trie.tokens_at(j) {
                        let bytes = vocab.token_bytes(t).expect("trie tokens have bytes");
                        groups[g].1.push((bytes[k..].to_vec(), t));
                    }
                }
            }
            i += n.subtree as usize;
            continue;
        }
        let mut here = ended;
        if here == NONE && dfa.is_accepting(next) {
            here = i as u32;
            if n.subtree > MERGE_SUBTREE {
                subtrees.push((next, i as u32));
            }
        }
        if state_at.len() <= d {
            state_at.push(next);
            ended_at.push(here);
        } else {
            state_at[d] = next;
            ended_at[d] = here;
        }
        trie.mark(i, &mut inside);
        i += 1;
    }
    subtrees.sort_unstable();
    LexTokens {
        inside,
        suffixes: groups
            .into_iter()
            .map(|(state, entries)| (state, TokenTrie::from_entries(entries)))
            .collect(),
        subtrees,
    }
}
