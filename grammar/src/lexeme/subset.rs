//! Subset construction, one DFA state at a time.
//!
//! regex-automata compiles a lexeme's Thompson NFA (UTF-8 automata for Unicode classes);
//! the construction of DFA states from sets of NFA states is ours. [`Subsets`] builds the
//! row of one DFA state on demand: the eager build ([`super::LexemeDfa::build_tables`])
//! asks for every row, breadth first; a lazily built DFA asks only for the rows the
//! recognizer and the mask computation reach.
//!
//! NFA states that cannot reach a match are left out of every set, so a non-empty set is a
//! live state (some continuation matches) and the empty set is [`super::DEAD`]. Sets hold
//! the byte-consuming and match states of an epsilon closure, sorted.
//!
//! The size limit bounds everything the construction holds: each state's table row and
//! its set (kept twice, in the list and in the index). A DFA's shortest match from a state
//! is read off the NFA (each NFA state's distance to a match, computed once), so finding
//! it builds no states beyond those on the path.

use super::size_error;
use crate::error::ErrorKind;
use regex_automata::nfa::thompson::{self, NFA, State};
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::Hir;
use rustc_hash::FxHashMap;

/// DFA states under construction. See the module docs.
#[derive(Clone, Debug)]
pub(super) struct Subsets {
    nfa: NFA,
    pub classes: [u8; 256],
    pub stride: usize,
    /// NFA states from which a match is reachable.
    coreach: Vec<bool>,
    /// DFA state index -> its NFA states; 0 is dead (the empty set).
    sets: Vec<Box<[u32]>>,
    index: FxHashMap<Box<[u32]>, u32>,
    /// Per NFA state: the fewest bytes from it to a match (`u32::MAX`: none).
    nfa_dist: Vec<u32>,
    /// Per DFA state index: the fewest bytes from it to a match (the least of its set's).
    dist: Vec<u32>,
    /// Heap bytes held, estimated: rows, sets, index entries (see [`Subsets::memory_usage`]).
    bytes: usize,
    /// Most bytes (the size limit).
    max_bytes: usize,
    // Scratch space, reused.
    stamp: Vec<u32>,
    round: u32,
    stack: Vec<StateID>,
    /// The closure of a single NFA state's target, when already interned.
    single: Vec<u32>,
    buckets: Vec<Vec<StateID>>,
    set: Vec<u32>,
}

/// A DFA needs more states than its size limit allows.
#[derive(Clone, Copy, Debug)]
pub(super) struct Overflow;

impl Subsets {
    /// The NFA of `hir`, ready to build states; `size_limit` bounds the NFA and the table.
    pub fn new(hir: &Hir, size_limit: usize) -> Result<Subsets, ErrorKind> {
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
        let mut stride = 0;
        for b in 0..=255u8 {
            let c = nfa.byte_classes().get(b);
            classes[b as usize] = c;
            stride = stride.max(c as usize + 1);
        }
        let n = nfa.states().len();
        let nfa_dist = distances_to_match(&nfa);
        let coreach = nfa_dist.iter().map(|&d| d != u32::MAX).collect();
        let mut s = Subsets {
            classes,
            stride,
            coreach,
            sets: vec![Box::from([])],
            index: FxHashMap::default(),
            nfa_dist,
            dist: vec![u32::MAX],
            bytes: 0,
            max_bytes: size_limit,
            stamp: vec![0; n],
            round: 0,
            stack: Vec::new(),
            single: vec![u32::MAX; n],
            buckets: vec![Vec::new(); stride],
            set: Vec::new(),
            nfa,
        };
        s.index.insert(Box::from([]), 0);
        Ok(s)
    }

    /// Number of DFA states so far (the dead one included).
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// Heap bytes of the construction, estimated: per state, its table row (4 bytes per
    /// class), its set twice (the list and the index's key) and their headers.
    pub fn memory_usage(&self) -> usize {
        self.bytes
    }

    /// The fewest bytes from DFA state `i` to a match (`None`: no match is reachable).
    pub fn distance(&self, i: u32) -> Option<u32> {
        let d = self.dist[i as usize];
        (d != u32::MAX).then_some(d)
    }

    /// The start state's index (0 if the lexeme matches nothing).
    pub fn start(&mut self) -> Result<u32, Overflow> {
        let mut seeds = vec![self.nfa.start_anchored()];
        self.closure(&mut seeds);
        self.intern()
    }

    /// Whether DFA state `i` is a complete match.
    pub fn accepting(&self, i: u32) -> bool {
        let states = self.nfa.states();
        self.sets[i as usize]
            .iter()
            .any(|&s| matches!(states[s as usize], State::Match { .. }))
    }

    /// Whether some byte leads from DFA state `i` to a live state.
    pub fn continues(&self, i: u32) -> bool {
        let states = self.nfa.states();
        self.sets[i as usize]
            .iter()
            .any(|&s| !matches!(states[s as usize], State::Match { .. }))
    }

    /// The targets (state indices) of DFA state `i`, one per byte class, into `row`.
    pub fn row(&mut self, i: u32, row: &mut [u32]) -> Result<(), Overflow> {
        // The NFA transitions of the set, dropped into per-class buckets (byte classes are
        // contiguous and ordered, so a byte range covers a range of classes); classes with
        // an empty bucket lead to the dead state without further work.
        let states = self.nfa.states();
        for &s in self.sets[i as usize].iter() {
            let buckets = &mut self.buckets;
            let classes = &self.classes;
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
        for (c, slot) in row.iter_mut().enumerate().take(self.stride) {
            let mut bucket = std::mem::take(&mut self.buckets[c]);
            *slot = match bucket.as_slice() {
                [] => 0,
                // A single target state's closure is remembered.
                &[one] if self.single[one.as_usize()] != u32::MAX => self.single[one.as_usize()],
                _ => {
                    let one = (bucket.len() == 1).then(|| bucket[0].as_usize());
                    self.closure(&mut bucket);
                    let t = self.intern()?;
                    if let Some(one) = one {
                        self.single[one] = t;
                    }
                    t
                }
            };
            bucket.clear();
            self.buckets[c] = bucket;
        }
        Ok(())
    }

    /// Epsilon closure of `seeds` into `self.set`: the byte-consuming and match states that
    /// can reach a match, sorted.
    fn closure(&mut self, seeds: &mut Vec<StateID>) {
        self.round += 1;
        let round = self.round;
        let states = self.nfa.states();
        self.set.clear();
        self.stack.clear();
        self.stack.append(seeds);
        while let Some(id) = self.stack.pop() {
            let i = id.as_usize();
            if self.stamp[i] == round {
                continue;
            }
            self.stamp[i] = round;
            match &states[i] {
                State::ByteRange { .. }
                | State::Sparse(_)
                | State::Dense(_)
                | State::Match { .. } => {
                    if self.coreach[i] {
                        self.set.push(i as u32);
                    }
                }
                State::Union { alternates } => self.stack.extend(alternates.iter().rev().copied()),
                State::BinaryUnion { alt1, alt2 } => {
                    self.stack.push(*alt2);
                    self.stack.push(*alt1);
                }
                State::Capture { next, .. } => self.stack.push(*next),
                // Lexemes have no look-around; a look state matches nothing here.
                State::Look { .. } | State::Fail => {}
            }
        }
        self.set.sort_unstable();
    }

    /// The index of the set in `self.set`, new if need be.
    fn intern(&mut self) -> Result<u32, Overflow> {
        if let Some(&t) = self.index.get(self.set.as_slice()) {
            return Ok(t);
        }
        let cost = self.stride * 4 + 2 * (self.set.len() * 4 + STATE_OVERHEAD);
        if self.bytes + cost > self.max_bytes {
            return Err(Overflow);
        }
        self.bytes += cost;
        let t = self.sets.len() as u32;
        let set: Box<[u32]> = Box::from(self.set.as_slice());
        let dist = set.iter().map(|&s| self.nfa_dist[s as usize]).min();
        self.dist.push(dist.unwrap_or(u32::MAX));
        self.sets.push(set.clone());
        self.index.insert(set, t);
        Ok(t)
    }
}

/// Bytes a state's set costs besides its elements, each of its two copies: the box's
/// pointer and length, a hash-table slot with its index and control byte, and the
/// allocator's rounding (measured order of magnitude, not exact).
const STATE_OVERHEAD: usize = 32;

/// Per NFA state, the fewest bytes from it to `Match` (`u32::MAX`: none reachable): a
/// breadth-first search backwards from the match states, where epsilon transitions cost
/// nothing and byte transitions one (a deque, epsilon predecessors to the front).
fn distances_to_match(nfa: &NFA) -> Vec<u32> {
    let states = nfa.states();
    let n = states.len();
    // Edges (from, to, cost); then each state's predecessors, (from, cost), as one run of
    // a flat array (a vector per state costs more than the search on a large NFA).
    let mut edges: Vec<(u32, u32, u32)> = Vec::new();
    let mut edge =
        |from: usize, to: StateID, cost: u32| edges.push((from as u32, to.as_u32(), cost));
    for (i, s) in states.iter().enumerate() {
        match s {
            State::ByteRange { trans } => edge(i, trans.next, 1),
            State::Sparse(sp) => sp.transitions.iter().for_each(|t| edge(i, t.next, 1)),
            State::Dense(d) => d
                .transitions
                .iter()
                .filter(|&&t| t != StateID::ZERO)
                .for_each(|&t| edge(i, t, 1)),
            State::Union { alternates } => alternates.iter().for_each(|&t| edge(i, t, 0)),
            State::BinaryUnion { alt1, alt2 } => {
                edge(i, *alt1, 0);
                edge(i, *alt2, 0);
            }
            State::Capture { next, .. } => edge(i, *next, 0),
            // As in the closure: a look state matches nothing here.
            State::Look { .. } | State::Fail | State::Match { .. } => {}
        }
    }
    // `first[t]..first[t + 1]`: where state `t`'s predecessors are.
    let mut first = vec![0u32; n + 1];
    for &(_, to, _) in &edges {
        first[to as usize + 1] += 1;
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    let mut next = first.clone();
    let mut preds = vec![(0u32, 0u32); edges.len()];
    for &(from, to, cost) in &edges {
        let at = &mut next[to as usize];
        preds[*at as usize] = (from, cost);
        *at += 1;
    }
    let mut dist = vec![u32::MAX; n];
    let mut queue = std::collections::VecDeque::new();
    for (i, s) in states.iter().enumerate() {
        if matches!(s, State::Match { .. }) {
            dist[i] = 0;
            queue.push_back(i);
        }
    }
    while let Some(t) = queue.pop_front() {
        let d = dist[t];
        for &(p, cost) in &preds[first[t] as usize..first[t + 1] as usize] {
            let p = p as usize;
            if d + cost < dist[p] {
                dist[p] = d + cost;
                if cost == 0 {
                    queue.push_front(p);
                } else {
                    queue.push_back(p);
                }
            }
        }
    }
    dist
}
