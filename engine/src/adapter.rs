//! The `RobustConstrainedAdapter`: a grammar's recognizer joined with a model's tokens.
//!
//! Per decoding step:
//! 1. [`RobustConstrainedAdapter::compute_mask`] fills a bitset with every token that can
//!    come next: for each lexer run (a partial lexeme, matched so far) the
//!    token sets of its DFA state ([`crate::tokens`], cached per tokenizer in a
//!    [`MaskCache`]), plus walks with the recognizer of what follows where the lexeme can
//!    end inside a token; token references by id; EOS and stop tokens exactly when the
//!    grammar accepts.
//! 2. The caller samples a token from the masked logits.
//! 3. [`RobustConstrainedAdapter::step_with_token`] feeds it; a token the grammar cannot
//!    take is a typed error that changes nothing.
//!
//! Every tokenization of a valid output is allowed, not only the canonical one: the mask is
//! a property of bytes, computed against the trie of all tokens. A token may end inside a
//! lexeme (the DFA state carries over) or span several lexemes (the recognizer completes one
//! and starts the next inside the token).
//!
//! Errors are sticky: after a recognizer limit or an internal failure, every call returns
//! the same error. A rejected token is not an error of the adapter's state: it returns
//! [`AdapterError::TokenNotAllowed`] and the adapter stays usable.

use crate::cache::MaskCache;
use crate::tokens::{
    Chain, LexTokens, Outcome, Shift, SuffixWalk, WALKED_PREFIXES, chain, few_suffix_starts,
    run_suffix, shift, suffix_node,
};
use corral_grammar::ast::{TokenAst, TokenTarget};
use corral_grammar::{Grammar, LexemeId, Piece, RecognizeError, Recognizer, Run, TokenRefId};
use corral_trie::{Alphabet, ByteRecognizer, FixedBitSet, NodeId, SuffixId, TokenId, TokenSpace};
use std::sync::{Arc, OnceLock};

/// A grammar bound to a token space, with the token sets of its lexeme states (from a
/// [`MaskCache`], which every constraint on the same tokenizer may share).
#[derive(Debug)]
pub struct Constraint {
    grammar: Arc<Grammar>,
    cache: Arc<MaskCache>,
    /// Token references resolved to ids (`None`: names no token of this vocabulary).
    refs: Vec<Option<TokenId>>,
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
enum StateTokens {
    /// Found by one walk of the token trie.
    Generic(Arc<LexTokens>),
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

    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.grammar
    }

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
    fn ref_matches(&self, r: TokenRefId, id: TokenId) -> bool {
        let ast: &TokenAst = &self.grammar.token_refs()[r.0 as usize];
        match self.refs[r.0 as usize] {
            Some(target) => (target == id) != ast.negated,
            None => ast.negated,
        }
    }

    /// A token that satisfies token reference `r`, for a completion: the one it names, or
    /// for a negated reference the first token of the vocabulary with text that is neither
    /// the one excluded nor an end token. `None` when the reference names no token here.
    fn ref_token(&self, r: TokenRefId) -> Option<TokenId> {
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
    fn shift(&self, l: LexemeId, state: u32, alphabet: Alphabet) -> Shift {
        let dfa = &self.grammar.lexeme(l).dfa();
        *self.tables[l.0 as usize].shifts[alphabet.index()]
            .get(corral_grammar::LexemeDfa::index(state))
            .get_or_init(|| {
                let r = dfa.representative(state, 4);
                if r == state {
                    return shift(dfa, state, alphabet);
                }
                match self.shift(l, r, alphabet) {
                    Shift::To(t) => Shift::To(dfa.recount(t, r, state)),
                    other => other,
                }
            })
    }

    /// The chain of `state` of lexeme `l` on the first alphabet that slices it. The words
    /// slice is taken only where letters and digits go on (a state they all end is walked
    /// whole, which dies at their first byte) and few other bytes do, there and at the
    /// chain's states its suffix walks start from.
    fn sliced(&self, l: LexemeId, state: u32) -> Option<(Alphabet, Chain)> {
        let dfa = self.grammar.lexeme(l).dfa();
        Alphabet::ALL.into_iter().find_map(|a| {
            let words = a == Alphabet::Words;
            if words && !few_suffix_starts(dfa, state) {
                return None;
            }
            // Targets by their representative: a chain through a counted string's body far
            // from its bounds is a loop.
            let mut shift_of = |s| match self.shift(l, s, a) {
                Shift::To(t) => Shift::To(dfa.representative(t, self.cache.depth())),
                other => other,
            };
            chain(dfa, state, self.horizon[a.index()], &mut shift_of)
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
    fn tokens(&self, l: LexemeId, state: u32) -> &Arc<StateTokens> {
        let lex = self.grammar.lexeme(l);
        let state = lex.dfa().representative(state, self.cache.depth());
        let slot = self.tables[l.0 as usize]
            .tokens
            .get(corral_grammar::LexemeDfa::index(state));
        slot.get_or_init(|| match self.sliced(l, state) {
            Some((alphabet, ch)) => {
                let slice = self.space().slice_of(alphabet);
                let reach = ch.left.unwrap_or(u32::MAX).min(slice.max_prefix());
                let walked = if ch.self_loop {
                    1
                } else {
                    reach.min(WALKED_PREFIXES - 1) + 1
                };
                let walks = (0..walked)
                    .map(|n| self.cache.walk(&lex.key, lex.dfa(), ch.state(n), alphabet))
                    .collect();
                Arc::new(StateTokens::Sliced {
                    alphabet,
                    chain: ch,
                    walks,
                })
            }
            None => Arc::new(StateTokens::Generic(self.cache.generic(
                &lex.key,
                lex.dfa(),
                state,
            ))),
        })
    }
}

/// Why the adapter refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    #[error("token {token} is not allowed at byte {position}")]
    TokenNotAllowed { token: TokenId, position: u64 },
    #[error("token {token} is outside the vocabulary (mask width {width})")]
    UnknownToken { token: TokenId, width: usize },
    #[error(
        "the grammar cannot continue and does not accept at byte {position} (no token can produce what it needs)"
    )]
    NoContinuation { position: u64 },
    #[error("generation already ended with an end-of-sequence token")]
    Finished,
    #[error(transparent)]
    Limit(#[from] RecognizeError),
}

/// The shortest completion from an adapter's state, for a budget
/// ([`RobustConstrainedAdapter::completion_tokens_within`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Its tokens (empty: complete already).
    Tokens(Vec<TokenId>),
    /// Longer than the budget: at least this many tokens (not written out).
    TooLong { at_least: usize },
    /// Nothing completes it in this vocabulary's tokens.
    Impossible,
}

/// One partial lexeme, for [`StateInfo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialLexeme {
    /// The lexeme's source text or rule name.
    pub lexeme: String,
    /// The bytes it has matched so far.
    pub matched: Vec<u8>,
    /// Whether it could end right here.
    pub can_end: bool,
}

/// What the adapter is doing, for debugging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateInfo {
    /// Bytes of output so far.
    pub position: u64,
    /// Tokens consumed so far.
    pub tokens: usize,
    pub accepting: bool,
    /// Lexemes under way (already matched at least one byte).
    pub partial_lexemes: Vec<PartialLexeme>,
    /// Terminals that can start here: lexemes (by source text) and token references.
    pub allowed_terminals: Vec<String>,
}

/// Walks after a lexeme's end kept per adapter (a few per open string; cleared when full).
const MAX_REMEMBERED_WALKS: usize = 64;

/// The adapter. See the module docs.
#[derive(Clone, Debug)]
pub struct RobustConstrainedAdapter {
    c: Arc<Constraint>,
    rec: Recognizer,
    /// Recognizer frames pushed by each consumed token (0 for EOS).
    steps: Vec<u32>,
    /// The output so far (for `state_info`).
    output: Vec<u8>,
    finished: bool,
    error: Option<AdapterError>,
    runs: Vec<Run>,
    /// The last mask computed, with the recognizer's state key at that time.
    last_mask: Option<(Vec<u64>, FixedBitSet)>,
    key: Vec<u64>,
    /// Tokens found by walks after a lexeme's end: `(uid of the set the lexeme started
    /// in, lexeme, end state, trie node)` -> tokens (at most [`MAX_REMEMBERED_WALKS`]).
    walks: rustc_hash::FxHashMap<(u64, u32, u32, u32), Vec<TokenId>>,
    /// The same for walks of the slice's suffix trie: the suffixes the parser takes.
    suffix_walks: rustc_hash::FxHashMap<(u64, u32, u32, u32), FixedBitSet>,
}

/// Drives the grammar's recognizer from the trie walk, keeping the first error.
struct Walker<'a> {
    rec: &'a mut Recognizer,
    error: Option<RecognizeError>,
}

impl ByteRecognizer for Walker<'_> {
    #[inline]
    fn push(&mut self, byte: u8) -> bool {
        match self.rec.push_byte(byte) {
            Ok(ok) => ok,
            Err(e) => {
                self.error.get_or_insert(e);
                false
            }
        }
    }

    #[inline]
    fn pop(&mut self, n: usize) {
        self.rec.pop(n);
    }
}

/// Puts the recognizer just after `run`'s lexeme ends in `end_state`; false if that is
/// not possible (or failed: the error is kept in the walker).
fn push_end(walker: &mut Walker<'_>, run: Run, end_state: u32) -> bool {
    match walker.rec.push_lexeme_end(run, end_state) {
        Ok(ok) => ok,
        Err(e) => {
            walker.error.get_or_insert(e);
            false
        }
    }
}

/// The adapter's memos of walks after a lexeme's end, borrowed for one mask.
struct Memos<'a> {
    walks: &'a mut rustc_hash::FxHashMap<(u64, u32, u32, u32), Vec<TokenId>>,
    suffix_walks: &'a mut rustc_hash::FxHashMap<(u64, u32, u32, u32), FixedBitSet>,
}

/// The tokens of a run in a generic state: its inside set, the suffix tries where its
/// lexeme ends inside a token, and the main-trie subtrees below such ends.
fn generic_run(
    c: &Constraint,
    walker: &mut Walker<'_>,
    memo: &mut Memos<'_>,
    run: Run,
    sets: &LexTokens,
    mask: &mut FixedBitSet,
) {
    sets.inside.union_into(mask);
    // Where the lexeme can end inside a token: continue from there with the recognizer
    // just after the lexeme's end (one push per distinct end state).
    for (end_state, suffixes) in &sets.suffixes {
        if push_end(walker, run, *end_state) {
            suffixes.walk(walker, mask);
            walker.rec.pop(1);
        }
    }
    let space = c.space();
    let trie = space.trie();
    let nodes = trie.nodes();
    let mut k = 0;
    while k < sets.subtrees.len() {
        let end_state = sets.subtrees[k].0;
        let group_end = k + sets.subtrees[k..]
            .iter()
            .take_while(|e| e.0 == end_state)
            .count();
        // What the walk below a node finds depends only on where the lexeme started, the
        // lexeme, and its end state: remembered across masks.
        let from = walker.rec.set_uid(run.set);
        let mut pushed = None;
        for &(_, node) in &sets.subtrees[k..group_end] {
            let key = (from, run.lexeme.0, end_state, node.0);
            if let Some(tokens) = memo.walks.get(&key) {
                tokens.iter().for_each(|&t| mask.insert(t.index()));
                continue;
            }
            if *pushed.get_or_insert_with(|| push_end(walker, run, end_state)) {
                let (lo, n) = (node.index(), nodes[node.index()]);
                let mut tokens = Vec::new();
                trie.walk_range_tokens(
                    walker,
                    &mut tokens,
                    lo + 1,
                    lo + n.subtree as usize,
                    n.depth as usize,
                );
                tokens.iter().for_each(|&t| mask.insert(t.index()));
                if memo.walks.len() >= MAX_REMEMBERED_WALKS {
                    memo.walks.clear();
                }
                memo.walks.insert(key, tokens);
            }
        }
        if pushed == Some(true) {
            walker.rec.pop(1);
        }
        k = group_end;
    }
}

/// The suffixes below `node` of the suffix trie of `alphabet`'s slice that the parser takes
/// after `run`'s lexeme ends in `end_state` there (remembered).
fn parser_suffixes<'m>(
    c: &Constraint,
    walker: &mut Walker<'_>,
    memo: &'m mut Memos<'_>,
    (run, alphabet): (Run, Alphabet),
    end_state: u32,
    node: NodeId,
) -> Option<&'m FixedBitSet> {
    // Suffix tries have fewer than 2^31 nodes: the top bit names the alphabet.
    let at = node.0 | (alphabet.index() as u32) << 31;
    let key = (walker.rec.set_uid(run.set), run.lexeme.0, end_state, at);
    if !memo.suffix_walks.contains_key(&key) {
        let slice = c.space().slice_of(alphabet);
        let trie = slice.suffixes();
        let n = trie.nodes()[node.index()];
        let mut found = FixedBitSet::with_capacity(slice.suffix_count());
        if push_end(walker, run, end_state) {
            let lo = node.index();
            trie.walk_range(
                walker,
                &mut found,
                lo + 1,
                lo + n.subtree as usize,
                n.depth as usize,
            );
            walker.rec.pop(1);
        }
        if memo.suffix_walks.len() >= MAX_REMEMBERED_WALKS {
            memo.suffix_walks.clear();
        }
        memo.suffix_walks.insert(key, found);
    }
    memo.suffix_walks.get(&key)
}

/// The tokens of a run in a sliced state: the slice tokens it has room for, and of the
/// others those whose suffix its DFA (or the parser after its end) takes from where their
/// prefix leads (see [`crate::tokens`]).
fn sliced_run(
    c: &Constraint,
    walker: &mut Walker<'_>,
    memo: &mut Memos<'_>,
    run: Run,
    (alphabet, chain, walks): (Alphabet, &Chain, &[Arc<SuffixWalk>]),
    mask: &mut FixedBitSet,
) {
    let space = c.space().clone();
    let slice = space.slice_of(alphabet);
    slice.mark_upto(chain.left.unwrap_or(u32::MAX), mask);
    let reach = chain.left.unwrap_or(u32::MAX).min(slice.max_prefix());
    // The suffixes allowed after a prefix of `n` characters, by walk `w`.
    let mut allowed = FixedBitSet::with_capacity(slice.suffix_count());
    let by_walk = |w: &SuffixWalk,
                   allowed: &mut FixedBitSet,
                   walker: &mut Walker<'_>,
                   memo: &mut Memos<'_>| {
        allowed.clone_from(&w.alive);
        for &(end_state, node) in &w.endings {
            if let Some(found) = parser_suffixes(c, walker, memo, (run, alphabet), end_state, node)
            {
                allowed.union_with(found);
            }
        }
    };
    if chain.self_loop {
        by_walk(&walks[0], &mut allowed, walker, memo);
        for sid in allowed.ones() {
            for &(_, t) in slice.tokens_of(SuffixId(sid as u32)) {
                mask.insert(t.index());
            }
        }
        return;
    }
    for n in 0..=reach {
        let tokens = slice.with_prefix(n);
        if tokens.is_empty() {
            continue;
        }
        if let Some(w) = walks.get(n as usize) {
            by_walk(w, &mut allowed, walker, memo);
            if allowed.count_ones(..) < tokens.len() {
                // Fewer suffixes allowed than tokens with this prefix (the words slice,
                // whose suffixes include every token that starts with another byte): by
                // suffix, each suffix's tokens sorted by prefix length.
                for sid in allowed.ones() {
                    let of = slice.tokens_of(SuffixId(sid as u32));
                    let from = of.partition_point(|&(p, _)| p < n);
                    for &(_, t) in of[from..].iter().take_while(|&&(p, _)| p == n) {
                        mask.insert(t.index());
                    }
                }
            } else {
                for &(sid, t) in tokens {
                    if allowed.contains(sid.index()) {
                        mask.insert(t.index());
                    }
                }
            }
            continue;
        }
        // Few tokens have a prefix this long: run each one's suffix.
        let dfa = &c.grammar.lexeme(run.lexeme).dfa();
        let from = chain.state(n);
        for &(sid, t) in tokens {
            match run_suffix(dfa, from, slice.suffix(sid)) {
                Outcome::Alive => mask.insert(t.index()),
                Outcome::Dead => {}
                Outcome::Ending { state, at } => {
                    let Some(node) = suffix_node(slice, sid, at) else {
                        continue;
                    };
                    if parser_suffixes(c, walker, memo, (run, alphabet), state, node)
                        .is_some_and(|f| f.contains(sid.index()))
                    {
                        mask.insert(t.index());
                    }
                }
            }
        }
    }
}

impl RobustConstrainedAdapter {
    /// An adapter at the start of the output.
    pub fn new(c: Arc<Constraint>) -> RobustConstrainedAdapter {
        let rec = Recognizer::new(c.grammar.clone());
        RobustConstrainedAdapter {
            c,
            rec,
            steps: Vec::new(),
            output: Vec::new(),
            finished: false,
            error: None,
            runs: Vec::new(),
            last_mask: None,
            key: Vec::new(),
            walks: Default::default(),
            suffix_walks: Default::default(),
        }
    }

    /// Shortcut: bind `grammar` to `space` and start an adapter (the constraint's caches are
    /// then private to this adapter and its forks).
    pub fn from_parts(grammar: Arc<Grammar>, space: Arc<TokenSpace>) -> RobustConstrainedAdapter {
        RobustConstrainedAdapter::new(Constraint::new(grammar, space))
    }

    pub fn constraint(&self) -> &Arc<Constraint> {
        &self.c
    }

    /// A cheap copy to explore another continuation (caches are shared).
    pub fn fork(&self) -> RobustConstrainedAdapter {
        self.clone()
    }

    fn check(&self) -> Result<(), AdapterError> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn fail<T>(&mut self, e: AdapterError) -> Result<T, AdapterError> {
        self.error = Some(e.clone());
        Err(e)
    }

    /// An empty mask of the right width.
    pub fn new_mask(&self) -> FixedBitSet {
        FixedBitSet::with_capacity(self.c.space().width())
    }

    /// Fills `mask` (cleared and grown to the logit width) with the tokens allowed next.
    pub fn compute_mask(&mut self, mask: &mut FixedBitSet) -> Result<(), AdapterError> {
        self.check()?;
        let width = self.c.space().width();
        if mask.len() < width {
            mask.grow(width);
        }
        mask.clear();
        if self.finished {
            return Ok(());
        }
        // Same state as for the last mask (e.g. token after token inside a string): reuse.
        self.rec.state_key(&mut self.key);
        if let Some((key, last)) = &self.last_mask
            && *key == self.key
        {
            mask.union_with(last);
            return Ok(());
        }
        let c = self.c.clone();
        self.rec.runs_into(&mut self.runs);
        let mut walker = Walker {
            rec: &mut self.rec,
            error: None,
        };
        let mut memo = Memos {
            walks: &mut self.walks,
            suffix_walks: &mut self.suffix_walks,
        };
        for &run in &self.runs {
            match &**c.tokens(run.lexeme, run.state) {
                StateTokens::Generic(sets) => {
                    generic_run(&c, &mut walker, &mut memo, run, sets, mask);
                }
                StateTokens::Sliced {
                    alphabet,
                    chain,
                    walks,
                } => {
                    sliced_run(
                        &c,
                        &mut walker,
                        &mut memo,
                        run,
                        (*alphabet, chain, walks),
                        mask,
                    );
                }
            }
        }
        let (g, space) = (&c.grammar, c.space());
        if let Some(e) = walker.error.or_else(|| c.grammar.overflow()) {
            return self.fail(e.into());
        }
        let refs = self.rec.expected_tokens();
        if !refs.is_empty() {
            let vocab_len = space.vocab().len().min(width);
            for r in refs {
                let t = &g.token_refs()[r.0 as usize];
                match (t.negated, c.refs[r.0 as usize]) {
                    (false, Some(id)) if id.index() < width => mask.insert(id.index()),
                    (false, _) => {}
                    (true, except) => {
                        for id in (0..vocab_len as u32).map(TokenId) {
                            if Some(id) != except && !space.eos().contains(&id) {
                                mask.insert(id.index());
                            }
                        }
                    }
                }
            }
        }
        if self.rec.is_accepting() {
            for &e in space.eos() {
                if e.index() < width {
                    mask.insert(e.index());
                }
            }
        }
        if mask.is_clear() {
            let position = self.rec.position();
            return self.fail(AdapterError::NoContinuation { position });
        }
        match &mut self.last_mask {
            Some((key, last)) => {
                key.clone_from(&self.key);
                last.clone_from(mask);
            }
            None => self.last_mask = Some((self.key.clone(), mask.clone())),
        }
        Ok(())
    }

    /// Forgets the last mask, so the next [`Self::compute_mask`] computes from scratch even
    /// in an unchanged state (for benchmarks of the computation itself).
    pub fn forget_last_mask(&mut self) {
        self.last_mask = None;
    }

    /// The allowed tokens as a list (convenience over [`Self::compute_mask`]).
    pub fn allowed_token_ids(&mut self) -> Result<Vec<TokenId>, AdapterError> {
        let mut mask = self.new_mask();
        self.compute_mask(&mut mask)?;
        Ok(mask.ones().map(|i| TokenId(i as u32)).collect())
    }

    /// Feeds a sampled token. Not allowed: [`AdapterError::TokenNotAllowed`], nothing
    /// changes. An EOS/stop token is taken only when the grammar accepts; it ends the output.
    pub fn step_with_token(&mut self, token: TokenId) -> Result<(), AdapterError> {
        self.check()?;
        if self.finished {
            return Err(AdapterError::Finished);
        }
        let width = self.c.space().width();
        if token.index() >= width {
            return Err(AdapterError::UnknownToken { token, width });
        }
        let position = self.rec.position();
        // An end token ends the output, unless the grammar names it here by reference.
        if self.c.space().eos().contains(&token) && !self.expects_reference(token) {
            if self.rec.is_accepting() {
                self.finished = true;
                self.steps.push(0);
                return Ok(());
            }
            return Err(AdapterError::TokenNotAllowed { token, position });
        }
        let c = self.c.clone();
        let bytes = c.space().vocab().token_bytes(token).unwrap_or(&[]);
        let before = self.rec.depth();
        match self.rec.push_token(bytes, &|r| c.ref_matches(r, token)) {
            Ok(true) => {
                self.steps.push((self.rec.depth() - before) as u32);
                self.output.extend_from_slice(bytes);
                Ok(())
            }
            Ok(false) => match c.grammar.overflow() {
                Some(e) => self.fail(e.into()),
                None => Err(AdapterError::TokenNotAllowed { token, position }),
            },
            Err(e) => self.fail(e.into()),
        }
    }

    /// Whether a token reference the grammar expects next is satisfied by `token` (which
    /// [`Self::step_with_token`] then takes as that reference, even an end token).
    pub fn expects_reference(&self, token: TokenId) -> bool {
        self.error.is_none()
            && !self.finished
            && self
                .rec
                .expected_tokens()
                .into_iter()
                .any(|r| self.c.ref_matches(r, token))
    }

    /// Whether the grammar expects some token reference next (which may name any id).
    pub fn expects_any_reference(&self) -> bool {
        self.error.is_none() && !self.finished && !self.rec.expected_tokens().is_empty()
    }

    /// Feeds raw bytes (text that reached the output other than as a sampled token, such as
    /// what a token carried after a trigger): all of them or none; `Ok(false)` if refused.
    /// Rolls back like one token.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> Result<bool, AdapterError> {
        self.check()?;
        let before = self.rec.depth();
        match self.rec.push_bytes_all_or_nothing(bytes) {
            Ok(true) => {
                self.steps.push((self.rec.depth() - before) as u32);
                self.output.extend_from_slice(bytes);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => self.fail(e.into()),
        }
    }

    /// Feeds several tokens; stops at the first refusal.
    pub fn step_with_tokens(&mut self, tokens: &[TokenId]) -> Result<(), AdapterError> {
        tokens.iter().try_for_each(|&t| self.step_with_token(t))
    }

    /// Whether the output so far is complete (EOS would be allowed).
    pub fn is_accepting(&self) -> bool {
        self.error.is_none() && (self.finished || self.rec.is_accepting())
    }

    /// Whether the output is complete and the grammar admits nothing more after it (only
    /// an end token could come next).
    pub fn is_complete(&self) -> bool {
        self.is_accepting() && (self.finished || self.rec.expected().is_empty())
    }

    /// Whether an EOS/stop token ended the output.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Tokens consumed.
    pub fn tokens_consumed(&self) -> usize {
        self.steps.len()
    }

    /// The output bytes so far.
    pub fn output(&self) -> &[u8] {
        &self.output
    }

    /// Undoes the last `n` tokens (fewer if fewer were consumed). Clears a sticky error
    /// only if it is rolled back past, which it is not: errors stay.
    pub fn rollback(&mut self, n: usize) -> Result<(), AdapterError> {
        self.check()?;
        for _ in 0..n.min(self.steps.len()) {
            let frames = self.steps.pop().expect("checked") as usize;
            if frames == 0 && self.finished {
                self.finished = false;
                continue;
            }
            let pos_before = self.rec.position();
            self.rec.pop(frames);
            let drop = (pos_before - self.rec.position()) as usize;
            self.output.truncate(self.output.len() - drop);
        }
        Ok(())
    }

    /// The byte string the grammar forces next (every byte is the only one possible, and
    /// the grammar does not accept before it ends). Empty if the next byte is free. At
    /// most the grammar's `Limits::max_forced_bytes` per call.
    pub fn forced_bytes(&mut self) -> Result<Vec<u8>, AdapterError> {
        self.check()?;
        let mut out = Vec::new();
        let g = self.c.grammar.clone();
        while out.len() < g.limits().max_forced_bytes
            && !self.finished
            && !self.rec.is_accepting()
            && self.rec.expected_tokens().is_empty()
        {
            // A byte can be pushed iff some run's DFA stays alive on it.
            self.rec.runs_into(&mut self.runs);
            let mut only: Option<u8> = None;
            let mut several = false;
            'bytes: for b in 0..=255u8 {
                for r in &self.runs {
                    if g.lexeme(r.lexeme).dfa().next(r.state, b) != corral_grammar::DEAD {
                        if only.is_some() {
                            several = true;
                            break 'bytes;
                        }
                        only = Some(b);
                        break;
                    }
                }
            }
            let Some(b) = only.filter(|_| !several) else {
                break;
            };
            match self.rec.push_byte(b) {
                Ok(true) => out.push(b),
                Ok(false) => break,
                Err(e) => {
                    self.rec.pop(out.len());
                    return self.fail(e.into());
                }
            }
        }
        self.rec.pop(out.len());
        Ok(out)
    }

    /// Tokens for [`Self::forced_bytes`]: greedily the longest token that is a prefix of what
    /// is left (each is therefore allowed). Canonical tokenization is the caller's choice.
    pub fn forced_tokens(&mut self) -> Result<Vec<TokenId>, AdapterError> {
        let bytes = self.forced_bytes()?;
        Ok(self.c.space().trie().greedy_tokens(&bytes).0)
    }

    /// The shortest output that completes the grammar from here, as tokens: its text
    /// greedily the longest token each (every tokenization of a valid output is allowed),
    /// and a token for each token reference it goes through. Empty when complete already;
    /// `None` when nothing completes it (a reference names no token of this vocabulary, or
    /// the recognizer's completion search gives up). Generation under a token budget steers
    /// to it before the budget runs out.
    pub fn completion_tokens(&mut self) -> Result<Option<Vec<TokenId>>, AdapterError> {
        match self.completion_tokens_within(usize::MAX)? {
            Completion::Tokens(t) => Ok(Some(t)),
            Completion::TooLong { .. } | Completion::Impossible => Ok(None),
        }
    }

    /// [`Self::completion_tokens`] for a budget of `budget` tokens: when the shortest
    /// completion cannot fit (its bytes alone need more tokens than that, each token at
    /// most the longest token's bytes), it is not written out but measured: a grammar whose
    /// shortest output is megabytes long is refused at the cost of a search, not of
    /// spelling it.
    pub fn completion_tokens_within(&mut self, budget: usize) -> Result<Completion, AdapterError> {
        self.check()?;
        if self.finished {
            return Ok(Completion::Tokens(Vec::new()));
        }
        let longest = self.c.space().longest_token().max(1) as u64;
        let max_units = (budget as u64).saturating_mul(longest);
        let completion = match self.rec.shortest_completion_within(max_units) {
            Ok(c) => c,
            Err(len) => {
                // A DFA that needed a state past its size limit reads it as dead: that is
                // the error, not the missing completion.
                if let Some(e) = self.c.grammar.overflow() {
                    return self.fail(e.into());
                }
                return Ok(match len {
                    Some(units) => Completion::TooLong {
                        at_least: usize::try_from(units.div_ceil(longest)).unwrap_or(usize::MAX),
                    },
                    None => Completion::Impossible,
                });
            }
        };
        let mut tokens = Vec::new();
        for piece in &completion.pieces {
            match piece {
                Piece::Bytes(bytes) => {
                    let (t, covered) = self.c.space().trie().greedy_tokens(bytes);
                    if covered != bytes.len() {
                        return Ok(Completion::Impossible);
                    }
                    tokens.extend(t);
                }
                Piece::Token(r) => match self.c.ref_token(*r) {
                    Some(t) => tokens.push(t),
                    None => return Ok(Completion::Impossible),
                },
            }
        }
        Ok(Completion::Tokens(tokens))
    }

    /// What the adapter is doing: position, partial lexemes, allowed terminals.
    pub fn state_info(&self) -> StateInfo {
        let g = &self.c.grammar;
        let position = self.rec.position();
        let mut partial_lexemes = Vec::new();
        let mut allowed_terminals = Vec::new();
        for run in self.rec.runs() {
            let lex = g.lexeme(run.lexeme);
            let start = self.rec.set_position(run.set) as usize;
            if start < position as usize {
                partial_lexemes.push(PartialLexeme {
                    lexeme: lex.display.clone(),
                    matched: self.output[start..].to_vec(),
                    can_end: lex.dfa().is_accepting(run.state),
                });
            } else {
                allowed_terminals.push(lex.display.clone());
            }
        }
        for r in self.rec.expected_tokens() {
            let t = &g.token_refs()[r.0 as usize];
            let name = match &t.target {
                TokenTarget::Id(id) => format!("<[{id}]>"),
                TokenTarget::Text(s) => s.clone(),
            };
            allowed_terminals.push(if t.negated { format!("!{name}") } else { name });
        }
        allowed_terminals.sort();
        allowed_terminals.dedup();
        StateInfo {
            position,
            tokens: self.steps.len(),
            accepting: self.is_accepting(),
            partial_lexemes,
            allowed_terminals,
        }
    }
}

/// Masks for a batch of sequences (one adapter and one mask each). Large batches run in
/// parallel with rayon (the per-sequence work is independent; the per-state caches are
/// shared); below [`PARALLEL_BATCH`] sequences the thread wake-ups cost more than they
/// save (measured: 8 sequences 1.6x slower with rayon, 64 sequences 1.5x faster, 2 cores).
pub fn compute_masks(
    adapters: &mut [RobustConstrainedAdapter],
    masks: &mut [FixedBitSet],
) -> Vec<Result<(), AdapterError>> {
    use rayon::prelude::*;
    if adapters.len() < PARALLEL_BATCH {
        return adapters
            .iter_mut()
            .zip(masks.iter_mut())
            .map(|(a, m)| a.compute_mask(m))
            .collect();
    }
    adapters
        .par_iter_mut()
        .zip(masks.par_iter_mut())
        .map(|(a, m)| a.compute_mask(m))
        .collect()
}

/// Batches at least this large are computed in parallel by [`compute_masks`].
pub const PARALLEL_BATCH: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;
    use corral_grammar::{CompileOptions, compile_gbnf};
    use corral_trie::Vocabulary;

    fn constraint(grammar: &str) -> Arc<Constraint> {
        let words: [&[u8]; 8] = [b"ab", b"a1", b"x,", b",", b"Q", b"zz!", b" ", b"a b"];
        let vocab = Vocabulary::from_parts(
            words
                .iter()
                .enumerate()
                .map(|(i, w)| (TokenId(i as u32), w.to_vec())),
            [],
        );
        let space = Arc::new(TokenSpace::new(vocab, None, Vec::new()));
        Constraint::new(
            compile_gbnf(grammar, &CompileOptions::default()).unwrap(),
            space,
        )
    }

    /// How the (one) lexeme's `state` gets its tokens: the slice of an alphabet, or a walk.
    fn kind(c: &Constraint, state: u32) -> Option<Alphabet> {
        match &**c.tokens(LexemeId(0), state) {
            StateTokens::Sliced { alphabet, .. } => Some(*alphabet),
            StateTokens::Generic(_) => None,
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
