//! Lexemes: the regular pieces of a grammar, each compiled to a byte-level DFA.
//!
//! A lexeme's regex is compiled with `regex-automata` into a Thompson NFA, which our own
//! subset construction turns into [`LexemeDfa`], a small table with three properties the
//! recognizer and the mask cache rely on:
//!
//! - state [`DEAD`] is 0, and every other state is *live*: some continuation reaches a match
//!   (states that cannot are merged into `DEAD` when the table is built);
//! - `s.is_accepting()` says whether the bytes read so far form a complete match, without the
//!   one-byte match delay of regex-automata's DFAs;
//! - `s.can_continue()` says whether any byte leads to a live state.
//!
//! Both flags are carried in the state id itself (two high bits), so stepping a run and
//! testing it is one table load ([`StateId`]). [`StateId::index`] strips them: indices are dense
//! (`0..len`), stable and shared by every user of the grammar, so they can key caches (the
//! engine caches a token set per `(lexeme, state)`).

mod build;
mod compose;
mod key;
mod minimize;
mod product;
mod shortest;
mod state;
mod subset;
mod table;

pub use key::regex_key;
use minimize::*;
use state::INDEX;
pub use state::StateId;
use table::*;

use crate::error::ErrorKind;
use regex_syntax::hir::Hir;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

/// The dead state: nothing more can match ([`StateId::DEAD`]).
pub const DEAD: StateId = StateId::DEAD;

/// A lexeme's DFA over bytes. Input must be UTF-8; invalid UTF-8 leads to [`DEAD`].
#[derive(Clone, Debug)]
pub struct LexemeDfa {
    classes: [u8; 256],
    stride: usize,
    /// Tagged ids (index | flags) by state and class. Composed and lazily built DFAs start
    /// with entries not computed and compute each on first use ([`Fill`]): filling is
    /// idempotent, so concurrent fills of one entry agree.
    trans: Table,
    /// Number of states (fixed unless built lazily).
    len: usize,
    /// `first[b / 64] >> (b % 64) & 1`: byte `b` can start a match.
    first: [u64; 4],
    start: StateId,
    fill: Fill,
    /// Per state index: the fewest bytes to an accepting state and the first of them
    /// (built DFAs; computed on first use).
    shortest: OnceLock<(Vec<u32>, Vec<u8>)>,
    /// 0 where state indices follow from the regex alone (built and composed DFAs: equal
    /// regexes, equal numbering); a number of this DFA's own where they follow the order
    /// states were first reached (lazy subset construction).
    numbering: u64,
    /// The language is known to be finite (its regex bounds the length of a match).
    finite: bool,
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

/// A counted run of single ASCII bytes from a state ([`LexemeDfa::byte_run`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRun {
    /// The run's bytes: bit `b` for byte `b`.
    pub bytes: u128,
    /// How many more of them the lexeme takes.
    pub room: u32,
    /// How many it needs before any other byte.
    pub needed: u32,
}

/// What is left of a lexeme from a state of a composed DFA ([`LexemeDfa::residual`]): the
/// segments from the state's own on, named by their keys, and the state's local index in
/// the first of them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Residual {
    /// The keys of the segments, each with its kind and length.
    pub segments: std::sync::Arc<str>,
    /// The state's index within its segment.
    pub local: u32,
}

impl LexemeDfa {
    /// How this DFA numbers its states: 0 if the numbering follows from its regex alone,
    /// so that per-state data keyed by (regex, state) is valid for every DFA of that regex;
    /// otherwise a number no other DFA has (states numbered in the order they were first
    /// reached), to be part of such keys.
    pub fn numbering(&self) -> u64 {
        self.numbering
    }

    /// The DFA of `a` combined with `b` (GBNF's `a & b` and `a & ~b`, corral's extension):
    /// the product construction over pairs of states, byte classes refined to pairs of
    /// classes, each state built the first time a transition reaches it (`product`).
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
        let mut index: FxHashMap<(StateId, StateId), u32> = FxHashMap::default();
        let mut pairs = vec![(DEAD, DEAD)];
        let mut accept = vec![false];
        let mut intern = |sa: StateId, sb: StateId, pairs: &mut Vec<(StateId, StateId)>| -> u32 {
            if sa == DEAD || (how == Combine::Both && sb == DEAD) {
                return 0;
            }
            *index.entry((sa, sb)).or_insert_with(|| {
                pairs.push((sa, sb));
                accept.push(match how {
                    Combine::Both => sa.is_accepting() && sb.is_accepting(),
                    Combine::FirstNotSecond => sa.is_accepting() && !sb.is_accepting(),
                });
                (pairs.len() - 1) as u32
            })
        };
        let start = intern(a.start, b.start, &mut pairs);
        let mut trans: Vec<u32> = vec![0; stride];
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
            finite: true,
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
    pub fn start(&self) -> StateId {
        self.start
    }

    /// A state that behaves as `state` does on every byte string of at most `depth` bytes:
    /// the same place in a counted repetition at the lowest count that does (counts far
    /// from both bounds are alike; see the composed DFA's segments), or `state` itself.
    /// Token sets computed for it hold for `state` when `depth` is the longest token.
    pub fn representative(&self, state: StateId, depth: usize) -> StateId {
        match &self.fill {
            Fill::Composed(c) => {
                let depth = u32::try_from(depth).unwrap_or(u32::MAX);
                c.representative(state.index32(), depth)
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
    pub fn recount(&self, t: StateId, from: StateId, to: StateId) -> StateId {
        match &self.fill {
            Fill::Composed(c) => c.tag(c.recount(t.index32(), from.index32(), to.index32())),
            _ => t,
        }
    }

    /// Where `state` of a composed DFA starts a counted run of single ASCII bytes that the
    /// lexeme cannot end in (`[ \t\n\r]{0,32}` before a key): the run's bytes as a set
    /// (bit `b` for byte `b`), how many more it takes, and how many it still needs before
    /// another byte may follow. Each of its bytes leads to the same next state.
    pub fn byte_run(&self, state: StateId) -> Option<ByteRun> {
        match &self.fill {
            Fill::Composed(c) => c
                .byte_run(state.index32())
                .map(|(bytes, room, needed)| ByteRun {
                    bytes,
                    room,
                    needed,
                }),
            _ => None,
        }
    }

    /// The state `k` counts before `state` in the counted run of single bytes `state`
    /// starts ([`LexemeDfa::byte_run`]), where that count has reached the run's lower
    /// bound; `None` elsewhere (and for `k` 0; the caller checks that `state` starts a
    /// byte run, which this does not repeat). Every byte that is not the run's leads
    /// from both to the same state, so a token leaves the run alike from both once it has
    /// room in each: the tokens of `state` are those of the earlier count whose leading
    /// run bytes fit in `state`'s room.
    pub fn run_back(&self, state: StateId, k: u32) -> Option<StateId> {
        match &self.fill {
            Fill::Composed(c) => c.run_back(state.index32(), k).map(|g| c.tag(g)),
            _ => None,
        }
    }

    /// What is left of the lexeme from `state` of a composed DFA, and where in this DFA's
    /// numbering it starts: from states with equal residuals (of this DFA or another)
    /// bytes lead alike, to states whose indices differ by the difference of their
    /// offsets (see [`LexemeDfa::counterpart`]). `None` for other DFAs, for the dead
    /// state, and for a state where nothing more can be read.
    pub fn residual(&self, state: StateId) -> Option<(Residual, u32)> {
        match &self.fill {
            Fill::Composed(c) => c
                .residual(state.index32())
                .map(|(segments, local, offset)| (Residual { segments, local }, offset)),
            _ => None,
        }
    }

    /// The state of this DFA that stands where `t` stands in another DFA (or this one),
    /// where `t` was reached from a state with the same residual as a state of this DFA,
    /// and their residuals' offsets ([`LexemeDfa::residual`]) were `from` there and `to`
    /// here. [`DEAD`] stays dead.
    pub fn counterpart(&self, t: StateId, from: u32, to: u32) -> StateId {
        if t.is_dead() {
            return t;
        }
        let index = t.index32() as i64 + to as i64 - from as i64;
        debug_assert!((1..self.len as i64).contains(&index), "a state of this DFA");
        StateId::new(index as u32, t.is_accepting(), t.can_continue())
    }

    /// Where this DFA is `a & ~b` and `state` is a pair in which `b` has died: `a` and its
    /// state there, which from then on matches exactly what `state` does (the plain body of
    /// a key that is no longer spelling one of the schema's names). What is computed for
    /// `a`'s state serves every such product over the same `a`, once its end states are
    /// found again in the product.
    pub fn first_alone(&self, state: StateId) -> Option<(&std::sync::Arc<LexemeDfa>, StateId)> {
        match &self.fill {
            Fill::Product(p) if state != DEAD => p.first_alone(state.index32()),
            _ => None,
        }
    }

    /// Where this DFA is `a & ~b` with `b`'s language finite: `a` and its state in `state`.
    /// From such a pair, a character on which `a`'s state loops (live, not accepting)
    /// leads the product to a live pair that does not accept either: `a` matches
    /// infinitely many strings from there, `b` finitely many. So a key that must not be one
    /// of a schema's names stays in its body wherever the plain string's body does, found
    /// without building the product's states.
    pub fn first_over_finite(
        &self,
        state: StateId,
    ) -> Option<(&std::sync::Arc<LexemeDfa>, StateId)> {
        match &self.fill {
            Fill::Product(p) if state != DEAD => p.first_over_finite(state.index32()),
            _ => None,
        }
    }

    /// The bytes that lead `state` to a live state (bit `b` of word `b / 64` for byte `b`).
    pub fn live_bytes(&self, state: StateId) -> [u64; 4] {
        let mut out = [0u64; 4];
        if state == DEAD {
            return out;
        }
        for b in 0..=255u8 {
            if self.next(state, b) != DEAD {
                out[b as usize / 64] |= 1 << (b % 64);
            }
        }
        out
    }

    /// The class of `byte`: bytes of one class lead every state to the same place.
    #[inline]
    pub fn class_of(&self, byte: u8) -> u8 {
        self.classes[byte as usize]
    }

    /// The state after reading `byte` in `state` (not [`DEAD`]).
    #[inline]
    pub fn next(&self, state: StateId, byte: u8) -> StateId {
        let class = self.classes[byte as usize] as usize;
        self.entry(state.index(), class)
    }

    /// The state after reading `byte` in the state of index `index`.
    #[inline]
    pub(super) fn next_from_index(&self, index: u32, byte: u8) -> StateId {
        self.entry(index as usize, self.classes[byte as usize] as usize)
    }

    /// The entry for state index `s` and class `c` (computed if missing).
    #[inline]
    fn entry(&self, s: usize, c: usize) -> StateId {
        match self.trans.get(s, c) {
            Some(t) => t,
            None => self.fill(s as u32, c),
        }
    }

    /// Computes a missing entry (of a composed or lazily built DFA).
    #[cold]
    fn fill(&self, index: u32, class: usize) -> StateId {
        match &self.fill {
            Fill::Composed(c) => {
                let t = c.next(index, class);
                self.trans.set(index as usize, class, t);
                t
            }
            Fill::Subset(lazy) => {
                let mut sub = lock(&lazy.subsets);
                // Another thread may have filled the row meanwhile.
                if let Some(t) = self.trans.get(index as usize, class) {
                    return t;
                }
                let mut row = vec![0; self.stride];
                if sub.row(index, &mut row).is_err() {
                    lazy.overflow.store(true, Relaxed);
                    note_failure();
                    return DEAD;
                }
                let tag = |i: u32| {
                    if i == 0 {
                        DEAD
                    } else {
                        StateId::new(i, sub.accepting(i), sub.continues(i))
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

    /// Whether `byte` can start a match (a live transition from the start state).
    #[inline]
    pub fn can_start_with(&self, byte: u8) -> bool {
        self.first[byte as usize / 64] >> (byte % 64) & 1 != 0
    }

    /// The bytes that can start a match, as a 256-bit set.
    pub fn first_bytes(&self) -> [u64; 4] {
        self.first
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

    /// Runs `bytes` from `state`; [`DEAD`] as soon as the DFA dies.
    pub fn run(&self, mut state: StateId, bytes: &[u8]) -> StateId {
        for &b in bytes {
            if state.is_dead() {
                break;
            }
            state = self.next(state, b);
        }
        state
    }

    /// The tagged id of each state index (0: dead), of a built or composed DFA.
    pub(crate) fn tags(&self) -> Vec<StateId> {
        if let Fill::Composed(c) = &self.fill {
            return (0..self.len as u32).map(|i| c.tag(i)).collect();
        }
        let mut tag = vec![DEAD; self.len];
        tag[self.start.index()] = self.start;
        for s in 0..self.len {
            for c in 0..self.stride {
                let t = self.trans.get(s, c).unwrap_or(DEAD);
                tag[t.index()] = t;
            }
        }
        tag
    }

    /// Whether `bytes` is a complete match.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        self.run(self.start, bytes).is_accepting()
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
            assert!(!s.is_accepting());
        }
        s = d.next(s, b'"');
        assert!(s.is_accepting());
        assert!(!s.can_continue());
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
            assert!(!s.is_accepting(), "mid-character is not a match");
        }
        assert!(d.next(s, bytes[3]).is_accepting());
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
