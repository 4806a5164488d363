//! The generic walk: a lexeme state's token sets found by one walk of the whole token trie
//! with the DFA alone (see the parent module), for states no slice shifts uniformly.

use super::{Loops, Outcome, run_suffix};
use corral_grammar::{DEAD, LexemeDfa, StateId};
use corral_trie::{Alphabet, FixedBitSet, NodeId, Tail, TokenId, TokenSpace, TokenTrie};
use std::sync::Arc;

/// The token sets of one `(lexeme, DFA state)` found by walking the whole token trie (the
/// generic way; see the module docs).
#[derive(Debug)]
pub struct LexTokens {
    /// Tokens whose every byte the DFA takes from this state without dying: the lexeme
    /// is still under way after them (and may end there).
    pub inside: Inside,
    /// `(end state, the remaining bytes of tokens that need the parser)`.
    pub suffixes: Vec<(StateId, Rests)>,
    /// `(end state, main-trie node)`: walk the node's subtree in place. Sorted by state.
    pub subtrees: Vec<(StateId, NodeId)>,
}

/// The remaining bytes of the tokens that need the parser after a lexeme's end.
#[derive(Debug)]
pub enum Rests {
    /// Merged into a trie of their own (the ends of several nodes, or part of a subtree).
    Trie(TokenTrie),
    /// Everything below one main-trie node, where a lexeme that cannot go on ends: the
    /// subtree is walked in place, with nothing copied out of it.
    Below(NodeId),
    /// The rests of a string body's leaving tokens run from the state `from` (see
    /// [`BodyRuns`]), shared by every state whose first bytes in `firsts` lead there: only
    /// the tokens found that start with such a byte are this state's.
    Shared {
        trie: Arc<TokenTrie>,
        from: StateId,
        firsts: AsciiBytes,
    },
}

/// A set of ASCII bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsciiBytes(u128);

impl AsciiBytes {
    /// Whether `byte` is in the set (never for a byte past ASCII).
    pub fn contains(self, byte: u8) -> bool {
        byte < 0x80 && self.0 >> byte & 1 == 1
    }

    fn insert(&mut self, byte: u8) {
        self.0 |= 1 << byte;
    }

    fn len(self) -> u32 {
        self.0.count_ones()
    }
}

impl Rests {
    /// Heap bytes held.
    pub fn memory_usage(&self) -> usize {
        match self {
            Rests::Trie(t) => t.memory_usage(),
            // Held (and counted) by the cache of body runs.
            Rests::Below(_) | Rests::Shared { .. } => 0,
        }
    }
}

/// The tokens a state keeps its lexeme going with: a list where they are few (most states
/// of short lexemes: keys, separators, literals), so that neither building nor using the
/// set touches a bit per token of the vocabulary.
#[derive(Debug)]
pub enum Inside {
    /// The tokens, by id, in increasing order.
    Few(Box<[TokenId]>),
    /// The tokens as a set as wide as the token space.
    Many(FixedBitSet),
}

impl Inside {
    /// At most this many tokens per 64-bit word of a whole mask are kept as a list.
    const FEW_PER_WORD: usize = 4;

    /// The tokens of `set` (which the caller then clears), as a list where they are few.
    fn take(set: &FixedBitSet) -> Inside {
        let words = set.as_slice().len();
        let mut few = Vec::new();
        for t in set.ones() {
            if few.len() * Inside::FEW_PER_WORD >= words {
                return Inside::Many(set.clone());
            }
            few.push(TokenId(t as u32));
        }
        Inside::Few(few.into_boxed_slice())
    }

    /// Adds these tokens to `mask`.
    pub fn union_into(&self, mask: &mut FixedBitSet) {
        match self {
            Inside::Few(ts) => ts.iter().for_each(|t| mask.insert(t.index())),
            Inside::Many(set) => mask.union_with(set),
        }
    }

    /// Heap bytes held.
    pub fn memory_usage(&self) -> usize {
        match self {
            Inside::Few(ts) => ts.len() * 4,
            Inside::Many(set) => set.as_slice().len() * 8,
        }
    }
}

thread_local! {
    /// The set a generic walk marks its tokens in (cleared after each walk): one per
    /// thread rather than a zeroed allocation of a whole mask per walk.
    static INSIDE: std::cell::RefCell<FixedBitSet> = const { std::cell::RefCell::new(FixedBitSet::new()) };
}

/// The bytes of a token after a lexeme's end (borrowed from the token space), and the token.
type Suffix<'a> = (&'a [u8], TokenId);

/// The suffixes of the tokens that need the parser, by the state the lexeme ended in.
type Groups<'a> = Vec<(StateId, Vec<Suffix<'a>>)>;

/// Ending nodes with at most this many nodes below them are merged into suffix tries (or,
/// where the lexeme ends there for good and no other node ends in its state, walked in place).
const MERGE_SUBTREE: u32 = 256;

/// The suffixes of tokens that need the parser after the lexeme ends in `state`.
fn group<'g, 'a>(groups: &'g mut Groups<'a>, state: StateId) -> &'g mut Vec<Suffix<'a>> {
    let g = match groups.iter().position(|g| g.0 == state) {
        Some(g) => g,
        None => {
            groups.push((state, Vec::new()));
            groups.len() - 1
        }
    };
    &mut groups[g].1
}

/// Runs the rest of a token that leaves a string's body, from `state` there: it stays
/// (`inside`), dies, or ends the lexeme and needs the parser for what follows (`groups`).
fn run_leaving<'a>(
    dfa: &LexemeDfa,
    state: StateId,
    (token, rest): (TokenId, &'a [u8]),
    inside: &mut FixedBitSet,
    groups: &mut Groups<'a>,
) {
    match run_suffix(dfa, state, rest) {
        Outcome::Alive => inside.insert(token.index()),
        Outcome::Dead => {}
        Outcome::Ending { state, at } => group(groups, state).push((&rest[at..], token)),
    }
}

/// The ASCII bytes that lead a state that does not accept back to itself, and those that
/// kill it: a token's leading run of the first changes nothing, so only the rest from
/// the first other byte needs running, and none where that byte kills. (The tokens a
/// string's body does not take whole are mostly ASCII text up to a newline, a tab or a
/// quote.)
struct AsciiSkip {
    /// Per ASCII byte: 1 where it leads back, 2 where it kills, 0 otherwise; all 0 for a
    /// state that accepts (a lexeme may end inside the run).
    kind: [u8; 128],
}

impl AsciiSkip {
    const LOOPS: u8 = 1;
    const KILLS: u8 = 2;

    fn new(dfa: &LexemeDfa, s: StateId) -> AsciiSkip {
        let mut kind = [0u8; 128];
        if !s.is_accepting() {
            for (b, k) in kind.iter_mut().enumerate() {
                let t = dfa.next(s, b as u8);
                *k = if t == s {
                    AsciiSkip::LOOPS
                } else if t == DEAD {
                    AsciiSkip::KILLS
                } else {
                    0
                };
            }
        }
        AsciiSkip { kind }
    }

    /// The token's bytes from the first that does not lead back (the state is the same
    /// there), or `None` where that byte kills the state.
    fn rest<'a>(&self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        let kind = |b: u8| self.kind.get(b as usize).copied().unwrap_or(0);
        let k = bytes
            .iter()
            .position(|&b| kind(b) != AsciiSkip::LOOPS)
            .unwrap_or(bytes.len());
        match bytes.get(k) {
            Some(&b) if kind(b) == AsciiSkip::KILLS => None,
            _ => Some(&bytes[k..]),
        }
    }
}

/// [`AsciiSkip`] from a state, or from the state most of the alphabet's ASCII bytes lead
/// it to. The body of a key that must not be one of the schema's names leads every first
/// byte but the names' to one state, which loops on them, while none loops back to the
/// first state: after that first byte, the token's leading run changes nothing either.
struct Skip {
    /// From the state itself.
    here: AsciiSkip,
    /// The state most ASCII bytes of the alphabet lead to (not the first state itself,
    /// live and not accepting), each ASCII byte that leads there, and its skip.
    via: Option<(StateId, [bool; 128], AsciiSkip)>,
}

impl Skip {
    fn new(dfa: &LexemeDfa, s: StateId, alphabet: Alphabet) -> Skip {
        let here = AsciiSkip::new(dfa, s);
        let mut counts: Vec<(StateId, usize)> = Vec::new();
        for b in (0..0x80u8).filter(|&b| alphabet.admits(b as char)) {
            let t = dfa.next(s, b);
            match counts.iter_mut().find(|c| c.0 == t) {
                Some(c) => c.1 += 1,
                None => counts.push((t, 1)),
            }
        }
        let via = counts
            .iter()
            .max_by_key(|c| c.1)
            .map(|c| c.0)
            .filter(|&r| r != s && r != DEAD && !r.is_accepting())
            .map(|r| {
                let mut leads = [false; 128];
                for (b, l) in leads.iter_mut().enumerate() {
                    *l = dfa.next(s, b as u8) == r;
                }
                (r, leads, AsciiSkip::new(dfa, r))
            });
        Skip { here, via }
    }

    /// The state to run the token's bytes from and the bytes left to run (see
    /// [`AsciiSkip::rest`]), or `None` where a skipped run ends on a byte that kills.
    fn rest<'a>(&self, s: StateId, bytes: &'a [u8]) -> Option<(StateId, &'a [u8])> {
        if let (Some((r, leads, skip)), Some(&b)) = (&self.via, bytes.first())
            && leads.get(b as usize).copied().unwrap_or(false)
        {
            // One byte to `r`, which does not accept: the lexeme cannot end there.
            return skip.rest(&bytes[1..]).map(|rest| (*r, rest));
        }
        self.here.rest(bytes).map(|rest| (s, rest))
    }

    /// The state whose [`BodyRuns`] serve a token from `s` (after its first byte), and the
    /// first bytes that lead there: the state most ASCII first bytes lead to, or `s` where
    /// they lead back to it.
    fn shared(&self, s: StateId) -> (StateId, AsciiBytes) {
        let mut firsts = AsciiBytes::default();
        match &self.via {
            Some((r, leads, _)) => {
                for b in (0..0x80u8).filter(|&b| leads[b as usize]) {
                    firsts.insert(b);
                }
                (*r, firsts)
            }
            None => {
                for b in (0..0x80u8).filter(|&b| self.here.kind[b as usize] == AsciiSkip::LOOPS) {
                    firsts.insert(b);
                }
                (s, firsts)
            }
        }
    }
}

/// The tokens of a string's body that are not slice characters throughout (see
/// [`CharSlice::every_token`]), each run after its first ASCII byte from one state the
/// body loops in (the plain body of a key that must not be one of the schema's names).
/// Every state of the lexeme whose first byte leads there takes a token the same way, so
/// these runs are made once per such state, not once per state that reaches it (each
/// prefix of a name the key is still spelling).
#[derive(Debug)]
pub struct BodyRuns {
    /// The first bytes whose tokens were run: those that lead the state back to itself,
    /// and those of the state that asked first.
    covered: AsciiBytes,
    /// The tokens that stay in the lexeme, by first byte.
    alive: Arc<[TokenId]>,
    /// Where each ASCII first byte's tokens start in `alive` (and, at 128, its end).
    alive_at: [u32; 129],
    /// Per end state: the rests of the tokens that end the lexeme, after that end.
    rests: Vec<(StateId, Arc<TokenTrie>)>,
    /// Per end state (as in `rests`): bytes that lead from the state the runs were made
    /// from to it, to find it again in a DFA that matches the same from its own state.
    witnesses: Vec<Box<[u8]>>,
}

impl BodyRuns {
    /// Runs every token that leaves the slice from `from`, after its first byte, for the
    /// first bytes that lead `from` back to itself and those in `firsts`. (A token whose
    /// first byte no state leads there by would be run for nothing.)
    pub(crate) fn new(
        dfa: &LexemeDfa,
        from: StateId,
        space: &TokenSpace,
        firsts: AsciiBytes,
    ) -> BodyRuns {
        let slice = space.slice_of(Alphabet::Strings);
        let skip = AsciiSkip::new(dfa, from);
        let mut covered = firsts;
        for b in (0..0x80u8).filter(|&b| dfa.next(from, b) == from) {
            covered.insert(b);
        }
        let mut alive = Vec::new();
        let mut groups: Groups = Vec::new();
        // Parallel to `groups`: the first rest run into each end state.
        let mut witnesses: Vec<Box<[u8]>> = Vec::new();
        let tokens = (0..0x80u8)
            .filter(|&b| covered.contains(b))
            .flat_map(|b| slice.every_other_token_from(b));
        for e in tokens {
            let bytes = slice.tail_bytes(e);
            let Some((&first, after)) = bytes.split_first() else {
                continue;
            };
            let Some(rest) = skip.rest(after) else {
                continue;
            };
            match run_suffix(dfa, from, rest) {
                Outcome::Alive => alive.push((first, e.token)),
                Outcome::Dead => {}
                Outcome::Ending { state, at } => {
                    if !groups.iter().any(|g| g.0 == state) {
                        witnesses.push(rest[..at].into());
                    }
                    group(&mut groups, state).push((&rest[at..], e.token))
                }
            }
        }
        alive.sort_unstable();
        let mut alive_at = [0u32; 129];
        for (b, at) in alive_at.iter_mut().enumerate() {
            *at = alive.partition_point(|&(f, _)| (f as usize) < b) as u32;
        }
        BodyRuns {
            covered,
            alive: alive.into_iter().map(|(_, t)| t).collect(),
            alive_at,
            rests: groups
                .into_iter()
                .map(|(state, entries)| (state, Arc::new(TokenTrie::from_entries(entries))))
                .collect(),
            witnesses,
        }
    }

    /// These runs for state `from` of `dfa`, which matches exactly what the state they were
    /// made from matches (see [`LexemeDfa::first_alone`]): the same tokens, with each end
    /// state found again in `dfa` by its witness bytes. `None` if a witness does not end
    /// where it did (the states did not match the same).
    pub(crate) fn in_dfa(&self, dfa: &LexemeDfa, from: StateId) -> Option<BodyRuns> {
        let mut rests = Vec::with_capacity(self.rests.len());
        for ((state, trie), w) in self.rests.iter().zip(&self.witnesses) {
            let end = dfa.run(from, w);
            if end == DEAD
                || end.is_accepting() != state.is_accepting()
                || end.can_continue() != state.can_continue()
            {
                return None;
            }
            rests.push((end, trie.clone()));
        }
        Some(BodyRuns {
            covered: self.covered,
            alive: self.alive.clone(),
            alive_at: self.alive_at,
            rests,
            witnesses: self.witnesses.clone(),
        })
    }

    /// The tokens that stay in the lexeme among those that start with `first`.
    fn alive(&self, first: u8) -> &[TokenId] {
        let b = first as usize;
        &self.alive[self.alive_at[b] as usize..self.alive_at[b + 1] as usize]
    }

    /// Heap bytes held.
    pub(crate) fn memory_usage(&self) -> usize {
        self.alive.len() * 4 + self.rests.iter().map(|r| r.1.memory_usage()).sum::<usize>()
    }
}

/// The paths of the token trie through a counted run of single bytes (see
/// [`corral_grammar::LexemeDfa::byte_run`]) with room for `room` more: the same for every
/// lexeme with such a run, whatever follows it.
#[derive(Debug)]
pub struct RunPaths {
    /// The tokens made of the run's bytes only, at most `room` of them.
    inside: Vec<TokenId>,
    /// `(byte, run bytes before it, node)`: the nodes whose byte leaves the run after at
    /// least one of its bytes, sorted by byte, then by the run bytes before.
    exits: Vec<(u8, u32, u32)>,
    /// The subtrees (node ranges, in trie order) below `room + 1` of the run's bytes: the
    /// tokens that start with more of them than the room.
    beyond: Vec<(u32, u32)>,
    /// The tokens of `beyond`, sorted (made when first asked for).
    beyond_tokens: std::sync::OnceLock<Box<[TokenId]>>,
}

impl RunPaths {
    /// The paths of the run of `bytes` (bit `b` for byte `b`, ASCII) in `space`'s trie.
    pub(crate) fn new(space: &TokenSpace, bytes: u128, room: u32) -> RunPaths {
        let trie = space.trie();
        let nodes = trie.nodes();
        let in_run = |b: u8| b < 0x80 && bytes >> b & 1 == 1;
        let (mut inside, mut exits, mut beyond) = (Vec::new(), Vec::new(), Vec::new());
        for &(byte, first) in trie.root_children() {
            if !in_run(byte) {
                continue;
            }
            let mut i = first as usize;
            let end = i + nodes[i].subtree as usize;
            while i < end {
                let n = nodes[i];
                if !in_run(n.byte) {
                    // The parent is a run node within the room: its depth is the run bytes.
                    exits.push((n.byte, n.depth as u32 - 1, i as u32));
                    i += n.subtree as usize;
                } else if n.depth as u32 > room {
                    beyond.push((i as u32, (i + n.subtree as usize) as u32));
                    i += n.subtree as usize;
                } else {
                    inside.extend(trie.tokens_at(i));
                    i += 1;
                }
            }
        }
        exits.sort_unstable();
        beyond.sort_unstable();
        RunPaths {
            inside,
            exits,
            beyond,
            beyond_tokens: std::sync::OnceLock::new(),
        }
    }

    /// Heap bytes held.
    pub(crate) fn memory_usage(&self) -> usize {
        self.inside.len() * 4 + self.exits.len() * 12 + self.beyond.len() * 8
    }

    /// Whether the subtree of main-trie node `node` holds a token that starts with more
    /// of the run's bytes than the room.
    fn reaches_beyond(&self, space: &TokenSpace, node: NodeId) -> bool {
        let lo = node.index() as u32;
        let hi = lo + space.trie().nodes()[node.index()].subtree;
        // Ranges are disjoint and sorted: the first that ends past `lo` is the only one
        // that may overlap.
        let k = self.beyond.partition_point(|&(_, end)| end <= lo);
        self.beyond.get(k).is_some_and(|&(start, _)| start < hi)
    }

    /// The tokens that start with more of the run's bytes than the room, sorted.
    fn beyond_tokens(&self, space: &TokenSpace) -> &[TokenId] {
        self.beyond_tokens.get_or_init(|| {
            let trie = space.trie();
            let mut out: Vec<TokenId> = self
                .beyond
                .iter()
                .flat_map(|&(lo, hi)| (lo..hi).flat_map(|j| trie.tokens_at(j as usize)))
                .collect();
            out.sort_unstable();
            out.into_boxed_slice()
        })
    }
}

impl LexTokens {
    /// These sets (of a count of a byte run, see [`corral_grammar::LexemeDfa::run_back`])
    /// for a later count of the same run with the room of `paths`: the same but the
    /// tokens that start with more of the run's bytes than that room, their end states
    /// mapped by `end`. `None` where such a token needs the parser (its rest is kept with
    /// others'): those sets are walked afresh.
    pub(crate) fn along_run(
        &self,
        paths: &RunPaths,
        space: &TokenSpace,
        end: impl Fn(StateId) -> StateId,
    ) -> Option<LexTokens> {
        let beyond = paths.beyond_tokens(space);
        let far = |t: &TokenId| beyond.binary_search(t).is_ok();
        let mut suffixes = Vec::with_capacity(self.suffixes.len());
        for (state, rests) in &self.suffixes {
            let kept = match rests {
                Rests::Trie(trie) => {
                    let nodes = trie.nodes().len();
                    if (0..nodes).any(|j| trie.tokens_at(j).any(|t| far(&t))) {
                        return None;
                    }
                    Rests::Trie(trie.clone())
                }
                Rests::Below(node) if !paths.reaches_beyond(space, *node) => Rests::Below(*node),
                Rests::Below(_) | Rests::Shared { .. } => return None,
            };
            suffixes.push((end(*state), kept));
        }
        if self
            .subtrees
            .iter()
            .any(|&(_, node)| paths.reaches_beyond(space, node))
        {
            return None;
        }
        let inside = match &self.inside {
            Inside::Few(ts) => {
                // Both sorted: one pass over each.
                let mut far = beyond.iter().peekable();
                let mut kept = Vec::with_capacity(ts.len());
                for &t in ts.iter() {
                    while far.next_if(|&&f| f < t).is_some() {}
                    if far.peek() != Some(&&t) {
                        kept.push(t);
                    }
                }
                Inside::Few(kept.into_boxed_slice())
            }
            Inside::Many(set) => {
                let mut set = set.clone();
                beyond.iter().for_each(|t| set.set(t.index(), false));
                Inside::Many(set)
            }
        };
        let mut subtrees: Vec<(StateId, NodeId)> =
            self.subtrees.iter().map(|&(s, n)| (end(s), n)).collect();
        subtrees.sort_unstable();
        Some(LexTokens {
            inside,
            suffixes,
            subtrees,
        })
    }
}

/// A state's tokens are taken from [`BodyRuns`] where at least this many ASCII first bytes
/// lead to the state they were run from; with fewer, each token is run.
const MIN_SHARED_FIRSTS: u32 = 16;

/// What a walk takes from its caller's memory: the [`BodyRuns`] of a state for first bytes,
/// and the [`RunPaths`] of a run's bytes with room for so many.
type Shared<'a> = (
    &'a dyn Fn(StateId, AsciiBytes) -> Arc<BodyRuns>,
    &'a dyn Fn(u128, u32) -> Arc<RunPaths>,
);

/// One walk of the whole trie with the DFA alone, except below a node where the DFA reaches
/// a string's body: there the slice's tails decide (see [`CharSlice::subtree_tails`]).
///
/// `loops` holds what earlier walks of this DFA found about its states (for
/// [`Alphabet::Strings`], looking beyond loops), `body_runs` gives the [`BodyRuns`] of
/// a state of this DFA for first bytes that lead there (both remembered by the caller: the
/// runs made for the first bytes first asked for), and `run_paths` the [`RunPaths`] of a
/// counted run of single bytes (remembered across DFAs).
pub(crate) fn walk_generic(
    dfa: &LexemeDfa,
    start: StateId,
    space: &TokenSpace,
    loops: &mut Loops,
    (body_runs, run_paths): Shared<'_>,
) -> LexTokens {
    INSIDE.with_borrow_mut(|inside| {
        // Exactly this space's width: a set kept from a wider space would widen the masks
        // it is unioned into.
        if inside.len() != space.width() {
            *inside = FixedBitSet::with_capacity(space.width());
        }
        let tokens = walk_generic_into(dfa, start, (space, loops), inside, (body_runs, run_paths));
        inside.clear();
        tokens
    })
}

/// Fewer ASCII first bytes than this that the walk jumps below at once are taken one by one.
const PREFILL_FIRST_BYTES: usize = 16;

/// Where the walk from `start` jumps below most ASCII first bytes at once (see
/// [`walk_generic_into`]), marks their tokens whose rest is slice characters in `inside` as
/// one precomputed union less the sets of the other first bytes (the body of a key that
/// must not be one of a few names: every first byte but theirs); returns which first bytes
/// are so marked.
fn prefill_first_bytes(
    dfa: &LexemeDfa,
    start: StateId,
    space: &TokenSpace,
    loops: &mut Loops,
    inside: &mut FixedBitSet,
) -> [bool; 128] {
    let mut jumps = [false; 128];
    let slice = space.slice_of(Alphabet::Strings);
    if !slice.indexes_trie() {
        return jumps;
    }
    let nodes = space.trie().nodes();
    let mut count = 0;
    for &(byte, first) in space.trie().root_children() {
        if byte >= 0x80 || nodes[first as usize].subtree <= 1 {
            continue;
        }
        let next = dfa.next(start, byte);
        if next != DEAD
            && !next.is_accepting()
            && slice.below_first_byte(byte).is_some()
            && loops.test(dfa, next)
        {
            jumps[byte as usize] = true;
            count += 1;
        }
    }
    if count < PREFILL_FIRST_BYTES {
        return [false; 128];
    }
    inside.union_with(slice.below_ascii_first_bytes());
    for byte in 0..0x80u8 {
        if !jumps[byte as usize]
            && let Some((rest_in_slice, _)) = slice.below_first_byte(byte)
        {
            inside.difference_with(rest_in_slice);
        }
    }
    jumps
}

/// [`walk_generic`], marking the inside tokens in `inside` (empty) and leaving them there.
fn walk_generic_into(
    dfa: &LexemeDfa,
    start: StateId,
    (space, loops): (&TokenSpace, &mut Loops),
    inside: &mut FixedBitSet,
    (body_runs, run_paths): Shared<'_>,
) -> LexTokens {
    const NONE: u32 = u32::MAX;
    let trie = space.trie();
    let nodes = trie.nodes();
    let vocab = space.vocab();
    let slice = space.slice_of(Alphabet::Strings);
    let jumps = slice.indexes_trie();
    let mut subtrees = Vec::new();
    // (end state, node) where the lexeme ends for good with a small subtree below.
    let mut below = Vec::new();
    // (end state, (remaining bytes, token)) per group.
    let mut groups: Groups = Vec::new();
    // Per depth on the current path: the DFA state, the first node below the root where
    // the lexeme could end (NONE if none yet), and the bytes the character under way still
    // needs (`MISALIGNED`: the token began inside one, so no jumps below).
    const MISALIGNED: u8 = u8::MAX;
    let mut path: Vec<(StateId, u32, u8)> = vec![(start, NONE, 0)];
    if jumps && let Some(except) = loops.inside_except(dfa, start) {
        // The body of a string from the start: no walk at all. The tokens that are slice
        // characters throughout (and hold none of the bytes set apart) stay; the others
        // are run one by one.
        let (in_slice, _) = slice.every_token();
        inside.union_with(in_slice);
        for &b in &except {
            inside.difference_with(slice.tokens_with_byte(b, vocab));
        }
        // Below a first byte that ends the lexeme with many tokens under it (the closing
        // quote), the parser walks the main trie's subtree in place (remembered across
        // masks), as the node-by-node walk does.
        let mut in_subtree = [false; 256];
        for &(byte, first) in trie.root_children() {
            let next = dfa.next(start, byte);
            // (Only where the lexeme cannot go on: the tokens below are run whole here,
            // not walked node by node for longer ends.)
            if next.is_accepting()
                && !next.can_continue()
                && nodes[first as usize].subtree > MERGE_SUBTREE
            {
                in_subtree[byte as usize] = true;
                subtrees.push((next, NodeId(first)));
            }
        }
        let skip = Skip::new(dfa, start, slice.alphabet());
        // The tokens whose first byte leads to one state that loops are run from there once
        // for every state that leads there (each prefix of a name the key is spelling).
        let (shared_from, mut firsts) = skip.shared(start);
        for b in 0..0x80u8 {
            if in_subtree[b as usize] {
                firsts.0 &= !(1 << b);
            }
        }
        let shared = (firsts.len() >= MIN_SHARED_FIRSTS).then(|| body_runs(shared_from, firsts));
        // The first bytes the runs cover; the walk runs the others' tokens itself.
        firsts = shared.as_ref().map_or(AsciiBytes::default(), |r| {
            AsciiBytes(firsts.0 & r.covered.0)
        });
        // By first byte: none where it leads where the shared runs serve, or kills.
        let own = (0..=255u8).filter(|&b| !firsts.contains(b) && dfa.next(start, b) != DEAD);
        for e in own.flat_map(|b| slice.every_other_token_from(b)) {
            let bytes = slice.tail_bytes(e);
            if in_subtree[bytes[0] as usize] {
                if run_suffix(dfa, start, bytes) == Outcome::Alive {
                    inside.insert(e.token.index());
                }
                continue;
            }
            if let Some((state, rest)) = skip.rest(start, bytes) {
                run_leaving(dfa, state, (e.token, rest), inside, &mut groups);
            }
        }
        for (k, &b) in except.iter().enumerate() {
            for t in slice
                .tokens_with_byte(b, vocab)
                .ones()
                .map(|t| TokenId(t as u32))
            {
                let bytes = vocab.token_bytes(t).expect("slice tokens have bytes");
                // Once for a token with two such bytes.
                if !except[..k].iter().any(|x| bytes.contains(x))
                    && let Some((state, rest)) = skip.rest(start, bytes)
                {
                    run_leaving(dfa, state, (t, rest), inside, &mut groups);
                }
            }
        }
        let mut shared_rests = Vec::new();
        if let Some(runs) = shared {
            for b in (0..0x80u8).filter(|&b| firsts.contains(b)) {
                runs.alive(b).iter().for_each(|t| inside.insert(t.index()));
            }
            shared_rests.extend(runs.rests.iter().map(|(state, trie)| {
                let trie = trie.clone();
                (
                    *state,
                    Rests::Shared {
                        trie,
                        from: shared_from,
                        firsts,
                    },
                )
            }));
        }
        let mut tokens = lex_tokens(inside, (groups, Vec::new()), subtrees, space);
        tokens.suffixes.extend(shared_rests);
        return tokens;
    }
    let prefilled = prefill_first_bytes(dfa, start, space, loops, inside);
    // A counted run of whitespace before a key (`[ \t\n\r]{0,32}`): the paths of its
    // bytes are the same in every lexeme with such a run (`run_paths`, remembered by the
    // caller); only the subtrees where another byte leaves the run are this DFA's.
    let run = dfa.byte_run(start).map(|r| (r, run_paths(r.bytes, r.room)));
    // Walks the subtree range `i..end` of nodes at depth `path.len()` and below.
    let mut walk_range = |mut i: usize,
                          end: usize,
                          path: &mut Vec<(StateId, u32, u8)>,
                          inside: &mut FixedBitSet,
                          loops: &mut Loops| {
        while i < end {
            let n = nodes[i];
            let d = n.depth as usize;
            let next = dfa.next(path[d - 1].0, n.byte);
            let ended = path[d - 1].1;
            // The bytes the character under way needs after this one.
            let needs = match (path[d - 1].2, n.byte) {
                (MISALIGNED, _) => MISALIGNED,
                (0, 0x00..=0x7f) => 0,
                (0, 0xc2..=0xdf) => 1,
                (0, 0xe0..=0xef) => 2,
                (0, 0xf0..=0xf4) => 3,
                (k @ 1..=3, 0x80..=0xbf) => k - 1,
                _ => MISALIGNED,
            };
            if next == DEAD {
                if ended != NONE && nodes[ended as usize].subtree <= MERGE_SUBTREE {
                    // The tokens below need the parser after the lexeme's end at `ended`.
                    let a = ended as usize;
                    let k = nodes[a].depth as usize;
                    let g = group(&mut groups, path[k].0);
                    for j in i..i + n.subtree as usize {
                        for t in trie.tokens_at(j) {
                            let bytes = vocab.token_bytes(t).expect("trie tokens have bytes");
                            g.push((&bytes[k..], t));
                        }
                    }
                }
                i += n.subtree as usize;
                continue;
            }
            if ended == NONE && next.is_accepting() && !next.can_continue() && n.subtree > 1 {
                // The lexeme ends here for good: every token below needs the parser from
                // here on, as the whole subtree (walked in place, or merged with the ends
                // of other nodes in the same state).
                trie.mark(i, inside);
                if n.subtree <= MERGE_SUBTREE {
                    below.push((next, NodeId(i as u32)));
                } else {
                    subtrees.push((next, NodeId(i as u32)));
                }
                i += n.subtree as usize;
                continue;
            }
            let mut here = ended;
            if here == NONE && next.is_accepting() {
                if n.subtree <= MERGE_SUBTREE {
                    here = i as u32;
                } else {
                    // The parser walks the subtree after the lexeme closed here; the nodes
                    // below are walked on for the lexeme's longer ends (a number's digits),
                    // as if it had not ended yet.
                    subtrees.push((next, NodeId(i as u32)));
                }
            }
            trie.mark(i, inside);
            if here == NONE && needs == 0 && n.subtree > 1 && jumps && loops.test(dfa, next) {
                // The body of a string, reached at a character boundary (the token's bytes so
                // far are whole characters, as [`CharSlice::subtree_tails`] reads them): the
                // subtree's tokens whose rest is slice characters stay there; the few others
                // are run one by one. No DFA step per node.
                let end = i + n.subtree as usize;
                let mut leave = |e: &Tail, inside: &mut FixedBitSet| {
                    run_leaving(
                        dfa,
                        next,
                        (e.token, &slice.tail_bytes(e)[d..]),
                        inside,
                        &mut groups,
                    )
                };
                if d == 1
                    && n.byte < 0x80
                    && let Some((rest_in_slice, others)) = slice.below_first_byte(n.byte)
                {
                    // Below a first byte: the tokens that stay are one precomputed set.
                    if !prefilled[n.byte as usize] {
                        inside.union_with(rest_in_slice);
                    }
                    others.for_each(|e| leave(e, inside));
                } else {
                    for e in slice.subtree_tails(i + 1, end) {
                        if e.tail as usize <= d {
                            inside.insert(e.token.index());
                        } else {
                            leave(e, inside);
                        }
                    }
                }
                i = end;
                continue;
            }
            path.truncate(d);
            path.push((next, here, needs));
            i += 1;
        }
    };
    // The root's children one by one, skipping those the DFA refuses at once (a walk
    // from the root would read each of them far apart in the node array).
    for &(first_byte, first) in trie.root_children() {
        if dfa.next(start, first_byte) == DEAD
            || run
                .as_ref()
                .is_some_and(|(r, _)| first_byte < 0x80 && r.bytes >> first_byte & 1 == 1)
        {
            continue;
        }
        let first = first as usize;
        path.truncate(1);
        walk_range(
            first,
            first + nodes[first].subtree as usize,
            &mut path,
            inside,
            loops,
        );
    }
    if let Some((r, paths)) = run {
        paths.inside.iter().for_each(|t| inside.insert(t.index()));
        // The states after each count of the run's bytes (any one of them: they all lead
        // to the next count).
        let step = r.bytes.trailing_zeros() as u8;
        let mut states = vec![start];
        let mut k = 0;
        while k < paths.exits.len() {
            let byte = paths.exits[k].0;
            let group_end = k + paths.exits[k..].iter().take_while(|e| e.0 == byte).count();
            for &(_, after, node) in &paths.exits[k..group_end] {
                let after = after as usize;
                while states.len() <= after {
                    let last = *states.last().expect("non-empty");
                    states.push(dfa.next(last, step));
                }
                if dfa.next(states[after], byte) == DEAD {
                    // Past the count the run needs, a byte the lexeme refuses after one
                    // count it refuses after any (exits are sorted by count).
                    if after as u32 >= r.needed {
                        break;
                    }
                    continue;
                }
                path.clear();
                path.extend(states[..=after].iter().map(|&s| (s, NONE, 0)));
                let node = node as usize;
                walk_range(
                    node,
                    node + nodes[node].subtree as usize,
                    &mut path,
                    inside,
                    loops,
                );
            }
            k = group_end;
        }
    }
    lex_tokens(inside, (groups, below), subtrees, space)
}

/// The walk's findings as [`LexTokens`]: each group's rests, with those of the whole
/// subtrees `below` nodes where the lexeme ended for good (walked in place where such a
/// subtree is all its state has).
fn lex_tokens<'a>(
    inside: &FixedBitSet,
    (mut groups, below): (Groups<'a>, Vec<(StateId, NodeId)>),
    mut subtrees: Vec<(StateId, NodeId)>,
    space: &'a TokenSpace,
) -> LexTokens {
    subtrees.sort_unstable();
    let mut suffixes = Vec::with_capacity(groups.len() + below.len());
    for &(state, node) in &below {
        let alone = !groups.iter().any(|g| g.0 == state)
            && below.iter().filter(|b| b.0 == state).count() == 1;
        if alone {
            suffixes.push((state, Rests::Below(node)));
            continue;
        }
        let (trie, vocab) = (space.trie(), space.vocab());
        let n = trie.nodes()[node.index()];
        let d = n.depth as usize;
        let g = group(&mut groups, state);
        for j in node.index() + 1..node.index() + n.subtree as usize {
            for t in trie.tokens_at(j) {
                let bytes = vocab.token_bytes(t).expect("trie tokens have bytes");
                g.push((&bytes[d..], t));
            }
        }
    }
    suffixes.extend(
        groups
            .into_iter()
            .map(|(state, entries)| (state, Rests::Trie(TokenTrie::from_entries(entries)))),
    );
    LexTokens {
        inside: Inside::take(inside),
        suffixes,
        subtrees,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::dfa;
    use corral_trie::Vocabulary;

    fn space(words: &[&str]) -> TokenSpace {
        let vocab = Vocabulary::from_parts(
            words
                .iter()
                .enumerate()
                .map(|(i, w)| (TokenId(i as u32), w.as_bytes().to_vec())),
            [],
        );
        TokenSpace::new(vocab, None, Vec::new())
    }

    /// The rests of a walk's suffixes, per end state, as `(rest, token)` sorted.
    fn rests(t: &LexTokens, space: &TokenSpace) -> Vec<Vec<(Vec<u8>, u32)>> {
        t.suffixes
            .iter()
            .map(|(_, r)| {
                // The trie, the range of its nodes that hold the rests, and the depth they
                // start below.
                let (trie, lo, hi, base) = match r {
                    Rests::Trie(trie) => (trie, 1, trie.nodes().len(), 0),
                    Rests::Shared { trie, .. } => (&**trie, 1, trie.nodes().len(), 0),
                    Rests::Below(node) => {
                        let (i, trie) = (node.index(), space.trie());
                        let n = trie.nodes()[i];
                        (trie, i + 1, i + n.subtree as usize, n.depth as usize)
                    }
                };
                // A shared trie's tokens are this state's where their first byte leads
                // where they were run.
                let ours = |t: TokenId| match r {
                    Rests::Shared { firsts, .. } => {
                        let bytes = space.vocab().token_bytes(t).unwrap_or_default();
                        bytes.first().is_some_and(|&b| firsts.contains(b))
                    }
                    _ => true,
                };
                let mut out = Vec::new();
                for j in lo..hi {
                    for tok in trie.tokens_at(j).filter(|&t| ours(t)) {
                        out.push((trie.prefix(j)[base..].to_vec(), tok.0));
                    }
                }
                out.sort();
                out
            })
            .collect()
    }

    /// Each of `words` (the space's tokens, by id) run whole from `from`, against what walk
    /// `t` found there: the tokens inside, and each end state's rests.
    fn agrees_with_runs(
        d: &LexemeDfa,
        from: StateId,
        t: &LexTokens,
        (s, words): (&TokenSpace, &[&str]),
        what: &str,
    ) {
        let mut inside = FixedBitSet::with_capacity(s.width());
        t.inside.union_into(&mut inside);
        let found = rests(t, s);
        let mut ends: Vec<(StateId, Vec<u8>, u32)> = t
            .suffixes
            .iter()
            .zip(&found)
            .flat_map(|((state, _), rs)| rs.iter().map(|(r, k)| (*state, r.clone(), *k)))
            .collect();
        ends.sort();
        let mut want_inside = Vec::new();
        let mut want_ends = Vec::new();
        for (k, w) in words.iter().enumerate() {
            match run_suffix(d, from, w.as_bytes()) {
                Outcome::Alive => want_inside.push(k),
                Outcome::Dead => {}
                Outcome::Ending { state, at } => {
                    want_ends.push((state, w.as_bytes()[at..].to_vec(), k as u32))
                }
            }
        }
        want_ends.sort();
        assert_eq!(inside.ones().collect::<Vec<_>>(), want_inside, "{what}");
        assert_eq!(ends, want_ends, "{what}");
    }

    fn owned(rests: &[(&[u8], u32)]) -> Vec<(Vec<u8>, u32)> {
        rests.iter().map(|&(b, t)| (b.to_vec(), t)).collect()
    }

    /// A generic walk with nothing remembered from earlier walks of the DFA.
    fn walk_afresh(d: &LexemeDfa, from: StateId, s: &TokenSpace) -> LexTokens {
        let body_runs = |r, firsts| Arc::new(BodyRuns::new(d, r, s, firsts));
        let run_paths = |bytes, room| Arc::new(RunPaths::new(s, bytes, room));
        walk_generic(
            d,
            from,
            s,
            &mut Loops::new(Alphabet::Strings, 4, true),
            (&body_runs, &run_paths),
        )
    }

    #[test]
    fn runs_of_whitespace_before_a_key_walk_their_own_exits_only() {
        let d = dfa(r#"[ \n]{0,3},[ \n]{0,3}"ab"[ \n]{0,2}:[ \n]{0,2}"#);
        let words = [
            " ",
            "\n",
            "  ",
            "   ",
            "    ",
            "\n ",
            " \n  ",
            ",",
            ", ",
            ",\n",
            " ,",
            "  , ",
            "\"",
            " \"",
            "\n\"a",
            "  \"ab",
            "\"ab\"",
            " \"ab\":",
            "\"ab\" :",
            "a",
            " a",
            "\nx",
            ",\"",
            ", \"a",
            "   \"",
            "    \"",
            ":",
            "\":",
            " ,\n\"ab\"\n:",
        ];
        let s = space(&words);
        s.prepare_slices();
        let mut runs = 0;
        for prefix in [
            "",
            " ",
            "  ",
            "   ",
            ",",
            ", ",
            ",\n ",
            ", \n ",
            "\n,\n",
            ",\"ab\"",
            ",\"ab\"\n",
        ] {
            let from = d.run(d.start(), prefix.as_bytes());
            assert_ne!(from, DEAD, "{prefix:?}");
            runs += usize::from(d.byte_run(from).is_some());
            let t = walk_afresh(&d, from, &s);
            agrees_with_runs(&d, from, &t, (&s, &words), &format!("{prefix:?}"));
        }
        // Every state before ':' is in a run, except at a run's bound (three bytes), where
        // what follows is the next segment.
        assert_eq!(runs, 9);
        // After ':' the run may end the lexeme: walked whole.
        let after = d.run(d.start(), b",\"ab\":");
        assert!(d.byte_run(after).is_none());
        let t = walk_afresh(&d, after, &s);
        agrees_with_runs(&d, after, &t, (&s, &words), "after ':'");
        // Exactly two digits, then more: the third digit starts what follows, so the
        // state is walked whole.
        let d = dfa(r#"x[0-9]{2}[0-9]+y"#);
        let from = d.run(d.start(), b"x");
        assert!(d.byte_run(from).is_none());
        let digits = ["1", "12", "123", "1234", "12y", "123y", "x1", "y"];
        let s2 = space(&digits);
        s2.prepare_slices();
        let t = walk_afresh(&d, from, &s2);
        agrees_with_runs(&d, from, &t, (&s2, &digits), "two digits, then more");
        // A run that needs two bytes before the key: exits after fewer die.
        let d = dfa(r#",[ \n]{2,4}"ab":"#);
        for prefix in [",", ", ", ",\n ", ",\n  "] {
            let from = d.run(d.start(), prefix.as_bytes());
            assert!(d.byte_run(from).is_some(), "{prefix:?}");
            let t = walk_afresh(&d, from, &s);
            agrees_with_runs(&d, from, &t, (&s, &words), &format!("{prefix:?}"));
        }
    }

    #[test]
    fn a_later_count_of_a_run_takes_an_earlier_counts_sets_but_the_tokens_past_its_room() {
        let d = dfa(r#",[ \n]{0,5}"ab"[ \n]{0,2}:"#);
        let words = [
            " ",
            "\n",
            "  ",
            "   ",
            "    ",
            "     ",
            "\n\n\n",
            " \n \n",
            "\"",
            " \"",
            "  \"a",
            "    \"ab",
            "     \"ab",
            "   \"ab\":",
            "\"ab\":x",
            " \"ab\":",
            "x",
            ":",
        ];
        let s = space(&words);
        s.prepare_slices();
        for (earlier, later) in [
            (",", ", "),
            (",", ",\n \n"),
            (", ", ",\n\n"),
            (",\n", ",   "),
            (", ", ",    "),
        ] {
            let (a, b) = (
                d.run(d.start(), earlier.as_bytes()),
                d.run(d.start(), later.as_bytes()),
            );
            let back = (later.len() - earlier.len()) as u32;
            // The same place as `a` (which may be the state that ends the segment
            // before the run, standing as its start).
            let back = d.run_back(b, back).expect("an earlier count");
            assert_eq!(d.residual(back), d.residual(a), "{later:?}");
            let run = d.byte_run(b).expect("in the run");
            let paths = RunPaths::new(&s, run.bytes, run.room);
            let t = walk_afresh(&d, a, &s)
                .along_run(&paths, &s, |t| t)
                .expect("no rest past the room");
            agrees_with_runs(
                &d,
                b,
                &t,
                (&s, &words),
                &format!("{earlier:?} -> {later:?}"),
            );
        }
        assert_eq!(
            d.run_back(d.run(d.start(), b", "), 2),
            None,
            "no count before 0"
        );
        // A rest of a token with three spaces: it serves a count with room for them, not
        // one without.
        let words = ["   \"ab\":x", " ", "\"ab\":"];
        let s = space(&words);
        s.prepare_slices();
        let from = walk_afresh(&d, d.run(d.start(), b","), &s);
        assert!(!from.suffixes.is_empty());
        for (later, serves) in [(",  ", true), (",   ", false)] {
            let b = d.run(d.start(), later.as_bytes());
            let run = d.byte_run(b).expect("in the run");
            let t = from.along_run(&RunPaths::new(&s, run.bytes, run.room), &s, |t| t);
            assert_eq!(t.is_some(), serves, "{later:?}");
            if let Some(t) = t {
                agrees_with_runs(&d, b, &t, (&s, &words), later);
            }
        }
    }

    #[test]
    fn a_lexeme_that_ends_for_good_leaves_its_subtree_in_place() {
        let s = space(&["}", "},", "}}", "},\n", "x", "a", "ax", "ay", "b", "bx"]);
        // `}` ends for good at the first byte: everything below is the parser's, in place.
        let d = dfa(r"\}");
        let t = walk_afresh(&d, d.start(), &s);
        assert!(matches!(t.suffixes[..], [(_, Rests::Below(_))]), "{t:?}");
        assert_eq!(rests(&t, &s), [owned(&[(b",", 1), (b",\n", 3), (b"}", 2)])]);
        let mut inside = FixedBitSet::with_capacity(s.width());
        t.inside.union_into(&mut inside);
        assert_eq!(inside.ones().collect::<Vec<_>>(), [0]);
        // Two nodes that end in the same state: their rests are merged into one trie.
        let d = dfa("a|b");
        let t = walk_afresh(&d, d.start(), &s);
        assert!(matches!(t.suffixes[..], [(_, Rests::Trie(_))]), "{t:?}");
        assert_eq!(rests(&t, &s), [owned(&[(b"x", 6), (b"x", 9), (b"y", 7)])]);
    }

    /// Checks, per token, that running the rest `skip` leaves from the state it names gives
    /// the outcome of running the whole token from `from` (an end shifted by the bytes
    /// skipped), and that a token `skip` drops dies. Returns the bytes skipped in all.
    fn skips_change_nothing<'a>(
        d: &LexemeDfa,
        from: StateId,
        tokens: &[&'a [u8]],
        skip: impl Fn(&'a [u8]) -> Option<(StateId, &'a [u8])>,
    ) -> usize {
        let mut skipped = 0;
        for &token in tokens {
            let whole = run_suffix(d, from, token);
            match skip(token) {
                None => assert_eq!(whole, Outcome::Dead, "{token:?}"),
                Some((state, rest)) => {
                    let k = token.len() - rest.len();
                    assert_eq!(&token[k..], rest);
                    skipped += k;
                    let shifted = match run_suffix(d, state, rest) {
                        Outcome::Ending { state, at } => Outcome::Ending { state, at: at + k },
                        other => other,
                    };
                    assert_eq!(shifted, whole, "{token:?}");
                }
            }
        }
        skipped
    }

    #[test]
    fn a_skipped_run_changes_no_outcome() {
        // A key's body, then the quote, blanks and a colon.
        let d = dfa(r#""[^"\\\x00-\x1f]*" *:"#);
        let body = d.next(d.start(), b'"');
        let skip = AsciiSkip::new(&d, body);
        let tokens: [&[u8]; 7] = [
            b"abc\":",
            b"ab\ncd",
            b"\t",
            b"a\xc3\xa9\" :x",
            b"plain",
            b"\": ",
            b"x\\n",
        ];
        let skipped =
            skips_change_nothing(&d, body, &tokens, |t| skip.rest(t).map(|rest| (body, rest)));
        assert!(skipped > 0 && skip.rest(b"ab\ncd").is_none());
        // From a state that accepts, nothing is skipped: the lexeme may end in the run.
        let done = b"\"k\" :".iter().fold(d.start(), |s, &b| d.next(s, b));
        assert!(done.is_accepting());
        assert_eq!(AsciiSkip::new(&d, done).rest(b"  x"), Some(&b"  x"[..]));
    }

    #[test]
    fn a_run_skipped_after_the_first_byte_changes_no_outcome() {
        // A key's body that sets `a` apart as a name's first letter: every other first
        // byte leads to the plain body, which loops, and none leads back.
        let d = dfa(r#""(?:[^"a\\\x00-\x1f][^"\\\x00-\x1f]*|ab?)?" ?:"#);
        let body = d.next(d.start(), b'"');
        assert!(
            AsciiSkip::new(&d, body)
                .kind
                .iter()
                .all(|&k| k != AsciiSkip::LOOPS)
        );
        let skip = Skip::new(&d, body, Alphabet::Strings);
        assert!(skip.via.is_some());
        let tokens: [&[u8]; 9] = [
            b"xyz\":",
            b"xy\ncd",
            b"ab\" :",
            b"abc\"",
            b"x\xc3\xa9\" :x",
            b"\": ",
            b"z",
            b"a",
            b"qq\\n",
        ];
        let skipped = skips_change_nothing(&d, body, &tokens, |t| skip.rest(body, t));
        assert!(skipped >= 4 && skip.rest(body, b"xy\ncd").is_none());
    }

    #[test]
    fn shared_body_runs_give_each_states_own_runs() {
        // The body of a key that must not be `ab`, escapes and all: every first byte but
        // `a` leads to the plain body, which loops.
        let c = r#"(?:[^"\\\x00-\x1f]|\\["\\nt])"#;
        let not_a = r#"(?:[^"a\\\x00-\x1f]|\\["\\nt])"#;
        let not_b = r#"(?:[^"b\\\x00-\x1f]|\\["\\nt])"#;
        let d = dfa(&format!(r#""(?:{not_a}{c}*|a(?:{not_b}{c}*)?|ab{c}+)?""#));
        let words = [
            "x\":", "b\":", "\"", "\":", "abc", "a", "b", "bc\"", "b\"", "\\\"x\"", "y\n", "q\"z",
            "\"a", "\u{e9}\"", "\\n\"", "xy\\", "b\\q", "zz\"}", "k\t\"", "b\"\"", "hello",
            "\\\"\"", "ab\"", "x\", \"",
        ];
        let s = space(&words);
        s.prepare_slices();
        let mut shared = 0;
        // One `Loops` for all the walks, and the runs made for the first state that asked,
        // as the cache keeps them per DFA.
        let mut loops = Loops::new(Alphabet::Strings, 8, true);
        let kept: std::cell::RefCell<Vec<(StateId, Arc<BodyRuns>)>> = Default::default();
        let run_paths = |bytes, room| Arc::new(RunPaths::new(&s, bytes, room));
        let body_runs = |r, firsts| {
            let mut kept = kept.borrow_mut();
            if let Some((_, runs)) = kept.iter().find(|k| k.0 == r) {
                return runs.clone();
            }
            let runs = Arc::new(BodyRuns::new(&d, r, &s, firsts));
            kept.push((r, runs.clone()));
            runs
        };
        for prefix in ["\"", "\"a", "\"ab", "\"x", "\"ax", "\"x\\n"] {
            let from = d.run(d.start(), prefix.as_bytes());
            assert_ne!(from, DEAD, "{prefix}");
            let t = walk_generic(&d, from, &s, &mut loops, (&body_runs, &run_paths));
            shared += t
                .suffixes
                .iter()
                .filter(|r| matches!(r.1, Rests::Shared { .. }))
                .count();
            agrees_with_runs(&d, from, &t, (&s, &words), prefix);
        }
        assert!(shared >= 4, "the states past the first byte share runs");
    }

    /// Two keys that must not be some names, over one plain key: the runs of the plain
    /// body are made once, from the plain key's own state, and serve both products, with
    /// each product's end states found again. Every token run whole from each state agrees
    /// with the walk.
    #[test]
    fn products_over_one_plain_key_share_its_body_runs() {
        let c = r#"(?:[^"\\\x00-\x1f]|\\["\\nt])"#;
        let plain = Arc::new(dfa(&format!(r#""{c}*""#)));
        let product = |names: &str| {
            let names = Arc::new(dfa(&format!(r#""(?:{names})""#)));
            LexemeDfa::product(
                &plain,
                &names,
                corral_grammar::Combine::FirstNotSecond,
                1 << 24,
            )
        };
        let words = [
            "x\":", "b\":", "\"", "\":", "abc", "a", "b", "bc\"", "b\"", "\\\"x\"", "y\n", "q\"z",
            "\"a", "\u{e9}\"", "\\n\"", "xy\\", "b\\q", "zz\"}", "k\t\"", "b\"\"", "hello",
            "\\\"\"", "ab\"", "x\", \"", "d\"", "cd\"",
        ];
        let s = space(&words);
        s.prepare_slices();
        // The runs of the plain key's states, as the cache keeps them across products.
        let made: std::cell::RefCell<Vec<(StateId, Arc<BodyRuns>)>> = Default::default();
        let mut reused = 0;
        for names in ["ab", "cd|x"] {
            let d = product(names);
            let mut loops = Loops::new(Alphabet::Strings, 8, true);
            let mapped = std::cell::Cell::new(0);
            let run_paths = |bytes, room| Arc::new(RunPaths::new(&s, bytes, room));
            let body_runs = |r, firsts| {
                let (a, p) = d.first_alone(r).expect("the runs' state is the plain body");
                let mut made = made.borrow_mut();
                let runs = match made.iter().find(|m| m.0 == p) {
                    Some((_, runs)) => runs.clone(),
                    None => {
                        let runs = Arc::new(BodyRuns::new(a, p, &s, firsts));
                        made.push((p, runs.clone()));
                        runs
                    }
                };
                mapped.set(mapped.get() + 1);
                Arc::new(runs.in_dfa(&d, r).expect("the states match the same"))
            };
            for prefix in ["\"", "\"a", "\"c", "\"x", "\"ax"] {
                let from = d.run(d.start(), prefix.as_bytes());
                assert_ne!(from, DEAD, "{names} {prefix}");
                let t = walk_generic(&d, from, &s, &mut loops, (&body_runs, &run_paths));
                agrees_with_runs(&d, from, &t, (&s, &words), &format!("{names} {prefix}"));
            }
            reused += mapped.get();
        }
        assert_eq!(made.borrow().len(), 1, "one plain body state, run once");
        assert!(reused >= 2, "both products took the plain key's runs");
    }
}
