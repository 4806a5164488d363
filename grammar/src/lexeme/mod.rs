//! Lexemes: the regular pieces of a grammar, each compiled to a byte-level DFA.
//!
//! A lexeme's regex is compiled with `regex-automata` into a Thompson NFA, which our own
//! subset construction turns into [`LexemeDfa`], a small table with three properties the recognizer and the mask cache rely on:
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

use crate::error::ErrorKind;
use regex_automata::nfa::thompson::{self, State};
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::Hir;
use rustc_hash::FxHashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// The dead state: nothing more can match.
pub const DEAD: u32 = 0;

const ACCEPT: u32 = 1 << 31;
const CONTINUE: u32 = 1 << 30;
const INDEX: u32 = CONTINUE - 1;
/// A table entry a composed DFA has not computed yet (no state has this id).
const UNKNOWN: u32 = u32::MAX;

/// A transition table of tagged ids, stored complemented so that zeroed memory (a fresh
/// allocation the system has not even backed yet) reads as [`UNKNOWN`].
#[derive(Debug)]
struct Table(Box<[AtomicU32]>);

impl Table {
    /// `n` entries, all unknown.
    fn unknown(n: usize) -> Table {
        let zeroed: Box<[u32]> = vec![0u32; n].into_boxed_slice();
        // SAFETY: `AtomicU32` has the same size, alignment and bit validity as `u32`, so a
        // boxed slice of one is a boxed slice of the other.
        Table(unsafe { Box::from_raw(Box::into_raw(zeroed) as *mut [AtomicU32]) })
    }

    fn from_ids(ids: Vec<u32>) -> Table {
        Table(ids.into_iter().map(|t| AtomicU32::new(!t)).collect())
    }

    #[inline]
    fn get(&self, i: usize) -> u32 {
        !self.0[i].load(Relaxed)
    }

    #[inline]
    fn set(&self, i: usize, t: u32) {
        self.0[i].store(!t, Relaxed)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().map(|t| !t.load(Relaxed))
    }
}

impl Clone for Table {
    fn clone(&self) -> Table {
        Table(
            self.0
                .iter()
                .map(|t| AtomicU32::new(t.load(Relaxed)))
                .collect(),
        )
    }
}

/// A lexeme's DFA over bytes. Input must be UTF-8; invalid UTF-8 leads to [`DEAD`].
#[derive(Debug)]
pub struct LexemeDfa {
    classes: [u8; 256],
    stride: usize,
    /// `trans[index * stride + class]`: tagged ids (index | flags). A composed DFA
    /// ([`compose`]) starts with every entry [`UNKNOWN`] and computes each on first use,
    /// from its segments: filling is idempotent, so concurrent fills of one entry agree.
    trans: Table,
    len: usize,
    /// `first[b / 64] >> (b % 64) & 1`: byte `b` can start a match.
    first: [u64; 4],
    start: u32,
    /// A composed DFA's segments, which compute its entries.
    composed: Option<Box<compose::Composed>>,
    /// Per state index: the fewest bytes to an accepting state and the first of them
    /// (table-built DFAs; computed on first use).
    shortest: OnceLock<(Vec<u32>, Vec<u8>)>,
}

impl Clone for LexemeDfa {
    fn clone(&self) -> LexemeDfa {
        LexemeDfa {
            classes: self.classes,
            stride: self.stride,
            trans: self.trans.clone(),
            len: self.len,
            first: self.first,
            start: self.start,
            composed: self.composed.clone(),
            shortest: self.shortest.clone(),
        }
    }
}

impl LexemeDfa {
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
            None => Self::build_tables(hir, size_limit),
        }
    }

    /// [`LexemeDfa::build`] by subset construction and minimization, never composed.
    pub(crate) fn build_tables(hir: &Hir, size_limit: usize) -> Result<LexemeDfa, ErrorKind> {
        // One compiler per thread: it keeps its UTF-8 tables (tens of KiB) between builds.
        thread_local! {
            static COMPILER: std::cell::RefCell<(usize, thompson::Compiler)> =
                std::cell::RefCell::new((0, thompson::Compiler::new()));
        }
        let nfa = COMPILER
            .with(|c| {
                let mut c = c.borrow_mut();
                if c.0 != size_limit {
                    c.1.configure(
                        thompson::Config::new()
                            .nfa_size_limit(Some(size_limit))
                            .shrink(false)
                            .which_captures(thompson::WhichCaptures::None),
                    );
                    c.0 = size_limit;
                }
                c.1.build_from_hir(hir)
            })
            .map_err(|e| size_error(e.to_string(), size_limit))?;
        let mut classes = [0u8; 256];
        let mut reps = Vec::new(); // one representative byte per class
        for b in 0..=255u8 {
            let c = nfa.byte_classes().get(b);
            classes[b as usize] = c;
            if c as usize == reps.len() {
                reps.push(b);
            }
        }
        let stride = reps.len();
        let states = nfa.states();
        let mut stamp = vec![0u32; states.len()];
        let mut round = 0u32;
        let mut stack = Vec::new();
        // Epsilon closure of `seeds` into a sorted set of byte-consuming and match states.
        let mut closure = |seeds: &mut Vec<StateID>, out: &mut Vec<u32>| {
            round += 1;
            out.clear();
            stack.clear();
            stack.append(seeds);
            while let Some(id) = stack.pop() {
                let i = id.as_usize();
                if stamp[i] == round {
                    continue;
                }
                stamp[i] = round;
                match &states[i] {
                    State::ByteRange { .. }
                    | State::Sparse(_)
                    | State::Dense(_)
                    | State::Match { .. } => out.push(i as u32),
                    State::Union { alternates } => stack.extend(alternates.iter().rev().copied()),
                    State::BinaryUnion { alt1, alt2 } => {
                        stack.push(*alt2);
                        stack.push(*alt1);
                    }
                    State::Capture { next, .. } => stack.push(*next),
                    // Lexemes have no look-around; a look state matches nothing here.
                    State::Look { .. } | State::Fail => {}
                }
            }
            out.sort_unstable();
        };
        let mut index: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        let mut sets: Vec<Vec<u32>> = vec![Vec::new()]; // index 0: dead (empty set)
        index.insert(Vec::new(), DEAD);
        let mut trans: Vec<u32> = vec![DEAD; stride];
        let mut set = Vec::new();
        closure(&mut vec![nfa.start_anchored()], &mut set);
        let start_ix = *index.entry(set.clone()).or_insert_with(|| {
            sets.push(set.clone());
            (sets.len() - 1) as u32
        });
        let mut single = vec![u32::MAX; states.len()];
        // Per state, NFA transitions are dropped into per-class buckets (byte classes are
        // contiguous and ordered, so a byte range covers a range of classes); classes with
        // an empty bucket lead to DEAD without further work.
        let mut buckets: Vec<Vec<StateID>> = vec![Vec::new(); stride];
        let mut i = 1;
        while i < sets.len() {
            for &s in &sets[i] {
                let mut add = |start: u8, end: u8, next: StateID| {
                    for c in classes[start as usize]..=classes[end as usize] {
                        buckets[c as usize].push(next);
                    }
                };
                match &states[s as usize] {
                    State::ByteRange { trans } => add(trans.start, trans.end, trans.next),
                    State::Sparse(sp) => sp
                        .transitions
                        .iter()
                        .for_each(|t| add(t.start, t.end, t.next)),
                    State::Dense(d) => {
                        for (b, &next) in d.transitions.iter().enumerate() {
                            if next != StateID::ZERO {
                                add(b as u8, b as u8, next);
                            }
                        }
                    }
                    _ => {}
                }
            }
            for bucket in buckets.iter_mut() {
                // Most classes lead nowhere; and a single target state's closure is cached.
                let t = match bucket.as_slice() {
                    [] => DEAD,
                    &[one] if single[one.as_usize()] != u32::MAX => {
                        bucket.clear();
                        single[one.as_usize()]
                    }
                    _ => {
                        let one = (bucket.len() == 1).then(|| bucket[0].as_usize());
                        closure(bucket, &mut set);
                        let t = match index.get(&set) {
                            Some(&t) => t,
                            None => {
                                let t = sets.len() as u32;
                                sets.push(set.clone());
                                index.insert(std::mem::take(&mut set), t);
                                t
                            }
                        };
                        if let Some(one) = one {
                            single[one] = t;
                        }
                        t
                    }
                };
                trans.push(t);
            }
            if trans.len() * 4 > size_limit {
                return Err(size_error("limit".into(), size_limit));
            }
            i += 1;
        }
        let accept: Vec<bool> = sets
            .iter()
            .map(|set| {
                set.iter()
                    .any(|&s| matches!(states[s as usize], State::Match { .. }))
            })
            .collect();
        Ok(Self::from_tables(
            classes, stride, trans, accept, start_ix, true,
        ))
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
        // Live = can reach an accepting state: reverse reachability over predecessor lists
        // in CSR form (state t's predecessors are `preds[first[t]..first[t + 1]]`).
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
        let mut live = accept.clone();
        let mut stack: Vec<usize> = (0..n).filter(|&s| accept[s]).collect();
        while let Some(t) = stack.pop() {
            for &p in &preds[first[t] as usize..first[t + 1] as usize] {
                if !live[p as usize] {
                    live[p as usize] = true;
                    stack.push(p as usize);
                }
            }
        }
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
            trans: Table::from_ids(new_trans),
            len: kept,
            first,
            start,
            composed: None,
            shortest: OnceLock::new(),
        }
    }

    /// The DFA of `a` combined with `b` (GBNF's `a & b` and `a & ~b`, corral's extension):
    /// the product construction over pairs of states, byte classes refined to pairs of
    /// classes, then the same pruning and minimization as [`LexemeDfa::build`].
    /// `size_limit` bounds the table's bytes.
    pub fn product(
        a: &LexemeDfa,
        b: &LexemeDfa,
        how: Combine,
        size_limit: usize,
    ) -> Result<LexemeDfa, ErrorKind> {
        let mut classes = [0u8; 256];
        let mut class_of: FxHashMap<(u8, u8), u8> = FxHashMap::default();
        let mut reps = Vec::new(); // one representative byte per class
        for byte in 0..=255u8 {
            let pair = (a.classes[byte as usize], b.classes[byte as usize]);
            let next = class_of.len() as u8;
            classes[byte as usize] = *class_of.entry(pair).or_insert_with(|| {
                reps.push(byte);
                next
            });
        }
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
            classes, stride, trans, accept, start, true,
        ))
    }

    /// The start state; [`DEAD`] if the lexeme matches nothing.
    #[inline]
    pub fn start(&self) -> u32 {
        self.start
    }

    /// The state after reading `byte` in `state` (not [`DEAD`]).
    #[inline]
    pub fn next(&self, state: u32, byte: u8) -> u32 {
        let class = self.classes[byte as usize] as usize;
        let t = self
            .trans
            .get((state & INDEX) as usize * self.stride + class);
        if t != UNKNOWN {
            return t;
        }
        self.fill(state & INDEX, class)
    }

    /// Computes a composed DFA's missing entry.
    #[cold]
    fn fill(&self, index: u32, class: usize) -> u32 {
        let c = self
            .composed
            .as_ref()
            .expect("only composed DFAs have unknown entries");
        let t = c.next(index, class);
        self.trans.set(index as usize * self.stride + class, t);
        t
    }

    /// The entry for state index `s` and class `c` (computed if missing).
    fn entry(&self, s: usize, c: usize) -> u32 {
        let t = self.trans.get(s * self.stride + c);
        if t != UNKNOWN {
            return t;
        }
        self.fill(s as u32, c)
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

    /// Number of states, [`DEAD`] included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: the dead state is always there.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Heap bytes of the tables (allocated: a composed DFA's untouched entries are counted).
    pub fn memory_usage(&self) -> usize {
        self.trans.len() * 4
    }

    /// The fewest bytes from `state` to an accepting state, and the first of them (the most
    /// readable where several are shortest); `None` if no accepting state is reachable.
    pub fn shortest(&self, state: u32) -> Option<(u32, u8)> {
        if state == DEAD {
            return None;
        }
        if let Some(c) = &self.composed {
            return c.shortest(state & INDEX);
        }
        let (dist, byte) = self.shortest.get_or_init(|| self.shortest_suffixes());
        let i = (state & INDEX) as usize;
        (dist[i] != u32::MAX).then(|| (dist[i], byte[i]))
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

    /// For every state (by [`LexemeDfa::index`]): the fewest bytes that lead from it to an
    /// accepting state (`u32::MAX` if none; 0 for accepting states), and the first of them.
    /// A breadth-first search backwards from the accepting states (over the whole table).
    fn shortest_suffixes(&self) -> (Vec<u32>, Vec<u8>) {
        let n = self.len;
        // Tagged id of each state index, to read its flags.
        let tag = self.tags();
        // One byte per class, the most readable: a lower-case letter, then a digit, an
        // upper-case letter, a space, other printable ASCII, anything.
        let rank = |b: u8| match b {
            b'a'..=b'z' => 0,
            b'0'..=b'9' => 1,
            b'A'..=b'Z' => 2,
            b' ' => 3,
            0x21..=0x7e => 4,
            _ => 5,
        };
        let mut reps = vec![0u8; self.stride];
        let mut best = vec![u8::MAX; self.stride];
        for b in 0..=255u8 {
            let c = self.classes[b as usize] as usize;
            if rank(b) < best[c] {
                best[c] = rank(b);
                reps[c] = b;
            }
        }
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

    /// Classes of states that no string of at most `depth` bytes tells apart (the same
    /// strings of that length lead to accepting, and to dead, states from each): by state
    /// index, dense class numbers. Moore's refinement cut off after `depth` rounds. Token
    /// masks from two states of a class are the same for tokens of at most `depth` bytes,
    /// so the engine caches per class: a counted lexeme (`[^"]{0,500}`) has one class for
    /// all counts far enough from the bound.
    pub fn bounded_classes(&self, depth: usize) -> Vec<u32> {
        let n = self.len;
        let tag = self.tags();
        // Round 0: dead, live non-accepting, accepting.
        let mut class: Vec<u32> = (0..n)
            .map(|s| match s {
                0 => 0,
                _ if self.is_accepting(tag[s]) => 2,
                _ => 1,
            })
            .collect();
        // Start from the number of round-0 classes actually present: when every live
        // state accepts there are two, and starting from three would stop the refinement
        // after its first split (`[ \t\n]{0,32}` would put every count in one class).
        let mut count = {
            let mut seen = [false; 3];
            class.iter().for_each(|&c| seen[c as usize] = true);
            seen.iter().filter(|&&s| s).count()
        };
        let mut index: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        let mut sig = Vec::with_capacity(self.stride + 1);
        for _ in 0..depth {
            index.clear();
            let mut next = vec![0u32; n];
            for s in 0..n {
                sig.clear();
                sig.push(class[s]);
                for c in 0..self.stride {
                    sig.push(class[(self.entry(s, c) & INDEX) as usize]);
                }
                let k = index.len() as u32;
                next[s] = *index.entry(sig.clone()).or_insert(k);
            }
            let new_count = index.len();
            class = next;
            if new_count == count {
                break;
            }
            count = new_count;
        }
        class
    }

    /// The tagged id of each state index (0: dead). Computes every entry of a composed DFA.
    pub(crate) fn tags(&self) -> Vec<u32> {
        if let Some(c) = &self.composed {
            return (0..self.len as u32).map(|i| c.tag(i)).collect();
        }
        let mut tag = vec![DEAD; self.len];
        tag[(self.start & INDEX) as usize] = self.start;
        for t in self.trans.iter() {
            tag[(t & INDEX) as usize] = t;
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

/// Hopcroft's partition refinement over a DFA whose states `1..n` are live and state 0 is
/// dead: the merged state of each state, numbered with 0 for dead and the rest in order of
/// their first member (so the start state's number is stable when it is state 1).
fn minimize(n: usize, stride: usize, trans: &[u32], accept: &[bool]) -> Vec<u32> {
    if n <= 2 {
        return (0..n as u32).collect();
    }
    // Predecessors per (class, target), in CSR form.
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
    // Blocks are ranges of `elems`; `pos` finds a state in it.
    let mut elems: Vec<u32> = Vec::with_capacity(n);
    elems.push(0); // dead alone
    elems.extend((1..n as u32).filter(|&s| !accept[s as usize]));
    let non_acc_end = elems.len();
    elems.extend((1..n as u32).filter(|&s| accept[s as usize]));
    let mut block_of = vec![0u32; n];
    let mut first: Vec<usize> = vec![0, 1];
    let mut end: Vec<usize> = vec![1, non_acc_end];
    if non_acc_end < n {
        first.push(non_acc_end);
        end.push(n);
    }
    let mut pos = vec![0usize; n];
    for (i, &s) in elems.iter().enumerate() {
        pos[s as usize] = i;
    }
    for b in 0..first.len() {
        for i in first[b]..end[b] {
            block_of[elems[i] as usize] = b as u32;
        }
    }
    // Drop an empty non-accepting block.
    if first[1] == end[1] {
        first.remove(1);
        end.remove(1);
        for b in block_of.iter_mut() {
            if *b > 1 {
                *b -= 1;
            }
        }
    }
    let mut marked = vec![0usize; first.len()];
    let mut in_work = vec![true; first.len()];
    let mut work: Vec<usize> = (0..first.len()).collect();
    let mut splitter: Vec<u32> = Vec::new();
    let mut touched: Vec<usize> = Vec::new();
    while let Some(a) = work.pop() {
        in_work[a] = false;
        splitter.clear();
        splitter.extend_from_slice(&elems[first[a]..end[a]]);
        for c in 0..stride {
            for &t in &splitter {
                let k = c * n + t as usize;
                for &s in &preds[count[k] as usize..count[k + 1] as usize] {
                    let b = block_of[s as usize] as usize;
                    let slot = first[b] + marked[b];
                    if pos[s as usize] < slot {
                        continue; // already marked
                    }
                    if marked[b] == 0 {
                        touched.push(b);
                    }
                    // Swap s to the marked front of its block.
                    let other = elems[slot];
                    let ps = pos[s as usize];
                    elems.swap(slot, ps);
                    pos[other as usize] = ps;
                    pos[s as usize] = slot;
                    marked[b] += 1;
                }
            }
            for b in touched.drain(..) {
                let m = marked[b];
                marked[b] = 0;
                if m == end[b] - first[b] {
                    continue;
                }
                let nb = first.len();
                first.push(first[b]);
                end.push(first[b] + m);
                marked.push(0);
                first[b] += m;
                for i in first[nb]..end[nb] {
                    block_of[elems[i] as usize] = nb as u32;
                }
                if in_work[b] {
                    in_work.push(true);
                    work.push(nb);
                } else {
                    let smaller = if end[nb] - first[nb] <= end[b] - first[b] {
                        nb
                    } else {
                        b
                    };
                    in_work.push(false);
                    in_work[smaller] = true;
                    work.push(smaller);
                }
            }
        }
    }
    // Number the blocks: dead first, then by their least state.
    let mut number = vec![u32::MAX; first.len()];
    number[block_of[0] as usize] = 0;
    let mut next = 1u32;
    let mut out = vec![0u32; n];
    for s in 0..n {
        let b = block_of[s] as usize;
        if number[b] == u32::MAX {
            number[b] = next;
            next += 1;
        }
        out[s] = number[b];
    }
    out
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

    fn dfa(re: &str) -> LexemeDfa {
        let hir = ParserBuilder::new().build().parse(re).unwrap();
        LexemeDfa::build(&hir, 1 << 24).unwrap()
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
