//! Lexemes: the regular pieces of a grammar, each compiled to a byte-level DFA.
//!
//! A lexeme's regex is compiled with `regex-automata` into a Thompson NFA, which our own
//! subset construction turns into [`LexemeDfa`], a small table with three properties the
//! recognizer and the mask cache rely on:
//!
//! - state [`DEAD`] is 0, and every other state is *live*: some continuation reaches a match
//!   (states that cannot are merged into `DEAD` when the table is built);
//! - `is_accepting(s)` says whether the bytes read so far form a complete match, without the
//!   one-byte match delay of regex-automata's DFAs;
//! - `can_continue(s)` says whether any byte leads to a live state.
//!
//! Both flags are carried in the state id itself (two high bits), so stepping a run and
//! testing it is one table load. [`LexemeDfa::index`] strips them: indices are dense
//! (`0..len`), stable and shared by every user of the grammar, so they can key caches (the
//! engine caches a token set per `(lexeme, state)`).

mod compose;
mod product;
mod subset;

use crate::error::ErrorKind;
use regex_syntax::hir::Hir;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

/// The dead state: nothing more can match.
pub const DEAD: u32 = 0;

const ACCEPT: u32 = 1 << 31;
const CONTINUE: u32 = 1 << 30;
const INDEX: u32 = CONTINUE - 1;
/// A table entry a composed DFA has not computed yet (no state has this id).
const UNKNOWN: u32 = u32::MAX;

/// A transition table of tagged ids by `(state index, class)`, stored complemented so that
/// zeroed memory (a fresh allocation the system has not even backed yet) reads as
/// [`UNKNOWN`]. Flat for DFAs whose number of states is known (built or composed); in
/// buckets of doubling size for lazily built ones, which grow without moving what readers
/// may be reading (bucket `k` holds states `2^k - 1 .. 2^(k+1) - 1`).
#[derive(Debug)]
enum Table {
    Flat(Box<[AtomicU32]>, usize),
    Grow(Box<[OnceLock<Box<[AtomicU32]>>]>, usize),
}

/// Zeroed atomics.
fn zeroed(n: usize) -> Box<[AtomicU32]> {
    let zeroed: Box<[u32]> = vec![0u32; n].into_boxed_slice();
    // SAFETY: `AtomicU32` has the same size, alignment and bit validity as `u32`, so a boxed
    // slice of one is a boxed slice of the other.
    unsafe { Box::from_raw(Box::into_raw(zeroed) as *mut [AtomicU32]) }
}

impl Table {
    /// `states` rows of `stride` entries, all unknown.
    fn unknown(states: usize, stride: usize) -> Table {
        Table::Flat(zeroed(states * stride), stride)
    }

    /// A table that grows as states are added.
    fn growing(stride: usize) -> Table {
        Table::Grow((0..32).map(|_| OnceLock::new()).collect(), stride)
    }

    fn from_ids(ids: Vec<u32>, stride: usize) -> Table {
        Table::Flat(
            ids.into_iter().map(|t| AtomicU32::new(!t)).collect(),
            stride,
        )
    }

    /// The entry of state index `s`, class `c`.
    #[inline]
    fn get(&self, s: usize, c: usize) -> u32 {
        match self {
            Table::Flat(t, stride) => !t[s * stride + c].load(Relaxed),
            Table::Grow(buckets, stride) => {
                let i = s + 1;
                let k = (usize::BITS - 1 - i.leading_zeros()) as usize;
                match buckets[k].get() {
                    Some(b) => !b[(i - (1 << k)) * stride + c].load(Relaxed),
                    None => UNKNOWN,
                }
            }
        }
    }

    fn set(&self, s: usize, c: usize, t: u32) {
        match self {
            Table::Flat(e, stride) => e[s * stride + c].store(!t, Relaxed),
            Table::Grow(buckets, stride) => {
                let i = s + 1;
                let k = (usize::BITS - 1 - i.leading_zeros()) as usize;
                let b = buckets[k].get_or_init(|| zeroed((1 << k) * stride));
                b[(i - (1 << k)) * stride + c].store(!t, Relaxed)
            }
        }
    }

    /// Entries allocated.
    fn allocated(&self) -> usize {
        match self {
            Table::Flat(t, _) => t.len(),
            Table::Grow(buckets, _) => buckets
                .iter()
                .filter_map(|b| b.get())
                .map(|b| b.len())
                .sum(),
        }
    }
}

impl Clone for Table {
    fn clone(&self) -> Table {
        let copy = |t: &[AtomicU32]| t.iter().map(|x| AtomicU32::new(x.load(Relaxed))).collect();
        match self {
            Table::Flat(t, stride) => Table::Flat(copy(t), *stride),
            Table::Grow(buckets, stride) => Table::Grow(
                buckets
                    .iter()
                    .map(|b| match b.get() {
                        Some(b) => OnceLock::from(copy(b)),
                        None => OnceLock::new(),
                    })
                    .collect(),
                *stride,
            ),
        }
    }
}

/// How a DFA's unknown table entries are computed.
#[derive(Clone, Debug)]
enum Fill {
    /// Never: every entry was computed when the DFA was built.
    Built,
    /// From segments ([`compose`]).
    Composed(Box<compose::Composed>),
    /// By subset construction, one state's row at a time.
    Subset(Box<Lazy>),
    /// By the product construction, one state's row at a time ([`product`]).
    Product(Box<product::LazyProduct>),
}

/// A lazily built DFA's construction state.
#[derive(Debug)]
struct Lazy {
    subsets: Mutex<subset::Subsets>,
    /// Set when a state was needed past the size limit (see [`LexemeDfa::overflowed`]).
    overflow: AtomicBool,
    /// Per state index: the fewest bytes to an accepting state, and the first.
    shortest: Mutex<FxHashMap<u32, Option<(u32, u8)>>>,
}

impl Clone for Lazy {
    fn clone(&self) -> Lazy {
        Lazy {
            subsets: Mutex::new(lock(&self.subsets).clone()),
            overflow: AtomicBool::new(self.overflow.load(Relaxed)),
            shortest: Mutex::new(lock(&self.shortest).clone()),
        }
    }
}

/// A mutex's guard; a poisoned lock (a panic while held elsewhere) is still used: the
/// guarded construction state is consistent between its operations.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A lexeme's DFA over bytes. Input must be UTF-8; invalid UTF-8 leads to [`DEAD`].
#[derive(Clone, Debug)]
pub struct LexemeDfa {
    classes: [u8; 256],
    stride: usize,
    /// Tagged ids (index | flags) by state and class. Composed and lazily built DFAs start
    /// with entries [`UNKNOWN`] and compute each on first use ([`Fill`]): filling is
    /// idempotent, so concurrent fills of one entry agree.
    trans: Table,
    /// Number of states (fixed unless built lazily).
    len: usize,
    /// `first[b / 64] >> (b % 64) & 1`: byte `b` can start a match.
    first: [u64; 4],
    start: u32,
    fill: Fill,
    /// Per state index: the fewest bytes to an accepting state and the first of them
    /// (built DFAs; computed on first use).
    shortest: OnceLock<(Vec<u32>, Vec<u8>)>,
    /// 0 where state indices follow from the regex alone (built and composed DFAs: equal
    /// regexes, equal numbering); a number of this DFA's own where they follow the order
    /// states were first reached (lazy subset construction).
    numbering: u64,
}

/// Numbers the lazily built DFAs (see [`LexemeDfa::numbering`]).
/// Set once any lexeme DFA of the process outgrew its size limit or failed to build. Until
/// then a refused byte cannot be a DFA's failure, and [`crate::Grammar::overflow`] answers
/// without looking at each lexeme (it is asked at every refusal, which brute-force checks
/// make on nearly every token).
static ANY_FAILED: AtomicBool = AtomicBool::new(false);

/// Records that some lexeme DFA overflowed or failed to build.
pub(crate) fn note_failure() {
    ANY_FAILED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether some lexeme DFA of the process has ever overflowed or failed to build.
pub(crate) fn any_failed() -> bool {
    ANY_FAILED.load(std::sync::atomic::Ordering::SeqCst)
}

static LAZY_NUMBERING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl LexemeDfa {
    /// How this DFA numbers its states: 0 if the numbering follows from its regex alone,
    /// so that per-state data keyed by (regex, state) is valid for every DFA of that regex;
    /// otherwise a number no other DFA has (states numbered in the order they were first
    /// reached), to be part of such keys.
    pub fn numbering(&self) -> u64 {
        self.numbering
    }

    /// Compiles `hir`; `size_limit` bounds the bytes of the NFA and of the DFA table.
    ///
    /// A sequence with counted repetitions is composed from its pieces, its table filled on
    /// first use ([`compose`]). Anything else: regex-automata compiles the Thompson NFA
    /// (UTF-8 automata for Unicode classes); the subset construction is ours: for the small
    /// anchored automata of lexemes it costs a few microseconds, where a general dense-DFA
    /// build (all start states, match delay, quit bytes) costs about a hundred.
    pub fn build(hir: &Hir, size_limit: usize) -> Result<LexemeDfa, ErrorKind> {
        Self::build_in(hir, size_limit, None)
    }

    /// [`LexemeDfa::build`], with the pieces of a composed DFA through `cache`.
    pub(crate) fn build_in(
        hir: &Hir,
        size_limit: usize,
        cache: Option<&crate::DfaCache>,
    ) -> Result<LexemeDfa, ErrorKind> {
        match compose::compose(hir, size_limit, cache) {
            Some(composed) => composed,
            None => Self::build_lazy(hir, size_limit),
        }
    }

    /// [`LexemeDfa::build`] by subset construction of every state and minimization, never
    /// composed nor lazy (for the pieces of composed DFAs, which must be whole).
    pub(crate) fn build_tables(hir: &Hir, size_limit: usize) -> Result<LexemeDfa, ErrorKind> {
        let mut sub = subset::Subsets::new(hir, size_limit)?;
        let too_big = || size_error("limit".into(), size_limit);
        let stride = sub.stride;
        let start = sub.start().map_err(|_| too_big())?;
        let mut trans: Vec<u32> = vec![DEAD; stride];
        let mut i = 1;
        while i < sub.len() {
            trans.resize((i + 1) * stride, DEAD);
            sub.row(i as u32, &mut trans[i * stride..])
                .map_err(|_| too_big())?;
            if trans.len() * 4 > size_limit {
                return Err(too_big());
            }
            i += 1;
        }
        let accept = (0..sub.len() as u32).map(|i| sub.accepting(i)).collect();
        Ok(Self::from_tables(
            sub.classes,
            stride,
            trans,
            accept,
            start,
            true,
        ))
    }

    /// [`LexemeDfa::build`] lazily: the NFA and the start state now, every other state the
    /// first time a transition reaches it.
    fn build_lazy(hir: &Hir, size_limit: usize) -> Result<LexemeDfa, ErrorKind> {
        let mut sub = subset::Subsets::new(hir, size_limit)?;
        let start = sub
            .start()
            .map_err(|_| size_error("limit".into(), size_limit))?;
        let tag = |sub: &subset::Subsets, i: u32| {
            if i == DEAD {
                DEAD
            } else {
                i | if sub.accepting(i) { ACCEPT } else { 0 }
                    | if sub.continues(i) { CONTINUE } else { 0 }
            }
        };
        let start = tag(&sub, start);
        let (classes, stride) = (sub.classes, sub.stride);
        let fill = Fill::Subset(Box::new(Lazy {
            subsets: Mutex::new(sub),
            overflow: AtomicBool::new(false),
            shortest: Mutex::new(FxHashMap::default()),
        }));
        Ok(Self::built_on_demand(classes, stride, start, fill))
    }

    /// A DFA whose states are numbered as `fill` reaches them (its own numbering), from its
    /// start state.
    fn built_on_demand(classes: [u8; 256], stride: usize, start: u32, fill: Fill) -> LexemeDfa {
        let dfa = LexemeDfa {
            classes,
            stride,
            trans: Table::growing(stride),
            len: 0,
            first: [0; 4],
            start,
            fill,
            shortest: OnceLock::new(),
            numbering: LAZY_NUMBERING.fetch_add(1, Relaxed),
        };
        let mut first = [0u64; 4];
        if start != DEAD {
            for b in 0..=255u8 {
                if dfa.next(start, b) != DEAD {
                    first[b as usize / 64] |= 1 << (b % 64);
                }
            }
        }
        LexemeDfa { first, ..dfa }
    }

    /// Finishes a DFA from a raw table (state 0 dead): merges states that cannot reach a
    /// match into `DEAD`, renumbers, and tags ids with their flags.
    fn from_tables(
        classes: [u8; 256],
        stride: usize,
        trans: Vec<u32>,
        accept: Vec<bool>,
        start_ix: u32,
        minimize_states: bool,
    ) -> LexemeDfa {
        let n = accept.len();
        let live = live_states(stride, &trans, &accept);
        // Renumber: keep live states only; everything else becomes DEAD.
        let mut renum = vec![DEAD; n];
        let mut kept = 1u32;
        for s in 1..n {
            if live[s] {
                renum[s] = kept;
                kept += 1;
            }
        }
        // Merge equivalent states (Hopcroft): the same language from both.
        let mut live_trans = vec![DEAD; kept as usize * stride];
        let mut live_accept = vec![false; kept as usize];
        for s in 1..n {
            let ns = renum[s] as usize;
            if ns == 0 {
                continue;
            }
            live_accept[ns] = accept[s];
            for c in 0..stride {
                live_trans[ns * stride + c] = renum[trans[s * stride + c] as usize];
            }
        }
        let blocks = if minimize_states {
            minimize(kept as usize, stride, &live_trans, &live_accept)
        } else {
            (0..kept).collect()
        };
        for r in renum.iter_mut() {
            *r = blocks[*r as usize];
        }
        let kept = blocks.iter().max().map_or(1, |&m| m as usize + 1);
        // A representative original state per merged state, for its flags and transitions.
        let mut rep = vec![usize::MAX; kept];
        for (s, &ns) in renum.iter().enumerate().skip(1) {
            let ns = ns as usize;
            if ns != 0 && rep[ns] == usize::MAX {
                rep[ns] = s;
            }
        }
        // Tag every kept state with its flags, then write the table with tagged targets.
        let mut tagged = vec![DEAD; n];
        for s in 1..n {
            let ns = renum[s];
            if ns == DEAD {
                continue;
            }
            let cont = (0..stride).any(|c| renum[trans[s * stride + c] as usize] != DEAD);
            tagged[s] = ns | if accept[s] { ACCEPT } else { 0 } | if cont { CONTINUE } else { 0 };
        }
        let mut new_trans = vec![DEAD; kept * stride];
        for (ns, &s) in rep.iter().enumerate().skip(1) {
            for c in 0..stride {
                new_trans[ns * stride + c] = tagged[trans[s * stride + c] as usize];
            }
        }
        let start = tagged[start_ix as usize];
        let mut first = [0u64; 4];
        if start != DEAD {
            for b in 0..=255u8 {
                let t = new_trans[(start & INDEX) as usize * stride + classes[b as usize] as usize];
                if t != DEAD {
                    first[b as usize / 64] |= 1 << (b % 64);
                }
            }
        }
        LexemeDfa {
            classes,
            stride,
            trans: Table::from_ids(new_trans, stride),
            len: kept,
            first,
            start,
            fill: Fill::Built,
            shortest: OnceLock::new(),
            numbering: 0,
        }
    }

    /// The DFA of `a` combined with `b` (GBNF's `a & b` and `a & ~b`, corral's extension):
    /// the product construction over pairs of states, byte classes refined to pairs of
    /// classes, each state built the first time a transition reaches it ([`product`]).
    /// `size_limit` bounds the bytes of the table and of what the construction remembers;
    /// a state needed past it reads as dead and [`LexemeDfa::overflowed`] says so.
    pub fn product(
        a: &std::sync::Arc<LexemeDfa>,
        b: &std::sync::Arc<LexemeDfa>,
        how: Combine,
        size_limit: usize,
    ) -> LexemeDfa {
        product::product(a.clone(), b.clone(), how, size_limit)
    }

    /// The product of `a` and `b` built whole (every reachable pair, then dead states
    /// pruned), to check the one built on demand against.
    #[cfg(test)]
    pub(crate) fn product_whole(
        a: &LexemeDfa,
        b: &LexemeDfa,
        how: Combine,
        size_limit: usize,
    ) -> Result<LexemeDfa, ErrorKind> {
        let (classes, reps) = product::pair_classes(a, b);
        let stride = reps.len();
        // Product states by the pair of tagged states; 0 is dead.
        let mut index: FxHashMap<(u32, u32), u32> = FxHashMap::default();
        let mut pairs = vec![(DEAD, DEAD)];
        let mut accept = vec![false];
        let mut intern = |sa: u32, sb: u32, pairs: &mut Vec<(u32, u32)>| -> u32 {
            if sa == DEAD || (how == Combine::Both && sb == DEAD) {
                return DEAD;
            }
            *index.entry((sa, sb)).or_insert_with(|| {
                pairs.push((sa, sb));
                accept.push(match how {
                    Combine::Both => a.is_accepting(sa) && b.is_accepting(sb),
                    Combine::FirstNotSecond => a.is_accepting(sa) && !b.is_accepting(sb),
                });
                (pairs.len() - 1) as u32
            })
        };
        let start = intern(a.start, b.start, &mut pairs);
        let mut trans: Vec<u32> = vec![DEAD; stride];
        let mut i = 1;
        while i < pairs.len() {
            let (sa, sb) = pairs[i];
            for &byte in &reps {
                let t = intern(a.next(sa, byte), b.next(sb, byte), &mut pairs);
                trans.push(t);
            }
            if trans.len() * 4 > size_limit {
                return Err(size_error("limit".into(), size_limit));
            }
            i += 1;
        }
        Ok(Self::from_tables(
            classes, stride, trans, accept, start, false,
        ))
    }

    /// A DFA that matches nothing.
    pub(crate) fn never() -> LexemeDfa {
        LexemeDfa {
            classes: [0; 256],
            stride: 1,
            trans: Table::from_ids(vec![DEAD], 1),
            len: 1,
            first: [0; 4],
            start: DEAD,
            fill: Fill::Built,
            shortest: OnceLock::new(),
            numbering: 0,
        }
    }

    /// One byte of each class of bytes the DFA does not tell apart (every byte of a class
    /// leads from every state to the same state), in class order.
    pub fn class_bytes(&self) -> Vec<u8> {
        let mut reps = vec![None; self.stride];
        for b in 0..=255u8 {
            let c = self.classes[b as usize] as usize;
            if c < reps.len() && reps[c].is_none() {
                reps[c] = Some(b);
            }
        }
        reps.into_iter().flatten().collect()
    }

    /// The start state; [`DEAD`] if the lexeme matches nothing.
    #[inline]
    pub fn start(&self) -> u32 {
        self.start
    }

    /// A state that behaves as `state` does on every byte string of at most `depth` bytes:
    /// the same place in a counted repetition at the lowest count that does (counts far
    /// from both bounds are alike; see the composed DFA's segments), or `state` itself.
    /// Token sets computed for it hold for `state` when `depth` is the longest token.
    pub fn representative(&self, state: u32, depth: usize) -> u32 {
        match &self.fill {
            Fill::Composed(c) => {
                let depth = u32::try_from(depth).unwrap_or(u32::MAX);
                c.representative(state & INDEX, depth)
                    .map_or(state, |g| c.tag(g))
            }
            _ => state,
        }
    }

    /// Where bytes lead from `to`, given that they lead from `from` to `t`, for `from` the
    /// [`LexemeDfa::representative`] of `to` at a depth of at least those bytes: `t` with
    /// its count moved to `to`'s (a state past the counted repetition is the same from
    /// both); `t` itself in any other DFA. So a state far from its counts' bounds steps as
    /// its representative does, without its own transitions computed.
    pub fn recount(&self, t: u32, from: u32, to: u32) -> u32 {
        match &self.fill {
            Fill::Composed(c) => c.tag(c.recount(t & INDEX, from & INDEX, to & INDEX)),
            _ => t,
        }
    }

    /// The class of `byte`: bytes of one class lead every state to the same place.
    #[inline]
    pub fn class_of(&self, byte: u8) -> u8 {
        self.classes[byte as usize]
    }

    /// The state after reading `byte` in `state` (not [`DEAD`]).
    #[inline]
    pub fn next(&self, state: u32, byte: u8) -> u32 {
        let class = self.classes[byte as usize] as usize;
        self.entry((state & INDEX) as usize, class)
    }

    /// The entry for state index `s` and class `c` (computed if missing).
    #[inline]
    fn entry(&self, s: usize, c: usize) -> u32 {
        let t = self.trans.get(s, c);
        if t != UNKNOWN {
            return t;
        }
        self.fill(s as u32, c)
    }

    /// Computes a missing entry (of a composed or lazily built DFA).
    #[cold]
    fn fill(&self, index: u32, class: usize) -> u32 {
        match &self.fill {
            Fill::Composed(c) => {
                let t = c.next(index, class);
                self.trans.set(index as usize, class, t);
                t
            }
            Fill::Subset(lazy) => {
                let mut sub = lock(&lazy.subsets);
                // Another thread may have filled the row meanwhile.
                let t = self.trans.get(index as usize, class);
                if t != UNKNOWN {
                    return t;
                }
                let mut row = vec![DEAD; self.stride];
                if sub.row(index, &mut row).is_err() {
                    lazy.overflow.store(true, Relaxed);
                    note_failure();
                    return DEAD;
                }
                let tag = |i: u32| {
                    if i == DEAD {
                        DEAD
                    } else {
                        i | if sub.accepting(i) { ACCEPT } else { 0 }
                            | if sub.continues(i) { CONTINUE } else { 0 }
                    }
                };
                for (c, &t) in row.iter().enumerate() {
                    self.trans.set(index as usize, c, tag(t));
                }
                tag(row[class])
            }
            Fill::Product(p) => p.fill(&self.trans, index, class),
            // Built tables have no unknown entries.
            Fill::Built => DEAD,
        }
    }

    /// Whether a lazily built DFA needed a state past its size limit (`max_lexeme_bytes`):
    /// the transition into it read as dead, so matching is no longer exact and the caller
    /// must report the limit.
    pub fn overflowed(&self) -> bool {
        match &self.fill {
            Fill::Subset(l) => l.overflow.load(Relaxed),
            Fill::Product(p) => p.overflowed(),
            _ => false,
        }
    }

    /// Whether the bytes read so far are a complete match.
    #[inline]
    pub fn is_accepting(&self, state: u32) -> bool {
        state & ACCEPT != 0
    }

    /// Whether some byte leads on to a live state.
    #[inline]
    pub fn can_continue(&self, state: u32) -> bool {
        state & CONTINUE != 0
    }

    /// Whether `byte` can start a match (a live transition from the start state).
    #[inline]
    pub fn can_start_with(&self, byte: u8) -> bool {
        self.first[byte as usize / 64] >> (byte % 64) & 1 != 0
    }

    /// The bytes that can start a match, as a 256-bit set.
    pub fn first_bytes(&self) -> [u64; 4] {
        self.first
    }

    /// Dense index of a state (`0..len`), for tables indexed by state.
    #[inline]
    pub fn index(state: u32) -> usize {
        (state & INDEX) as usize
    }

    /// Number of states, [`DEAD`] included (so far, for a lazily built DFA).
    pub fn len(&self) -> usize {
        match &self.fill {
            Fill::Subset(l) => lock(&l.subsets).len(),
            Fill::Product(p) => p.len(),
            _ => self.len,
        }
    }

    /// Always false: the dead state is always there.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Heap bytes held: the tables (allocated: a composed DFA's untouched entries are
    /// counted), and for a DFA built on demand what its construction keeps (each state's
    /// set of NFA states, or pair of operand states) and its shortest-match memo. It grows
    /// as states are built, up to the size limit the DFA was built with.
    pub fn memory_usage(&self) -> usize {
        let fill = match &self.fill {
            Fill::Subset(l) => lock(&l.subsets).memory_usage() + lock(&l.shortest).len() * 16,
            Fill::Product(p) => p.memory_usage(),
            Fill::Built | Fill::Composed(_) => 0,
        };
        self.trans.allocated() * 4 + fill
    }

    /// The fewest bytes from `state` to an accepting state, and the first of them (the most
    /// readable where several are shortest); `None` if no accepting state is reachable.
    pub fn shortest(&self, state: u32) -> Option<(u32, u8)> {
        if state == DEAD {
            return None;
        }
        match &self.fill {
            Fill::Composed(c) => return c.shortest(state & INDEX),
            Fill::Subset(lazy) => return self.shortest_by_distance(lazy, state),
            Fill::Product(p) => return self.shortest_remembered(&p.shortest, state),
            Fill::Built => {}
        }
        let (dist, byte) = self.shortest.get_or_init(|| self.shortest_suffixes());
        let i = (state & INDEX) as usize;
        (dist[i] != u32::MAX).then(|| (dist[i], byte[i]))
    }

    /// [`LexemeDfa::shortest_forward`], remembered in `memo` by state index.
    fn shortest_remembered(
        &self,
        memo: &Mutex<FxHashMap<u32, Option<(u32, u8)>>>,
        state: u32,
    ) -> Option<(u32, u8)> {
        let i = state & INDEX;
        if let Some(&r) = lock(memo).get(&i) {
            return r;
        }
        let r = self.shortest_forward(state);
        lock(memo).insert(i, r);
        r
    }

    /// For a DFA built by subset construction: the fewest bytes from `state` to an
    /// accepting state (the least NFA distance of its set) and the first of them, the most
    /// readable byte whose target is one byte closer. Builds only the targets it tries.
    fn shortest_by_distance(&self, lazy: &Lazy, state: u32) -> Option<(u32, u8)> {
        let i = state & INDEX;
        let d = lock(&lazy.subsets).distance(i)?;
        if d == 0 {
            return Some((0, 0));
        }
        if let Some(&r) = lock(&lazy.shortest).get(&i) {
            return r;
        }
        let reps = self.readable_reps();
        let mut order: Vec<usize> = (0..self.stride).collect();
        order.sort_by_key(|&c| reps[c].0);
        let mut found = None;
        for c in order {
            let t = self.entry(i as usize, c);
            if t != DEAD && lock(&lazy.subsets).distance(t & INDEX) == Some(d - 1) {
                found = Some((d, reps[c].1));
                break;
            }
        }
        // None only when the target on the path was past the size limit (overflowed).
        lock(&lazy.shortest).insert(i, found);
        found
    }

    /// Runs `bytes` from `state`; [`DEAD`] as soon as the DFA dies.
    pub fn run(&self, mut state: u32, bytes: &[u8]) -> u32 {
        for &b in bytes {
            if state == DEAD {
                break;
            }
            state = self.next(state, b);
        }
        state
    }

    /// For a lazily built DFA: the fewest bytes from `state` to an accepting state and the
    /// first of them, by a breadth-first search forward (classes tried most readable byte
    /// first, so the first path found is the most readable of the shortest).
    fn shortest_forward(&self, state: u32) -> Option<(u32, u8)> {
        if self.is_accepting(state) {
            return Some((0, 0));
        }
        let reps = self.readable_reps();
        let mut order: Vec<usize> = (0..self.stride).collect();
        order.sort_by_key(|&c| reps[c].0);
        // Per state reached: (distance, first byte of its path).
        let mut seen: FxHashMap<u32, (u32, u8)> = FxHashMap::default();
        let mut queue = std::collections::VecDeque::new();
        seen.insert(state & INDEX, (0, 0));
        queue.push_back(state);
        while let Some(s) = queue.pop_front() {
            let (d, first) = seen[&(s & INDEX)];
            for &c in &order {
                let t = self.entry((s & INDEX) as usize, c);
                if t == DEAD || seen.contains_key(&(t & INDEX)) {
                    continue;
                }
                let first = if d == 0 { reps[c].1 } else { first };
                if self.is_accepting(t) {
                    return Some((d + 1, first));
                }
                seen.insert(t & INDEX, (d + 1, first));
                queue.push_back(t);
            }
        }
        None
    }

    /// Per byte class: its most readable byte and that byte's rank (a lower-case letter,
    /// then a digit, an upper-case letter, a space, other printable ASCII, anything).
    fn readable_reps(&self) -> Vec<(u8, u8)> {
        let rank = |b: u8| match b {
            b'a'..=b'z' => 0,
            b'0'..=b'9' => 1,
            b'A'..=b'Z' => 2,
            b' ' => 3,
            0x21..=0x7e => 4,
            _ => 5,
        };
        let mut reps = vec![(u8::MAX, 0u8); self.stride];
        for b in 0..=255u8 {
            let c = self.classes[b as usize] as usize;
            if rank(b) < reps[c].0 {
                reps[c] = (rank(b), b);
            }
        }
        reps
    }

    /// For every state (by [`LexemeDfa::index`]): the fewest bytes that lead from it to an
    /// accepting state (`u32::MAX` if none; 0 for accepting states), and the first of them.
    /// A breadth-first search backwards from the accepting states (over the whole table).
    fn shortest_suffixes(&self) -> (Vec<u32>, Vec<u8>) {
        let n = self.len;
        // Tagged id of each state index, to read its flags.
        let tag = self.tags();
        let readable = self.readable_reps();
        let reps: Vec<u8> = readable.iter().map(|r| r.1).collect();
        let best: Vec<u8> = readable.iter().map(|r| r.0).collect();
        let mut preds: Vec<Vec<(u32, u8)>> = vec![Vec::new(); n];
        for s in 1..n {
            for (c, &rep) in reps.iter().enumerate() {
                let t = (self.entry(s, c) & INDEX) as usize;
                if t != 0 {
                    preds[t].push((s as u32, rep));
                }
            }
        }
        let mut dist = vec![u32::MAX; n];
        let mut byte = vec![0u8; n];
        let mut queue = std::collections::VecDeque::new();
        for s in 1..n {
            if self.is_accepting(tag[s]) {
                dist[s] = 0;
                queue.push_back(s);
            }
        }
        while let Some(t) = queue.pop_front() {
            for &(p, _) in &preds[t] {
                let p = p as usize;
                if dist[p] == u32::MAX {
                    dist[p] = dist[t] + 1;
                    queue.push_back(p);
                }
            }
        }
        // Of the bytes on a shortest way, the most readable.
        for p in 1..n {
            if dist[p] == 0 || dist[p] == u32::MAX {
                continue;
            }
            let mut chosen = (u8::MAX, 0u8);
            for (c, &rep) in reps.iter().enumerate() {
                let t = (self.entry(p, c) & INDEX) as usize;
                if t != 0 && dist[t] != u32::MAX && dist[t] + 1 == dist[p] && best[c] < chosen.0 {
                    chosen = (best[c], rep);
                }
            }
            byte[p] = chosen.1;
        }
        (dist, byte)
    }

    /// The tagged id of each state index (0: dead), of a built or composed DFA.
    pub(crate) fn tags(&self) -> Vec<u32> {
        if let Fill::Composed(c) = &self.fill {
            return (0..self.len as u32).map(|i| c.tag(i)).collect();
        }
        let mut tag = vec![DEAD; self.len];
        tag[(self.start & INDEX) as usize] = self.start;
        for s in 0..self.len {
            for c in 0..self.stride {
                let t = self.trans.get(s, c);
                tag[(t & INDEX) as usize] = t;
            }
        }
        tag
    }

    /// Whether `bytes` is a complete match.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        let s = self.run(self.start, bytes);
        s != DEAD && self.is_accepting(s)
    }
}

/// How [`LexemeDfa::product`] combines two languages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// Strings in both (`a & b`).
    Both,
    /// Strings in the first and not in the second (`a & ~b`).
    FirstNotSecond,
}

/// The states of a raw table (state 0 dead) that can reach an accepting state: reverse
/// reachability over predecessor lists in CSR form (state t's predecessors are
/// `preds[first[t]..first[t + 1]]`).
fn live_states(stride: usize, trans: &[u32], accept: &[bool]) -> Vec<bool> {
    let n = accept.len();
    let mut first = vec![0u32; n + 1];
    for &t in &trans[stride..] {
        first[t as usize + 1] += 1;
    }
    for i in 1..=n {
        first[i] += first[i - 1];
    }
    let mut fill = first.clone();
    let mut preds = vec![0u32; first[n] as usize];
    for (k, &t) in trans.iter().enumerate().skip(stride) {
        preds[fill[t as usize] as usize] = (k / stride) as u32;
        fill[t as usize] += 1;
    }
    let mut live = accept.to_vec();
    let mut stack: Vec<usize> = (0..n).filter(|&s| accept[s]).collect();
    while let Some(t) = stack.pop() {
        for &p in &preds[first[t] as usize..first[t + 1] as usize] {
            if !live[p as usize] {
                live[p as usize] = true;
                stack.push(p as usize);
            }
        }
    }
    live
}

/// Hopcroft's partition refinement over a DFA whose states `1..n` are live and state 0 is
/// dead: the merged state of each state, numbered with 0 for dead and the rest in order of
/// their first member (so the start state's number is stable when it is state 1).
fn minimize(n: usize, stride: usize, trans: &[u32], accept: &[bool]) -> Vec<u32> {
    if n <= 2 {
        return (0..n as u32).collect();
    }
    let (count, preds) = predecessors(n, stride, trans);
    let mut p = Partition::dead_rejecting_accepting(n, accept);
    let mut marked = vec![0usize; p.first.len()];
    let mut in_work = vec![true; p.first.len()];
    let mut work: Vec<usize> = (0..p.first.len()).collect();
    let mut splitter: Vec<u32> = Vec::new();
    let mut touched: Vec<usize> = Vec::new();
    while let Some(a) = work.pop() {
        in_work[a] = false;
        splitter.clear();
        splitter.extend_from_slice(&p.elems[p.first[a]..p.end[a]]);
        for c in 0..stride {
            for &t in &splitter {
                let k = c * n + t as usize;
                for &s in &preds[count[k] as usize..count[k + 1] as usize] {
                    p.mark(s, &mut marked, &mut touched);
                }
            }
            for b in touched.drain(..) {
                let m = std::mem::take(&mut marked[b]);
                if m == p.end[b] - p.first[b] {
                    continue;
                }
                let nb = p.split(b, m);
                marked.push(0);
                if in_work[b] {
                    in_work.push(true);
                    work.push(nb);
                } else {
                    let smaller = if p.len(nb) <= p.len(b) { nb } else { b };
                    in_work.push(false);
                    in_work[smaller] = true;
                    work.push(smaller);
                }
            }
        }
    }
    p.numbering()
}

/// Predecessors per (byte class, target state), in CSR form: those of `c * n + t` are
/// `preds[count[k]..count[k + 1]]`.
fn predecessors(n: usize, stride: usize, trans: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let mut count = vec![0u32; stride * n + 1];
    for s in 0..n {
        for c in 0..stride {
            count[c * n + trans[s * stride + c] as usize + 1] += 1;
        }
    }
    for i in 1..count.len() {
        count[i] += count[i - 1];
    }
    let mut fill = count.clone();
    let mut preds = vec![0u32; stride * n];
    for s in 0..n {
        for c in 0..stride {
            let k = c * n + trans[s * stride + c] as usize;
            preds[fill[k] as usize] = s as u32;
            fill[k] += 1;
        }
    }
    (count, preds)
}

/// The blocks of [`minimize`]'s refinement: each is a range `first..end` of `elems`; `pos`
/// finds a state in `elems`, `block_of` its block.
struct Partition {
    elems: Vec<u32>,
    pos: Vec<usize>,
    block_of: Vec<u32>,
    first: Vec<usize>,
    end: Vec<usize>,
}

impl Partition {
    /// The dead state alone, the live rejecting states, the accepting states (empty
    /// blocks left out).
    fn dead_rejecting_accepting(n: usize, accept: &[bool]) -> Partition {
        let mut elems: Vec<u32> = Vec::with_capacity(n);
        elems.push(0);
        elems.extend((1..n as u32).filter(|&s| !accept[s as usize]));
        let non_acc_end = elems.len();
        elems.extend((1..n as u32).filter(|&s| accept[s as usize]));
        let mut p = Partition {
            pos: vec![0; n],
            block_of: vec![0; n],
            first: vec![0],
            end: vec![1],
            elems,
        };
        if non_acc_end > 1 {
            p.first.push(1);
            p.end.push(non_acc_end);
        }
        if non_acc_end < n {
            p.first.push(non_acc_end);
            p.end.push(n);
        }
        for (i, &s) in p.elems.iter().enumerate() {
            p.pos[s as usize] = i;
        }
        for b in 0..p.first.len() {
            for i in p.first[b]..p.end[b] {
                p.block_of[p.elems[i] as usize] = b as u32;
            }
        }
        p
    }

    fn len(&self, b: usize) -> usize {
        self.end[b] - self.first[b]
    }

    /// Marks `s` in its block (moved to the block's marked front), noting blocks marked
    /// for the first time in `touched`.
    fn mark(&mut self, s: u32, marked: &mut [usize], touched: &mut Vec<usize>) {
        let b = self.block_of[s as usize] as usize;
        let slot = self.first[b] + marked[b];
        if self.pos[s as usize] < slot {
            return; // already marked
        }
        if marked[b] == 0 {
            touched.push(b);
        }
        let other = self.elems[slot];
        let ps = self.pos[s as usize];
        self.elems.swap(slot, ps);
        self.pos[other as usize] = ps;
        self.pos[s as usize] = slot;
        marked[b] += 1;
    }

    /// Splits block `b`'s first `m` (marked) states into a new block; returns its index.
    fn split(&mut self, b: usize, m: usize) -> usize {
        let nb = self.first.len();
        self.first.push(self.first[b]);
        self.end.push(self.first[b] + m);
        self.first[b] += m;
        for i in self.first[nb]..self.end[nb] {
            self.block_of[self.elems[i] as usize] = nb as u32;
        }
        nb
    }

    /// Each state's block number: dead first, then the blocks by their least state.
    fn numbering(&self) -> Vec<u32> {
        let mut number = vec![u32::MAX; self.first.len()];
        number[self.block_of[0] as usize] = 0;
        let mut next = 1u32;
        let mut out = vec![0u32; self.block_of.len()];
        for (s, o) in out.iter_mut().enumerate() {
            let b = self.block_of[s] as usize;
            if number[b] == u32::MAX {
                number[b] = next;
                next += 1;
            }
            *o = number[b];
        }
        out
    }
}

fn size_error(message: String, limit: usize) -> ErrorKind {
    if message.contains("exceeds") || message.contains("limit") {
        ErrorKind::Limit {
            what: "a lexeme's automaton".into(),
            value: limit + 1,
            limit_name: "max_lexeme_bytes",
            limit,
        }
    } else {
        ErrorKind::Lexeme(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex_syntax::ParserBuilder;

    /// The DFA of regex `re` (also the product tests').
    pub(super) fn dfa(re: &str) -> LexemeDfa {
        dfa_within(re, 1 << 24)
    }

    /// The DFA of regex `re`, its size bounded by `limit` bytes.
    pub(super) fn dfa_within(re: &str, limit: usize) -> LexemeDfa {
        let hir = ParserBuilder::new().build().parse(re).unwrap();
        LexemeDfa::build(&hir, limit).unwrap()
    }

    #[test]
    fn accepts_without_delay_and_dies_early() {
        let d = dfa(r#""[^"\\]*""#);
        let mut s = d.start();
        for &b in b"\"ab" {
            s = d.next(s, b);
            assert_ne!(s, DEAD);
            assert!(!d.is_accepting(s));
        }
        s = d.next(s, b'"');
        assert!(d.is_accepting(s));
        assert!(!d.can_continue(s));
        assert_eq!(d.next(s, b'x'), DEAD);
    }

    #[test]
    fn utf8_multibyte_one_byte_at_a_time() {
        let d = dfa("[é😀]+");
        assert!(d.matches("é😀é".as_bytes()));
        let bytes = "😀".as_bytes();
        let mut s = d.start();
        for &b in &bytes[..3] {
            s = d.next(s, b);
            assert_ne!(s, DEAD);
            assert!(!d.is_accepting(s), "mid-character is not a match");
        }
        assert!(d.is_accepting(d.next(s, bytes[3])));
        assert!(!d.matches(b"\xff"), "invalid UTF-8 is rejected");
        assert!(!d.matches(&bytes[..2]));
    }

    #[test]
    fn states_that_cannot_match_are_dead() {
        let d = dfa("ab|ac");
        let s = d.next(d.start(), b'a');
        assert_ne!(s, DEAD);
        assert_eq!(d.next(s, b'x'), DEAD);
        assert!(d.matches(b"ac"));
        let never = LexemeDfa::build(&Hir::fail(), 1 << 20).unwrap();
        assert_eq!(never.start(), DEAD);
    }
}
