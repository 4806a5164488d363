//! The Earley recognizer over lexemes, driven one byte at a time.
//!
//! # Why a byte-level interface
//! The token-trie walk (engine crate) asks, for every trie node, "can this byte come next?",
//! and undoes the answer when it leaves the node. So the recognizer's interface is the
//! narrowest one that walk needs: [`Recognizer::push_byte`], [`Recognizer::pop`],
//! [`Recognizer::is_accepting`]. It knows nothing of tokens except that a grammar may name
//! one ([`Recognizer::push_token`]).
//!
//! # How it works
//! Two layers, in the spirit of llguidance and XGrammar's lexer/parser split:
//! - *Lexer runs.* A [`Run`] is a lexeme being matched: the Earley set it started at, the
//!   lexeme and its DFA state. Pushing a byte steps every run; runs whose DFA dies are
//!   dropped. A run whose DFA accepts *completes* its lexeme, and (GBNF is scannerless) also
//!   stays alive if the DFA can continue, so both "the lexeme ends here" and "it goes on"
//!   are kept.
//! - *Earley sets.* A set is built only where a lexeme completes (not at every byte): the
//!   items of the start set waiting for the lexeme move over it, then the set is closed under
//!   prediction and completion, and one new run starts for every lexeme the set expects.
//!
//! Steps of one push:
//! 1. step every run of the current frame by the byte, keeping the live ones;
//! 2. collect the completions (runs whose DFA accepts);
//! 3. if any, build an Earley set from them (scan, predict, complete, Leo items) and start
//!    runs for the lexemes it expects;
//! 4. if nothing survived, the byte is rejected and nothing changes; otherwise the new runs
//!    (and set, if any) form a new frame on the stack.
//!
//! Frames are a stack, so [`Recognizer::pop`] is a truncation: rollback of tokens and the
//! trie walk's backtracking use the same mechanism.
//!
//! # Earley details
//! - Items are `(dot, origin)`. Items predicted in a set have the set itself as origin and
//!   store it as [`Origin::SELF`]; they come from per-rule prediction closures computed at compile
//!   time, so prediction is a copy, with no worklist. A set's contents therefore do not
//!   depend on its own index: when "lexeme L completed from set j" happens again (the same
//!   run accepting at the next byte, `{` then `{ ` then `{  `; or the trie walk meeting the
//!   same completion under many tokens), the new set shares the items of the first one
//!   instead of recomputing them (a small direct-mapped cache keyed by `(j, L)`).
//! - Nullable rules: Aycock-Horspool. Predicting a nullable symbol also moves over it, so a
//!   completion whose origin is the current set never needs to look at the current set.
//! - Right recursion: Leo items. In a set where exactly one item waits for `B` and `B` is the
//!   last symbol of its production, the completion of `B` jumps straight to the topmost
//!   item of the chain, so long right-recursive lists cost O(1) per element, not O(n).
//!   Repetitions the front end desugars (`x*`) are left-recursive and need no Leo item.
//!
//! # Glossary
//! Earley *set* = a chart row (one per position where a lexeme ends, not per byte); *item*
//! = dotted production + origin set; *run* = a partial lexeme (a lexer run); *frame* = the
//! state after one push, the unit of rollback. All of corral's terms: docs/glossary.md.

use crate::compiled::{AfterDot, DotId, Grammar, LexemeId, RuleId, Sym, TokenRefId};
use crate::error::RecognizeError;
use crate::lexeme::{DEAD, StateId};
use rustc_hash::FxHashSet;
use std::sync::Arc;

mod build;
mod collect;
mod completion;
mod push;
#[cfg(test)]
mod tests;

/// The index of an Earley set in the chart: the sets of the bytes read so far, the first
/// one's index 0. Indices are reused after a pop (see [`Recognizer::set_uid`] for a number
/// that is not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SetIdx(u32);

impl SetIdx {
    /// The first set, before any byte.
    pub const FIRST: SetIdx = SetIdx(0);

    /// The set at position `i` of the chart.
    #[inline]
    pub(crate) fn new(i: usize) -> SetIdx {
        debug_assert!(i < u32::MAX as usize, "a set index");
        SetIdx(i as u32)
    }

    /// The position in the chart.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Where an item (or a Leo item) started: an Earley set's index, or [`Origin::SELF`] for
/// the set that holds it (see the module docs: a set's contents then do not depend on its
/// own index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin(u32);

impl Origin {
    /// The set that holds the item: items predicted there.
    pub const SELF: Origin = Origin(u32::MAX);

    /// The set at index `set`.
    #[inline]
    pub fn at(set: SetIdx) -> Origin {
        Origin(set.0)
    }

    /// The set's index, or `None` for [`Origin::SELF`].
    #[inline]
    pub fn set(self) -> Option<SetIdx> {
        (self != Origin::SELF).then_some(SetIdx(self.0))
    }

    /// The set's index, for an item held by the set at index `holder`.
    #[inline]
    pub fn in_set(self, holder: SetIdx) -> SetIdx {
        self.set().unwrap_or(holder)
    }
}

/// The lexeme of a run that stands for all lexemes its set expects (see [`Run`]).
const PENDING: LexemeId = LexemeId(u32::MAX);

/// An Earley item: a dotted production and the set where it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Item {
    /// The dotted production.
    pub dot: DotId,
    /// The Earley set where the item started.
    pub origin: Origin,
}

/// A lexeme being matched: started at Earley set `set`, DFA now in `state` (never `DEAD`).
///
/// Internally a run whose lexeme is `PENDING` stands for all the lexemes its set expects,
/// at their start states: most of them die at the first byte, so they are expanded only
/// for bytes that can start one of them. [`Recognizer::runs`] shows them expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    /// Index of the Earley set where the lexeme started (indices are reused after a pop).
    pub set: SetIdx,
    /// The lexeme being matched.
    pub lexeme: LexemeId,
    /// Its DFA state.
    pub state: StateId,
}

impl Run {
    /// The run that stands for all the lexemes set `set` expects (see [`Run`]).
    fn pending(set: SetIdx) -> Run {
        Run {
            set,
            lexeme: PENDING,
            state: DEAD,
        }
    }
}

/// A Leo item: completing `sym` with this set as origin adds the complete item
/// `(dot, origin)` directly.
#[derive(Clone, Copy, Debug)]
struct Leo {
    sym: RuleId,
    dot: DotId,
    origin: Origin,
}

#[derive(Clone, Copy, Debug)]
struct SetInfo {
    /// Ranges into the arenas; a set may share another set's ranges (see module docs).
    items: (u32, u32),
    leo: (u32, u32),
    lexemes: (u32, u32),
    /// Names the set's contents over the recognizer's life (indices are reused after a pop;
    /// uids are not): a set that shares an earlier one's items (the share cache) takes its
    /// uid, as everything after the two goes alike; any other set gets a new one.
    uid: u64,
    /// Bytes that can start one of `lexemes` (256-bit set).
    first: [u64; 4],
    /// Byte position where the set was built.
    pos: u64,
    accepting: bool,
    /// Some item waits for a token reference.
    tokens: bool,
    /// The ranges were built for this set (false: shared with an earlier set).
    owns: bool,
    /// For a set built from one lexeme completion: (uid of the start set, lexeme). Keys the
    /// share cache; `(u64::MAX, _)` otherwise.
    source: (u64, LexemeId),
}

/// The state after one push. Lengths are those after the push.
#[derive(Clone, Copy, Debug)]
struct Frame {
    /// This frame's runs are `runs[runs_start..next frame's runs_start]`.
    runs_start: u32,
    sets_len: u32,
    items_len: u32,
    leo_len: u32,
    set_lex_len: u32,
    /// This push built an Earley set (the last one).
    new_set: bool,
    /// Bytes consumed so far.
    pos: u64,
}

/// A slot of the share cache: the set built from completing `lexeme` started at the set
/// with uid `from_uid` is `set` (valid while that set's uid is still `set_uid`).
#[derive(Clone, Copy, Debug, Default)]
struct ShareSlot {
    from_uid: u64,
    lexeme: u32,
    set: SetIdx,
    set_uid: u64,
}

const SHARE_SLOTS: usize = 1024;

/// Per-set scratch space, reused (stamps avoid clearing).
#[derive(Debug, Default)]
struct Scratch {
    stamp: u32,
    dot_stamp: Vec<u32>,
    rule_stamp: Vec<u32>,
    lex_stamp: Vec<u32>,
    count_stamp: Vec<u32>,
    count: Vec<u32>,
    last: Vec<u32>,
    /// Concrete items of the set being built, for dedup: a list while small, then a hash set.
    concrete_list: Vec<(u32, SetIdx)>,
    concrete: FxHashSet<(u32, SetIdx)>,
    lexemes: Vec<LexemeId>,
    events: Vec<(SetIdx, LexemeId)>,
    /// The chart's tables from before the last collection of sets, emptied: the next
    /// collection writes into them, so that collections reuse memory instead of growing
    /// fresh tables (measured: a fifth of one-pass matching went to page faults).
    spare: (Vec<SetInfo>, Vec<Item>, Vec<Leo>, Vec<LexemeId>),
}

/// What the recognizer expects next (for messages and inspection).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    /// A lexeme, possibly partly matched already.
    Lexeme(LexemeId),
    /// A token reference.
    Token(TokenRefId),
}

/// The byte-level Earley recognizer. See the module docs.
#[derive(Clone, Debug)]
pub struct Recognizer {
    g: Arc<Grammar>,
    c: Chart,
}

/// The recognizer's state, apart from the grammar (kept apart so that the grammar can be
/// borrowed while the state changes).
#[derive(Debug)]
struct Chart {
    sets: Vec<SetInfo>,
    items: Vec<Item>,
    leo: Vec<Leo>,
    set_lex: Vec<LexemeId>,
    runs: Vec<Run>,
    frames: Vec<Frame>,
    keep_history: bool,
    /// Without history: the set count at which unreachable sets are next collected.
    collect_at: usize,
    next_uid: u64,
    share: Box<[ShareSlot]>,
    s: Scratch,
}

/// Sets kept before the first collection of unreachable sets (without history).
const FIRST_COLLECTION: usize = 4096;

impl Clone for Chart {
    fn clone(&self) -> Chart {
        Chart {
            sets: self.sets.clone(),
            items: self.items.clone(),
            leo: self.leo.clone(),
            set_lex: self.set_lex.clone(),
            runs: self.runs.clone(),
            frames: self.frames.clone(),
            keep_history: self.keep_history,
            collect_at: self.collect_at,
            next_uid: self.next_uid,
            share: self.share.clone(),
            s: Scratch::default(),
        }
    }
}

impl Recognizer {
    /// A recognizer at the start of the input.
    pub fn new(g: Arc<Grammar>) -> Recognizer {
        let c = Chart {
            sets: Vec::new(),
            items: Vec::new(),
            leo: Vec::new(),
            set_lex: Vec::new(),
            runs: Vec::new(),
            frames: Vec::new(),
            keep_history: true,
            collect_at: FIRST_COLLECTION,
            next_uid: 0,
            share: vec![ShareSlot::default(); SHARE_SLOTS].into_boxed_slice(),
            s: Scratch::default(),
        };
        let mut r = Recognizer { g, c };
        r.c.init(&r.g);
        r
    }

    /// Back to the start of the input (keeps allocations).
    pub fn reset(&mut self) {
        self.c.sets.clear();
        self.c.items.clear();
        self.c.leo.clear();
        self.c.set_lex.clear();
        self.c.runs.clear();
        self.c.frames.clear();
        self.c.collect_at = FIRST_COLLECTION;
        self.c
            .share
            .iter_mut()
            .for_each(|s| *s = ShareSlot::default());
        self.c.init(&self.g);
    }

    /// The grammar.
    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.g
    }

    /// With `false`, pushes forget the previous frame (no [`Recognizer::pop`]), so memory
    /// grows only with the Earley sets: for one-pass matching of large inputs.
    pub fn set_keep_history(&mut self, keep: bool) {
        self.c.keep_history = keep;
        if !keep {
            self.c.forget_history();
        }
    }

    /// Bytes consumed.
    pub fn position(&self) -> u64 {
        self.c.frames.last().expect("at least one frame").pos
    }

    /// Number of frames that [`Recognizer::pop`] can undo.
    pub fn depth(&self) -> usize {
        self.c.frames.len() - 1
    }

    /// Whether the input so far is a complete sentence of the grammar.
    pub fn is_accepting(&self) -> bool {
        let top = self.c.frames.last().expect("at least one frame");
        top.new_set && self.c.sets[top.sets_len as usize - 1].accepting
    }

    /// The lexer runs alive now (partial lexemes, and lexemes expected from here at their
    /// start states).
    pub fn runs(&self) -> Vec<Run> {
        let mut out = Vec::new();
        self.runs_into(&mut out);
        out
    }

    /// A set of bytes that holds every byte [`Recognizer::push_byte`] would take now (bit
    /// `b` of word `b / 64` for byte `b`): those some lexer run's DFA does not refuse.
    pub fn next_bytes(&self) -> [u64; 4] {
        let mut out = [0u64; 4];
        let top = self.c.frames.last().expect("at least one frame");
        for &r in &self.c.runs[top.runs_start as usize..] {
            let bytes = if r.lexeme == PENDING {
                self.c.sets[r.set.index()].first
            } else {
                self.g.lexemes[r.lexeme.0 as usize]
                    .dfa()
                    .live_bytes(r.state)
            };
            for (o, b) in out.iter_mut().zip(bytes) {
                *o |= b;
            }
        }
        out
    }

    /// [`Recognizer::runs`] into a reused buffer (cleared first).
    pub fn runs_into(&self, out: &mut Vec<Run>) {
        out.clear();
        let top = self.c.frames.last().expect("at least one frame");
        for &r in &self.c.runs[top.runs_start as usize..] {
            if r.lexeme == PENDING {
                let info = &self.c.sets[r.set.index()];
                for &l in &self.c.set_lex[info.lexemes.0 as usize..info.lexemes.1 as usize] {
                    out.push(Run {
                        set: r.set,
                        lexeme: l,
                        state: self.g.lexemes[l.0 as usize].dfa().start(),
                    });
                }
            } else {
                out.push(r);
            }
        }
    }

    /// A key that identifies everything the next byte's fate depends on: the current Earley
    /// set and every run (by start-set uid, lexeme and DFA state). Two states with equal
    /// keys accept exactly the same continuations, so a token mask computed for one holds
    /// for the other (inside a long string, token after token).
    pub fn state_key(&self, out: &mut Vec<u64>) {
        out.clear();
        let top = self.c.frames.last().expect("at least one frame");
        out.push(if top.new_set {
            self.c.sets[top.sets_len as usize - 1].uid
        } else {
            u64::MAX
        });
        for r in &self.c.runs[top.runs_start as usize..] {
            out.push(self.c.sets[r.set.index()].uid);
            out.push(u64::from(r.lexeme.0) << 32 | r.state.index() as u64);
        }
    }

    /// A number for Earley set `set` that no set with other contents gets (set indices are
    /// reused after a pop; these are not). Sets with equal numbers hold the same items over
    /// the same earlier sets, so whatever follows one follows the other: the same lexeme
    /// completed at one position of pretty-printed whitespace after another yields sets with
    /// one number, and what was found after the first serves the next.
    pub fn set_uid(&self, set: SetIdx) -> u64 {
        self.c.sets[set.index()].uid
    }

    /// The byte position where Earley set `set` was built (where a run from it started).
    pub fn set_position(&self, set: SetIdx) -> u64 {
        self.c.sets[set.index()].pos
    }

    /// The token references that can come next.
    pub fn expected_tokens(&self) -> Vec<TokenRefId> {
        let mut out = Vec::new();
        if let Some(set) = self.c.current_set() {
            let info = self.c.sets[set.index()];
            if info.tokens {
                for it in &self.c.items[info.items.0 as usize..info.items.1 as usize] {
                    if let AfterDot::Sym(Sym::Token(t)) = self.g.next(it.dot) {
                        out.push(t);
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// What can come next: lexemes (partial or not) and token references.
    pub fn expected(&self) -> Vec<Expected> {
        let mut lex: Vec<LexemeId> = self.runs().iter().map(|r| r.lexeme).collect();
        lex.sort_unstable();
        lex.dedup();
        let mut out: Vec<Expected> = lex.into_iter().map(Expected::Lexeme).collect();
        out.extend(self.expected_tokens().into_iter().map(Expected::Token));
        out
    }

    /// Undoes the last `n` pushes (frames); returns how many were undone (fewer when the
    /// history is shorter).
    pub fn pop(&mut self, n: usize) -> usize {
        let n = n.min(self.c.frames.len() - 1);
        if n == 0 {
            return 0;
        }
        let first_popped = self.c.frames[self.c.frames.len() - n];
        self.c.frames.truncate(self.c.frames.len() - n);
        self.c.runs.truncate(first_popped.runs_start as usize);
        let top = *self.c.frames.last().expect("at least one frame");
        self.c.drop_sets_after(top);
        n
    }
}

impl Chart {
    fn init(&mut self, g: &Grammar) {
        self.begin_set(g);
        let start = g.start_rule;
        let mut accepting = false;
        let mut tokens = false;
        self.predict(g, start, &mut tokens);
        for it in &self.items {
            accepting |= it.dot == g.accept_dot;
        }
        self.finish_set(g, 0, accepting, tokens, 0);
        self.frames.push(Frame {
            runs_start: 0,
            sets_len: 1,
            items_len: self.items.len() as u32,
            leo_len: self.leo.len() as u32,
            set_lex_len: self.set_lex.len() as u32,
            new_set: true,
            pos: 0,
        });
    }

    /// The Earley set ending at the current position, if a lexeme ended here.
    fn current_set(&self) -> Option<SetIdx> {
        let top = self.frames.last().expect("at least one frame");
        top.new_set.then(|| SetIdx::new(top.sets_len as usize - 1))
    }
}

impl Recognizer {
    /// Counts for debugging and benchmarks: sets, items, Leo items, frames.
    pub fn debug_stats(&self) -> String {
        format!(
            "{} sets, {} items ({:.1}/set), {} leo, {} frames",
            self.c.sets.len(),
            self.c.items.len(),
            self.c.items.len() as f64 / self.c.sets.len().max(1) as f64,
            self.c.leo.len(),
            self.c.frames.len()
        )
    }
}

impl Recognizer {
    /// Earley items held (all sets): a measure of work and memory for tests and benches.
    pub fn item_count(&self) -> usize {
        self.c.items.len()
    }
}
