//! [`Constraint`]: a grammar bound to a tokenizer's token space, and the token sets of its
//! lexeme states, computed on first use (see [`crate::tokens`]) from a [`MaskCache`] that
//! every constraint on the same tokenizer may share. Adapters
//! ([`crate::RobustConstrainedAdapter`]) read them to build each step's mask.

use crate::cache::MaskCache;
use crate::tokens::{
    Chain, LexTokens, Shift, SuffixWalk, WALKED_PREFIXES, chain, few_suffix_starts, shift,
};
use corral_grammar::ast::{TokenAst, TokenTarget};
use corral_grammar::{Grammar, LexemeId, StateId, TokenRefId};
use corral_trie::{Alphabet, Prefix, TokenId, TokenSpace};
use std::sync::{Arc, OnceLock};

/// A grammar bound to a token space, with the token sets of its lexeme states (from a
/// [`MaskCache`], which every constraint on the same tokenizer may share).
#[derive(Debug)]
pub struct Constraint {
    pub(crate) grammar: Arc<Grammar>,
    cache: Arc<MaskCache>,
    /// Token references resolved to ids (`None`: names no token of this vocabulary).
    pub(crate) refs: Vec<Option<TokenId>>,
    /// Per [`Alphabet`]: more characters than any token's slice run or prefix has.
    horizon: [u32; 2],
    /// Per lexeme: its states' token sets and slice shifts, filled on first use.
    tables: Vec<LexemeTables>,
}

/// Per-state memos of one lexeme, by state index.
#[derive(Debug, Default)]
struct LexemeTables {
    tokens: Slots<OnceLock<Arc<StateTokens>>>,
    /// Per [`Alphabet`].
    shifts: [Slots<OnceLock<Shift>>; 2],
}

/// Slots by index, in buckets of doubling size allocated on first use (bucket `k` holds
/// indices `2^k - 1 .. 2^(k+1) - 1`): a lazily built DFA's states keep appearing, and the
/// memos of those already there must not move.
#[derive(Debug)]
struct Slots<T> {
    buckets: [OnceLock<Box<[T]>>; 32],
}

impl<T> Default for Slots<T> {
    fn default() -> Slots<T> {
        Slots {
            buckets: std::array::from_fn(|_| OnceLock::new()),
        }
    }
}

impl<T: Default> Slots<T> {
    fn get(&self, i: usize) -> &T {
        let i = i + 1;
        let k = (usize::BITS - 1 - i.leading_zeros()) as usize;
        let bucket =
            self.buckets[k].get_or_init(|| (0..1usize << k).map(|_| T::default()).collect());
        &bucket[i - (1 << k)]
    }

    /// The slots allocated so far.
    fn iter(&self) -> impl Iterator<Item = &T> {
        self.buckets
            .iter()
            .filter_map(|b| b.get())
            .flat_map(|b| b.iter())
    }
}

/// The token sets of one lexeme DFA state (see [`crate::tokens`]).
#[derive(Debug)]
pub(crate) enum StateTokens {
    /// Found by one walk of the token trie, perhaps from a state of another DFA with the
    /// same residual (see [`MaskCache::generic`]): the offsets `from` there and `to` here
    /// map the sets' end states to this DFA's
    /// ([`corral_grammar::LexemeDfa::counterpart`]).
    Generic {
        sets: Arc<LexTokens>,
        from: u32,
        to: u32,
    },
    /// A state slice characters shift uniformly: its chain, and the suffix walks from the
    /// chain's first states (one for a loop).
    Sliced {
        alphabet: Alphabet,
        chain: Chain,
        walks: Vec<Arc<SuffixWalk>>,
    },
}

impl Constraint {
    /// `grammar` on `space`, with a cache of its own (see [`Constraint::with_cache`] to
    /// share one).
    pub fn new(grammar: Arc<Grammar>, space: Arc<TokenSpace>) -> Arc<Constraint> {
        Constraint::with_cache(grammar, &MaskCache::new(space))
    }

    /// `grammar` on the token space of `cache`, sharing its token sets with every other
    /// constraint of the cache.
    pub fn with_cache(grammar: Arc<Grammar>, cache: &Arc<MaskCache>) -> Arc<Constraint> {
        let space = cache.space();
        let refs = grammar
            .token_refs()
            .iter()
            .map(|t| match &t.target {
                TokenTarget::Id(id) => Some(TokenId(*id)),
                TokenTarget::Text(name) => space.vocab().token_by_text(name),
            })
            .collect();
        let horizon = Alphabet::ALL.map(|a| {
            let slice = space.slice_of(a);
            slice.max_chars().max(slice.max_prefix()) + 1
        });
        Arc::new(Constraint {
            horizon,
            tables: grammar
                .lexemes()
                .iter()
                .map(|_| LexemeTables::default())
                .collect(),
            cache: cache.clone(),
            grammar,
            refs,
        })
    }

    /// The compiled grammar.
    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.grammar
    }

    /// The token space the grammar is bound to (the cache's).
    pub fn space(&self) -> &Arc<TokenSpace> {
        self.cache.space()
    }

    /// The token-set cache this constraint uses.
    pub fn cache(&self) -> &Arc<MaskCache> {
        &self.cache
    }

    /// Heap bytes of what this constraint holds besides the shared token-set cache: its
    /// grammar's built lexeme DFAs (each counted once per call of `seen`: `seen` collects
    /// the DFAs already counted, so several constraints sharing one count it once) and its
    /// per-state tables.
    pub fn memory_usage(&self, seen: &mut rustc_hash::FxHashSet<usize>) -> usize {
        let dfas: usize = self
            .grammar
            .lexemes()
            .iter()
            .filter_map(|l| l.built_dfa())
            .filter(|d| seen.insert(Arc::as_ptr(d) as usize))
            .map(|d| d.memory_usage())
            .sum();
        let slots: usize = self
            .tables
            .iter()
            .map(|t| {
                t.tokens.iter().count() * std::mem::size_of::<OnceLock<Arc<StateTokens>>>()
                    + t.shifts.iter().map(|s| s.iter().count()).sum::<usize>()
                        * std::mem::size_of::<OnceLock<Shift>>()
            })
            .sum();
        dfas + slots
    }

    /// `(lexeme, state)` token sets computed so far by this constraint.
    pub fn cached_states(&self) -> usize {
        self.tables
            .iter()
            .map(|t| t.tokens.iter().filter(|c| c.get().is_some()).count())
            .sum()
    }

    /// Whether token `id` satisfies token reference `r`.
    pub(crate) fn ref_matches(&self, r: TokenRefId, id: TokenId) -> bool {
        let ast: &TokenAst = &self.grammar.token_refs()[r.0 as usize];
        match self.refs[r.0 as usize] {
            Some(target) => (target == id) != ast.negated,
            None => ast.negated,
        }
    }

    /// A token that satisfies token reference `r`, for a completion: the one it names, or
    /// for a negated reference the first token of the vocabulary with text that is neither
    /// the one excluded nor an end token. `None` when the reference names no token here.
    pub(crate) fn ref_token(&self, r: TokenRefId) -> Option<TokenId> {
        let space = self.space();
        let width = space.width();
        if !self.grammar.token_refs()[r.0 as usize].negated {
            return self.refs[r.0 as usize].filter(|t| t.index() < width);
        }
        (0..space.vocab().len().min(width) as u32)
            .map(TokenId)
            .find(|&t| {
                self.ref_matches(r, t)
                    && !space.eos().contains(&t)
                    && space.vocab().token_bytes(t).is_some_and(|b| !b.is_empty())
            })
    }

    /// How the characters of `alphabet` shift `state` of lexeme `l` (remembered). A count
    /// that reaches neither bound within one character (four bytes) shifts as its
    /// representative at that depth does, recounted: a chain through a counted string's
    /// body computes the transitions of a few counts, not of every one.
    fn slice_shift(&self, l: LexemeId, state: StateId, alphabet: Alphabet) -> Shift {
        let dfa = &self.grammar.lexeme(l).dfa();
        *self.tables[l.0 as usize].shifts[alphabet.index()]
            .get(state.index())
            .get_or_init(|| {
                let r = dfa.representative(state, 4);
                if r == state {
                    return shift(dfa, state, alphabet);
                }
                match self.slice_shift(l, r, alphabet) {
                    Shift::To(t) => Shift::To(dfa.recount(t, r, state)),
                    other => other,
                }
            })
    }

    /// The chain of `state` of lexeme `l` on the first alphabet that slices it. The words
    /// slice is taken only where letters and digits go on (a state they all end is walked
    /// whole, which dies at their first byte) and few other bytes do, there and at the
    /// chain's states its suffix walks start from.
    fn sliced(&self, l: LexemeId, state: StateId) -> Option<(Alphabet, Chain)> {
        let dfa = self.grammar.lexeme(l).dfa();
        Alphabet::ALL.into_iter().find_map(|a| {
            let words = a == Alphabet::Words;
            if words && !few_suffix_starts(dfa, state) {
                return None;
            }
            // Targets by their representative: a chain through a counted string's body far
            // from its bounds is a loop.
            let mut shift_of = |s| match self.slice_shift(l, s, a) {
                Shift::To(t) => Shift::To(dfa.representative(t, self.cache.depth())),
                other => other,
            };
            chain(state, self.horizon[a.index()], &mut shift_of)
                .filter(|ch| {
                    // Every state the suffix walks start from keeps them small.
                    !words
                        || (ch.left != Some(0)
                            && ch.states[1..]
                                .iter()
                                .take(WALKED_PREFIXES as usize)
                                .all(|&s| few_suffix_starts(dfa, s)))
                })
                .map(|ch| (a, ch))
        })
    }

    /// The token sets of `state` of lexeme `l` (remembered), which are those of its
    /// representative (see [`corral_grammar::LexemeDfa::representative`]).
    pub(crate) fn state_tokens(&self, l: LexemeId, state: StateId) -> &Arc<StateTokens> {
        let lex = self.grammar.lexeme(l);
        let state = lex.dfa().representative(state, self.cache.depth());
        let slot = self.tables[l.0 as usize].tokens.get(state.index());
        slot.get_or_init(|| match self.sliced(l, state) {
            Some((alphabet, ch)) => {
                let slice = self.space().slice_of(alphabet);
                let reach = ch.left.unwrap_or(u32::MAX).min(slice.max_prefix());
                let walked = if ch.self_loop {
                    1
                } else {
                    reach.min(WALKED_PREFIXES - 1) + 1
                };
                // Walk `n` serves the tokens with a prefix of `n` characters, but one walk
                // serves them all where the chain loops.
                let walks = (0..walked)
                    .map(|n| {
                        let want = if ch.self_loop {
                            Prefix::Any
                        } else {
                            Prefix::of_length(n)
                        };
                        self.cache
                            .walk(&lex.key, lex.dfa(), ch.state(n), (alphabet, want))
                    })
                    .collect();
                Arc::new(StateTokens::Sliced {
                    alphabet,
                    chain: ch,
                    walks,
                })
            }
            None => {
                let (sets, from, to) = self
                    .along_run(l, state)
                    .unwrap_or_else(|| self.cache.generic(&lex.key, lex.dfa(), state));
                Arc::new(StateTokens::Generic { sets, from, to })
            }
        })
    }

    /// The sets of `state` of lexeme `l` where it is a count of a byte run and this
    /// constraint holds the sets of an earlier count of it (the nearest first): those less
    /// the tokens past `state`'s room ([`MaskCache::along_run`]). The search reads only
    /// this constraint's slots, so a state with no earlier count held costs no lookup.
    fn along_run(&self, l: LexemeId, state: StateId) -> Option<(Arc<LexTokens>, u32, u32)> {
        let lex = self.grammar.lexeme(l);
        let dfa = lex.dfa();
        let slots = &self.tables[l.0 as usize].tokens;
        let depth = self.cache.depth();
        let earlier = (1..)
            .map_while(|k| dfa.run_back(state, k))
            .find_map(|s| slots.get(dfa.representative(s, depth).index()).get())?;
        let StateTokens::Generic { sets, from, to } = &**earlier else {
            return None;
        };
        self.cache
            .along_run(&lex.key, dfa, state, (sets, *from, *to))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use corral_grammar::{CompileOptions, compile_gbnf};
    use corral_trie::Vocabulary;

    /// A token space of `words`, ids in order, no end token.
    pub(crate) fn space_of(words: &[&[u8]]) -> Arc<TokenSpace> {
        let vocab = Vocabulary::from_parts(
            words
                .iter()
                .enumerate()
                .map(|(i, w)| (TokenId(i as u32), w.to_vec())),
            [],
        );
        Arc::new(TokenSpace::new(vocab, None, Vec::new()))
    }

    fn constraint(grammar: &str) -> Arc<Constraint> {
        let words: [&[u8]; 8] = [b"ab", b"a1", b"x,", b",", b"Q", b"zz!", b" ", b"a b"];
        Constraint::new(
            compile_gbnf(grammar, &CompileOptions::default()).unwrap(),
            space_of(&words),
        )
    }

    /// How the (one) lexeme's `state` gets its tokens: the slice of an alphabet, or a walk.
    fn kind(c: &Constraint, state: StateId) -> Option<Alphabet> {
        match &**c.state_tokens(LexemeId(0), state) {
            StateTokens::Sliced { alphabet, .. } => Some(*alphabet),
            StateTokens::Generic { .. } => None,
        }
    }

    #[test]
    fn the_words_slice_is_taken_where_its_suffix_walks_stay_small() {
        // Letters and digits, then '@': only '@' goes on besides them.
        let c = constraint(r#"root ::= [A-Za-z0-9]+ "@""#);
        let start = c.grammar.lexeme(LexemeId(0)).dfa().start();
        assert_eq!(kind(&c, start), Some(Alphabet::Words));
        // Two of them, then almost any byte: the chain reaches a state most bytes keep
        // alive, whose suffix walk would be most of the vocabulary.
        let c = constraint(r#"root ::= [A-Za-z0-9]{2} [^,]* ",""#);
        let start = c.grammar.lexeme(LexemeId(0)).dfa().start();
        assert_eq!(kind(&c, start), None);
        // Every letter and digit ends the lexeme: walked (the walk dies at their first byte).
        let c = constraint(r#"root ::= "a" [,;]"#);
        let dfa = c.grammar.lexeme(LexemeId(0)).dfa();
        assert_eq!(kind(&c, dfa.next(dfa.start(), b'a')), None);
        // A string body stays with the string slice.
        let c = constraint(r#"root ::= "\"" [^"\\]* "\"""#);
        let dfa = c.grammar.lexeme(LexemeId(0)).dfa();
        assert_eq!(
            kind(&c, dfa.next(dfa.start(), b'"')),
            Some(Alphabet::Strings)
        );
    }
}
