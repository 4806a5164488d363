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
    /// Most DFA states (from the size limit).
    pub max_states: usize,
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
        let coreach = coreachable(&nfa);
        let mut s = Subsets {
            classes,
            stride,
            coreach,
            sets: vec![Box::from([])],
            index: FxHashMap::default(),
            max_states: (size_limit / (4 * stride.max(1))).max(2),
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
        if self.sets.len() >= self.max_states {
            return Err(Overflow);
        }
        let t = self.sets.len() as u32;
        let set: Box<[u32]> = Box::from(self.set.as_slice());
        self.sets.push(set.clone());
        self.index.insert(set, t);
        Ok(t)
    }
}

/// The NFA states from which `Match` is reachable.
fn coreachable(nfa: &NFA) -> Vec<bool> {
    let states = nfa.states();
    let n = states.len();
    let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut edge = |from: usize, to: StateID| preds[to.as_usize()].push(from as u32);
    for (i, s) in states.iter().enumerate() {
        match s {
            State::ByteRange { trans } => edge(i, trans.next),
            State::Sparse(sp) => sp.transitions.iter().for_each(|t| edge(i, t.next)),
            State::Dense(d) => d
                .transitions
                .iter()
                .filter(|&&t| t != StateID::ZERO)
                .for_each(|&t| edge(i, t)),
            State::Union { alternates } => alternates.iter().for_each(|&t| edge(i, t)),
            State::BinaryUnion { alt1, alt2 } => {
                edge(i, *alt1);
                edge(i, *alt2);
            }
            State::Capture { next, .. } | State::Look { next, .. } => edge(i, *next),
            State::Fail | State::Match { .. } => {}
        }
    }
    let mut live = vec![false; n];
    let mut stack: Vec<usize> = (0..n)
        .filter(|&i| matches!(states[i], State::Match { .. }))
        .collect();
    stack.iter().for_each(|&i| live[i] = true);
    while let Some(t) = stack.pop() {
        for &p in &preds[t] {
            if !live[p as usize] {
                live[p as usize] = true;
                stack.push(p as usize);
            }
        }
    }
    live
}
