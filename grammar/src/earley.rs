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
//!   store it as [`SELF`]; they come from per-rule prediction closures computed at compile
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

use crate::compiled::{DotId, Grammar, LexemeId, Next, RuleId, Sym, TokenRefId};
use crate::complete::{self, Completion};
use crate::error::RecognizeError;
use crate::lexeme::DEAD;
use rustc_hash::FxHashSet;
use std::sync::Arc;

/// Origin of an item predicted in the set that holds it.
pub const SELF: u32 = u32::MAX;

/// The lexeme of a run that stands for all lexemes its set expects (see [`Run`]).
const PENDING: LexemeId = LexemeId(u32::MAX);

/// An Earley item: a dotted production and the set where it started ([`SELF`] for the set
/// holding it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Item {
    pub dot: DotId,
    pub origin: u32,
}

/// A lexeme being matched: started at Earley set `set`, DFA now in `state` (never `DEAD`).
///
/// Internally a run whose lexeme is [`PENDING`] stands for all the lexemes its set expects,
/// at their start states: most of them die at the first byte, so they are expanded only
/// for bytes that can start one of them. [`Recognizer::runs`] shows them expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    pub set: u32,
    pub lexeme: LexemeId,
    pub state: u32,
}

/// A Leo item: completing `sym` with this set as origin adds the complete item
/// `(dot, origin)` directly.
#[derive(Clone, Copy, Debug)]
struct Leo {
    sym: RuleId,
    dot: DotId,
    origin: u32,
}

#[derive(Clone, Copy, Debug)]
struct SetInfo {
    /// Ranges into the arenas; a set may share another set's ranges (see module docs).
    items: (u32, u32),
    leo: (u32, u32),
    lexemes: (u32, u32),
    /// Unique over the recognizer's life (indices are reused after a pop; uids are not).
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
    set: u32,
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
    concrete_list: Vec<(u32, u32)>,
    concrete: FxHashSet<(u32, u32)>,
    lexemes: Vec<LexemeId>,
    events: Vec<(u32, LexemeId)>,
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

    /// [`Recognizer::runs`] into a reused buffer (cleared first).
    pub fn runs_into(&self, out: &mut Vec<Run>) {
        out.clear();
        let top = self.c.frames.last().expect("at least one frame");
        for &r in &self.c.runs[top.runs_start as usize..] {
            if r.lexeme == PENDING {
                let info = &self.c.sets[r.set as usize];
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
            out.push(self.c.sets[r.set as usize].uid);
            out.push(u64::from(r.lexeme.0) << 32 | u64::from(r.state));
        }
    }

    /// A number for Earley set `set` that no other set gets (set indices are reused after
    /// a pop; these are not).
    pub fn set_uid(&self, set: u32) -> u64 {
        self.c.sets[set as usize].uid
    }

    /// The byte position where Earley set `set` was built (where a run from it started).
    pub fn set_position(&self, set: u32) -> u64 {
        self.c.sets[set as usize].pos
    }

    /// The token references that can come next.
    pub fn expected_tokens(&self) -> Vec<TokenRefId> {
        let mut out = Vec::new();
        if let Some(set) = self.c.current_set() {
            let info = self.c.sets[set as usize];
            if info.tokens {
                for it in &self.c.items[info.items.0 as usize..info.items.1 as usize] {
                    if let Next::Sym(Sym::Token(t)) = self.g.next(it.dot) {
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

    /// Feeds one byte. `Ok(false)`: the byte cannot come next, and nothing changed.
    pub fn push_byte(&mut self, byte: u8) -> Result<bool, RecognizeError> {
        // Fast path (most bytes inside strings and numbers): a single run that neither dies
        // nor completes. A live state that does not accept can always continue. (Reads only
        // the field it needs: copying the whole frame right after the last push wrote one
        // field of it stalls on store forwarding.)
        let runs_start = self.c.frames.last().expect("at least one frame").runs_start;
        if runs_start as usize + 1 == self.c.runs.len() {
            let top = *self.c.frames.last().expect("at least one frame");
            let r = self.c.runs[top.runs_start as usize];
            if r.lexeme != PENDING {
                let dfa = &self.g.lexemes[r.lexeme.0 as usize].dfa();
                let s = dfa.next(r.state, byte);
                if s != DEAD && !dfa.is_accepting(s) {
                    if self.c.keep_history {
                        self.c.runs.push(Run { state: s, ..r });
                        self.c.frames.push(Frame {
                            runs_start: top.runs_start + 1,
                            new_set: false,
                            pos: top.pos + 1,
                            ..top
                        });
                    } else {
                        self.c.runs[top.runs_start as usize].state = s;
                        let f = self.c.frames.last_mut().expect("at least one frame");
                        f.new_set = false;
                        f.pos += 1;
                    }
                    return Ok(true);
                }
            }
        }
        let top = *self.c.frames.last().expect("at least one frame");
        let new_start = self.c.step_runs(&self.g, top, byte);
        self.c.finish_push(&self.g, top, new_start, 1, None, false)
    }

    /// Pushes the end of `run`'s lexeme, with the run itself going on in `end_state` (an
    /// accepting state of its DFA), and no other run: the state right after `run`'s lexeme
    /// ended at some byte. The mask computation uses it to continue a walk from where a
    /// cached lexeme ends, without replaying the bytes before. Counts as one frame of zero
    /// bytes.
    pub fn push_lexeme_end(&mut self, run: Run, end_state: u32) -> Result<bool, RecognizeError> {
        let top = *self.c.frames.last().expect("at least one frame");
        let new_start = self.c.runs.len();
        let dfa = &self.g.lexemes[run.lexeme.0 as usize].dfa();
        debug_assert!(dfa.is_accepting(end_state));
        if dfa.can_continue(end_state) {
            self.c.runs.push(Run {
                state: end_state,
                ..run
            });
        }
        self.c.s.events.clear();
        self.c.s.events.push((run.set, run.lexeme));
        self.c.finish_push(&self.g, top, new_start, 0, None, false)
    }

    /// Feeds one whole token: its bytes (empty for special tokens) go through the lexer as
    /// usual, and where the grammar expects a token reference at the current position,
    /// `matches(reference)` says whether this token satisfies it. Pushes
    /// `max(1, bytes.len())` frames, or none when the token is rejected (`Ok(false)`).
    pub fn push_token(
        &mut self,
        bytes: &[u8],
        matches: &dyn Fn(TokenRefId) -> bool,
    ) -> Result<bool, RecognizeError> {
        let unit_set = self
            .c
            .current_set()
            .filter(|&s| self.c.sets[s as usize].tokens);
        let Some(unit_set) = unit_set else {
            // A token without bytes (a special token) can only match a token reference.
            if bytes.is_empty() {
                return Ok(false);
            }
            return self.push_bytes_all_or_nothing(bytes);
        };
        // The byte branch may die inside the token while the token branch lives, so the
        // intermediate frames may be empty.
        let n = bytes.len();
        for (i, &b) in bytes.iter().enumerate() {
            let top = *self.c.frames.last().expect("at least one frame");
            let new_start = self.c.step_runs(&self.g, top, b);
            let last = i + 1 == n;
            let unit = last.then_some((unit_set, matches));
            match self.c.finish_push(&self.g, top, new_start, 1, unit, !last) {
                Ok(true) => {}
                Ok(false) => {
                    self.pop(i);
                    return Ok(false);
                }
                Err(e) => {
                    self.pop(i);
                    return Err(e);
                }
            }
        }
        if n == 0 {
            let top = *self.c.frames.last().expect("at least one frame");
            self.c.s.events.clear();
            let new_start = self.c.runs.len();
            return self.c.finish_push(
                &self.g,
                top,
                new_start,
                0,
                Some((unit_set, matches)),
                false,
            );
        }
        Ok(true)
    }

    /// The shortest completion of a sentence from here: text, and token references where
    /// the grammar names tokens. Empty if the input is complete already; `None` if nothing
    /// completes it (or the chart is nested deeper than this search follows). See
    /// [`crate::complete`].
    pub fn shortest_completion(&self) -> Option<Completion> {
        self.shortest_completion_within(u64::MAX).ok()
    }

    /// The length of the shortest completion in units (a byte each, a token each token
    /// reference), found without writing it out: what a budget check needs before asking for
    /// a completion that may be millions of bytes long. `None` if nothing completes it.
    pub fn shortest_completion_len(&self) -> Option<u64> {
        match self.shortest_completion_within(0) {
            Ok(c) => Some(c.units()),
            Err(len) => len,
        }
    }

    /// The shortest completion if it is at most `max` units long; else its length
    /// (`Err(Some(len))`), not written out, or `Err(None)` if nothing completes it.
    pub fn shortest_completion_within(&self, max: u64) -> Result<Completion, Option<u64>> {
        if self.is_accepting() {
            return Ok(Completion::default());
        }
        let sh = self.g.shortest();
        let mut search = CompletionSearch {
            rec: self,
            sh,
            memo: rustc_hash::FxHashMap::default(),
            active: FxHashSet::default(),
        };
        // Where to start: finish a live lexer run, or take a token the current set expects.
        let mut best: Option<(u64, Start)> = None;
        for run in self.runs() {
            let lex = sh.lexeme_len(&self.g, run.lexeme, run.state);
            if lex >= complete::INF {
                continue;
            }
            let (rest, _, _) = search.complete(run.set, Sym::Lexeme(run.lexeme), 0);
            let total = lex.saturating_add(rest);
            if total < complete::INF && best.is_none_or(|(b, _)| total < b) {
                best = Some((total, Start::Run(run)));
            }
        }
        if let Some(set) = self.c.current_set() {
            for t in self.expected_tokens() {
                let (rest, _, _) = search.complete(set, Sym::Token(t), 0);
                let total = rest.saturating_add(1);
                if total < complete::INF && best.is_none_or(|(b, _)| total < b) {
                    best = Some((total, Start::Token(set, t)));
                }
            }
        }
        let Some((len, start)) = best else {
            return Err(None);
        };
        if len > max {
            return Err(Some(len));
        }
        let mut out = Completion::default();
        let (mut set, mut sym) = match start {
            Start::Run(run) => {
                sh.lexeme_bytes(&self.g, run.lexeme, run.state, &mut out);
                (run.set, Sym::Lexeme(run.lexeme))
            }
            Start::Token(set, t) => {
                out.push_token(t);
                (set, Sym::Token(t))
            }
        };
        loop {
            let (_, _, step) = search.complete(set, sym, 0);
            match step.ok_or(None)? {
                Step::Accept => return Ok(out),
                Step::Item { after, origin } => {
                    sh.suffix_pieces(&self.g, after, &mut out);
                    if self.g.lhs(after) == self.g.start_rule && origin == 0 {
                        return Ok(out);
                    }
                    (set, sym) = (origin, Sym::Rule(self.g.lhs(after)));
                }
                Step::Leo { done, origin } => {
                    (set, sym) = (origin, Sym::Rule(self.g.lhs(done)));
                }
            }
        }
    }

    /// Pushes all of `bytes` or none of them.
    pub fn push_bytes_all_or_nothing(&mut self, bytes: &[u8]) -> Result<bool, RecognizeError> {
        for (i, &b) in bytes.iter().enumerate() {
            match self.push_byte(b) {
                Ok(true) => {}
                other => {
                    self.pop(i);
                    return other;
                }
            }
        }
        Ok(true)
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

/// How completing a symbol in a set goes on (the first step of its cheapest way up).
#[derive(Clone, Copy, Debug)]
enum Step {
    /// The sentence is complete.
    Accept,
    /// The item waiting for the symbol moves to `after`; its production's remaining
    /// symbols follow, then its left-hand side completes from `origin`.
    Item { after: DotId, origin: u32 },
    /// A Leo item: the complete item `done` (from `origin`) directly.
    Leo { done: DotId, origin: u32 },
}

/// Where a shortest completion starts: finishing a lexer run, or a token reference the
/// current set expects.
#[derive(Clone, Copy, Debug)]
enum Start {
    Run(Run),
    Token(u32, TokenRefId),
}

/// The search behind [`Recognizer::shortest_completion`]: the cheapest way to complete
/// `(set, symbol)` up to the start rule, memoized.
struct CompletionSearch<'a> {
    rec: &'a Recognizer,
    sh: &'a complete::Shortest,
    memo: rustc_hash::FxHashMap<(u32, Sym), (u64, Option<Step>)>,
    /// Pairs being computed (a cycle back to one costs more than going around it).
    active: FxHashSet<(u32, Sym)>,
}

impl CompletionSearch<'_> {
    /// Units (bytes and tokens) needed after `sym` completes in `set`, whether the result depends on a pair
    /// being computed (then it is not memoized), and the first step.
    fn complete(&mut self, set: u32, sym: Sym, depth: u32) -> (u64, bool, Option<Step>) {
        if let Some(&(cost, step)) = self.memo.get(&(set, sym)) {
            return (cost, false, step);
        }
        if depth > self.rec.g.limits.max_completion_depth || !self.active.insert((set, sym)) {
            return (complete::INF, true, None);
        }
        let g = &*self.rec.g;
        let c = &self.rec.c;
        let mut best = (complete::INF, None);
        let mut tainted = false;
        let leo = match sym {
            Sym::Rule(r) => c.leo_lookup(set, r),
            _ => None,
        };
        if let Some(l) = leo {
            let origin = if l.origin == SELF { set } else { l.origin };
            if l.dot == g.accept_dot && origin == 0 {
                best = (0, Some(Step::Accept));
            } else {
                let (cost, t, _) = self.complete(origin, Sym::Rule(g.lhs(l.dot)), depth + 1);
                tainted |= t;
                best = (
                    cost,
                    Some(Step::Leo {
                        done: l.dot,
                        origin,
                    }),
                );
            }
        } else {
            let (a, b) = c.sets[set as usize].items;
            for k in a..b {
                let it = c.items[k as usize];
                if g.next(it.dot) != Next::Sym(sym) {
                    continue;
                }
                let after = DotId(it.dot.0 + 1);
                let origin = if it.origin == SELF { set } else { it.origin };
                let suffix = self.sh.suffix_len(g, after);
                if suffix >= best.0 {
                    continue;
                }
                let lhs = g.lhs(after);
                let up = if lhs == g.start_rule && origin == 0 {
                    0
                } else {
                    let (cost, t, _) = self.complete(origin, Sym::Rule(lhs), depth + 1);
                    tainted |= t;
                    cost
                };
                let total = suffix.saturating_add(up).min(complete::INF);
                if total < best.0 {
                    best = (total, Some(Step::Item { after, origin }));
                }
            }
        }
        self.active.remove(&(set, sym));
        if !tainted {
            self.memo.insert((set, sym), best);
        }
        (best.0, tainted, best.1)
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

    /// Keeps only the top frame.
    fn forget_history(&mut self) {
        let top = *self.frames.last().expect("at least one frame");
        self.frames.clear();
        self.frames.push(top);
        self.compact_runs();
    }

    /// Without history, runs below the top frame are garbage; drop them in batches
    /// (amortized O(1) per push).
    fn compact_runs(&mut self) {
        let top = self.frames.last_mut().expect("at least one frame");
        let dead = top.runs_start as usize;
        if dead >= 4096 {
            self.runs.drain(..dead);
            top.runs_start = 0;
        }
    }

    /// The Earley set ending at the current position, if a lexeme ended here.
    fn current_set(&self) -> Option<u32> {
        let top = self.frames.last().expect("at least one frame");
        top.new_set.then_some(top.sets_len - 1)
    }

    /// Steps the runs of frame `top` by `byte`: survivors are appended to `self.runs` (from
    /// the returned index on), completions go to `self.s.events`.
    #[inline]
    fn step_runs(&mut self, g: &Grammar, top: Frame, byte: u8) -> usize {
        let start = top.runs_start as usize;
        let end = self.runs.len();
        self.s.events.clear();
        let step = |runs: &mut Vec<Run>, events: &mut Vec<(u32, LexemeId)>, r: Run| {
            let dfa = &g.lexemes[r.lexeme.0 as usize].dfa();
            let s = dfa.next(r.state, byte);
            if s == DEAD {
                return;
            }
            if dfa.is_accepting(s) {
                events.push((r.set, r.lexeme));
            }
            if dfa.can_continue(s) {
                runs.push(Run { state: s, ..r });
            }
        };
        for i in start..end {
            let r = self.runs[i];
            if r.lexeme == PENDING {
                let info = &self.sets[r.set as usize];
                if info.first[byte as usize / 64] >> (byte % 64) & 1 == 0 {
                    continue;
                }
                for k in info.lexemes.0..info.lexemes.1 {
                    let l = self.set_lex[k as usize];
                    let state = g.lexemes[l.0 as usize].dfa().start();
                    step(
                        &mut self.runs,
                        &mut self.s.events,
                        Run {
                            set: r.set,
                            lexeme: l,
                            state,
                        },
                    );
                }
            } else {
                step(&mut self.runs, &mut self.s.events, r);
            }
        }
        end
    }

    /// Ends a push whose stepped runs start at `new_start` and whose completions are in
    /// `self.s.events`.
    fn finish_push(
        &mut self,
        g: &Grammar,
        prev: Frame,
        new_start: usize,
        bytes: u64,
        unit: Option<(u32, &dyn Fn(TokenRefId) -> bool)>,
        allow_empty: bool,
    ) -> Result<bool, RecognizeError> {
        if self.s.events.is_empty()
            && unit.is_none()
            && self.runs.len() == new_start
            && !allow_empty
        {
            return Ok(false);
        }
        if !self.keep_history && unit.is_none() {
            self.drop_unreferenced_set(prev, new_start);
        }
        let built = if !self.s.events.is_empty() || unit.is_some() {
            match self.build_set(g, unit, prev.pos + bytes) {
                Ok(b) => b,
                Err(e) => {
                    self.runs.truncate(new_start);
                    return Err(e);
                }
            }
        } else {
            false
        };
        if !built && self.runs.len() == new_start && !allow_empty {
            return Ok(false);
        }
        if self.runs.len() - new_start > g.limits.max_lexer_runs {
            let value = self.runs.len() - new_start;
            self.runs.truncate(new_start);
            if built {
                self.drop_sets_after(prev);
            }
            return Err(RecognizeError::limit(
                "lexer runs alive at one position",
                value,
                "max_lexer_runs",
                g.limits.max_lexer_runs,
            ));
        }
        let frame = Frame {
            runs_start: new_start as u32,
            sets_len: self.sets.len() as u32,
            items_len: self.items.len() as u32,
            leo_len: self.leo.len() as u32,
            set_lex_len: self.set_lex.len() as u32,
            new_set: built,
            pos: prev.pos + bytes,
        };
        if self.keep_history {
            self.frames.push(frame);
        } else {
            *self.frames.last_mut().expect("at least one frame") = frame;
            self.compact_runs();
            if self.sets.len() >= self.collect_at {
                self.collect_sets(g);
                // What stays after a collection is the input's open structure: its depth.
                if self.sets.len() > g.limits.max_open_sets {
                    return Err(RecognizeError::limit(
                        "Earley sets kept open (the input's nesting)",
                        self.sets.len(),
                        "max_open_sets",
                        g.limits.max_open_sets,
                    ));
                }
            }
        }
        Ok(true)
    }

    /// Without history, a set is needed only while something can still reach it: a live
    /// run started there, or a waiting item (dot before a symbol) or Leo item of a needed
    /// set has it as origin; the current set and set 0 (acceptance) always. Complete items
    /// are read only while their set is built, so outside the current set they are dropped
    /// and their origins do not count. Drops the sets nothing needs and renumbers the rest
    /// in order, so memory follows the open structure of the input (the containers still
    /// open in a JSON document), not its length. Next collection at twice the sets kept:
    /// amortized O(1) per set built.
    fn collect_sets(&mut self, g: &Grammar) {
        let top = *self.frames.last().expect("at least one frame");
        let n = self.sets.len();
        let current = n - 1;
        let waiting = |it: &Item| matches!(g.next(it.dot), Next::Sym(_));
        let mut keep = vec![false; n];
        let mut stack: Vec<u32> = Vec::new();
        let mark = |s: u32, keep: &mut Vec<bool>, stack: &mut Vec<u32>| {
            if !keep[s as usize] {
                keep[s as usize] = true;
                stack.push(s);
            }
        };
        mark(0, &mut keep, &mut stack);
        mark(current as u32, &mut keep, &mut stack);
        for r in &self.runs[top.runs_start as usize..] {
            mark(r.set, &mut keep, &mut stack);
        }
        while let Some(s) = stack.pop() {
            let info = self.sets[s as usize];
            for it in &self.items[info.items.0 as usize..info.items.1 as usize] {
                if it.origin != SELF && (s as usize == current || waiting(it)) {
                    mark(it.origin, &mut keep, &mut stack);
                }
            }
            for k in info.leo.0..info.leo.1 {
                let o = self.leo[k as usize].origin;
                if o != SELF {
                    mark(o, &mut keep, &mut stack);
                }
            }
        }
        let mut renumber = vec![u32::MAX; n];
        let mut kept = 0u32;
        for (i, &k) in keep.iter().enumerate() {
            if k {
                renumber[i] = kept;
                kept += 1;
            }
        }
        let at = |o: u32| {
            if o == SELF {
                SELF
            } else {
                renumber[o as usize]
            }
        };
        let (mut sets, mut items, mut leo, mut set_lex) = std::mem::take(&mut self.s.spare);
        sets.clear();
        items.clear();
        leo.clear();
        set_lex.clear();
        for (i, info) in self.sets.iter().enumerate() {
            if !keep[i] {
                continue;
            }
            let mut info = *info;
            let start = items.len() as u32;
            items.extend(
                self.items[info.items.0 as usize..info.items.1 as usize]
                    .iter()
                    .filter(|it| i == current || waiting(it))
                    .map(|it| Item {
                        origin: at(it.origin),
                        ..*it
                    }),
            );
            info.items = (start, items.len() as u32);
            let start = leo.len() as u32;
            leo.extend(
                self.leo[info.leo.0 as usize..info.leo.1 as usize]
                    .iter()
                    .map(|l| Leo {
                        origin: at(l.origin),
                        ..*l
                    }),
            );
            info.leo = (start, leo.len() as u32);
            let start = set_lex.len() as u32;
            set_lex
                .extend_from_slice(&self.set_lex[info.lexemes.0 as usize..info.lexemes.1 as usize]);
            info.lexemes = (start, set_lex.len() as u32);
            info.owns = true;
            sets.push(info);
        }
        for r in &mut self.runs[top.runs_start as usize..] {
            r.set = renumber[r.set as usize];
        }
        let old_sets = std::mem::replace(&mut self.sets, sets);
        let old_items = std::mem::replace(&mut self.items, items);
        let old_leo = std::mem::replace(&mut self.leo, leo);
        let old_set_lex = std::mem::replace(&mut self.set_lex, set_lex);
        self.s.spare = (old_sets, old_items, old_leo, old_set_lex);
        // Slots name sets by index: all stale now.
        self.share
            .iter_mut()
            .for_each(|s| *s = ShareSlot::default());
        let f = self.frames.last_mut().expect("at least one frame");
        f.sets_len = self.sets.len() as u32;
        f.items_len = self.items.len() as u32;
        f.leo_len = self.leo.len() as u32;
        f.set_lex_len = self.set_lex.len() as u32;
        self.collect_at = (2 * self.sets.len()).max(FIRST_COLLECTION);
    }

    /// Without history, the set built by the previous push is dropped when nothing refers to
    /// it any more: no run started there survived and no lexeme from there just completed.
    /// (Pretty-printed JSON ends a lexeme at every indentation byte; this keeps memory
    /// proportional to the sets that matter.) Set 0 stays: acceptance refers to it.
    fn drop_unreferenced_set(&mut self, prev: Frame, new_start: usize) {
        if !prev.new_set || prev.sets_len < 2 || prev.sets_len as usize != self.sets.len() {
            return;
        }
        let last = prev.sets_len - 1;
        if self.s.events.iter().any(|&(j, _)| j == last)
            || self.runs[new_start..].iter().any(|r| r.set == last)
        {
            return;
        }
        if self.s.events.len() == 1 {
            // About to complete the same lexeme from the same set again: keep this set, the
            // new one will share its items.
            let (j, lex) = self.s.events[0];
            let info = &self.sets[last as usize];
            if info.owns && info.source == (self.sets[j as usize].uid, lex) {
                return;
            }
        }
        let info = self.sets.pop().expect("checked");
        if info.owns {
            self.items.truncate(info.items.0 as usize);
            self.leo.truncate(info.leo.0 as usize);
            self.set_lex.truncate(info.lexemes.0 as usize);
        }
    }

    /// Truncates the arenas to what `frame` had.
    fn drop_sets_after(&mut self, frame: Frame) {
        self.sets.truncate(frame.sets_len as usize);
        self.items.truncate(frame.items_len as usize);
        self.leo.truncate(frame.leo_len as usize);
        self.set_lex.truncate(frame.set_lex_len as usize);
    }

    fn begin_set(&mut self, g: &Grammar) {
        let s = &mut self.s;
        s.stamp = s.stamp.wrapping_add(1);
        if s.stamp == 0 {
            // Stamps wrapped: clear them once every 2^32 sets.
            s.dot_stamp.iter_mut().for_each(|x| *x = u32::MAX);
            s.rule_stamp.iter_mut().for_each(|x| *x = u32::MAX);
            s.lex_stamp.iter_mut().for_each(|x| *x = u32::MAX);
            s.count_stamp.iter_mut().for_each(|x| *x = u32::MAX);
            s.stamp = 1;
        }
        if s.dot_stamp.len() < g.dot_next.len() {
            s.dot_stamp.resize(g.dot_next.len(), u32::MAX);
        }
        if s.rule_stamp.len() < g.rule_names.len() {
            s.rule_stamp.resize(g.rule_names.len(), u32::MAX);
            s.count_stamp.resize(g.rule_names.len(), u32::MAX);
            s.count.resize(g.rule_names.len(), 0);
            s.last.resize(g.rule_names.len(), 0);
        }
        if s.lex_stamp.len() < g.lexemes.len() {
            s.lex_stamp.resize(g.lexemes.len(), u32::MAX);
        }
        s.concrete.clear();
        s.concrete_list.clear();
        s.lexemes.clear();
    }

    /// Adds the prediction closure of `rule` to the set being built.
    fn predict(&mut self, g: &Grammar, rule: RuleId, tokens: &mut bool) {
        let s = &mut self.s;
        if s.rule_stamp[rule.0 as usize] == s.stamp {
            return;
        }
        s.rule_stamp[rule.0 as usize] = s.stamp;
        let p = &g.predictions[rule.0 as usize];
        for &d in p.dots.iter() {
            if s.dot_stamp[d.0 as usize] != s.stamp {
                s.dot_stamp[d.0 as usize] = s.stamp;
                self.items.push(Item {
                    dot: d,
                    origin: SELF,
                });
            }
        }
        for &l in p.lexemes.iter() {
            if s.lex_stamp[l.0 as usize] != s.stamp {
                s.lex_stamp[l.0 as usize] = s.stamp;
                s.lexemes.push(l);
            }
        }
        *tokens |= p.tokens;
    }

    #[inline]
    fn add_concrete(&mut self, dot: DotId, origin: u32) {
        const SMALL: usize = 24;
        let key = (dot.0, origin);
        let s = &mut self.s;
        if s.concrete_list.len() < SMALL {
            if s.concrete_list.contains(&key) {
                return;
            }
            s.concrete_list.push(key);
            if s.concrete_list.len() == SMALL {
                s.concrete.extend(s.concrete_list.iter().copied());
            }
        } else if !s.concrete.insert(key) {
            return;
        }
        self.items.push(Item { dot, origin });
    }

    fn leo_lookup(&self, set: u32, sym: RuleId) -> Option<Leo> {
        let (a, b) = self.sets[set as usize].leo;
        let slice = &self.leo[a as usize..b as usize];
        slice
            .binary_search_by_key(&sym, |l| l.sym)
            .ok()
            .map(|i| slice[i])
    }

    /// Builds a new Earley set from the completions in `self.s.events` (and the token
    /// reference items of `unit`, if any). Returns false if nothing was scanned.
    fn build_set(
        &mut self,
        g: &Grammar,
        unit: Option<(u32, &dyn Fn(TokenRefId) -> bool)>,
        pos: u64,
    ) -> Result<bool, RecognizeError> {
        if unit.is_some() || self.s.events.len() != 1 {
            return self.build_set_uncached(g, unit, pos);
        }
        let (j, lex) = self.s.events[0];
        let from_uid = self.sets[j as usize].uid;
        let slot_ix = share_slot(from_uid, lex);
        let slot = self.share[slot_ix];
        if slot.from_uid == from_uid
            && slot.lexeme == lex.0
            && (slot.set as usize) < self.sets.len()
            && self.sets[slot.set as usize].uid == slot.set_uid
        {
            // Same completion as an earlier set that is still alive: share its contents.
            let src = self.sets[slot.set as usize];
            let idx = self.sets.len() as u32;
            if src.lexemes.1 > src.lexemes.0 {
                self.runs.push(Run {
                    set: idx,
                    lexeme: PENDING,
                    state: 0,
                });
            }
            self.next_uid += 1;
            self.sets.push(SetInfo {
                uid: self.next_uid,
                owns: false,
                pos,
                ..src
            });
            return Ok(true);
        }
        if !self.build_set_uncached(g, None, pos)? {
            return Ok(false);
        }
        let built = self.sets.len() - 1;
        self.sets[built].source = (from_uid, lex);
        self.share[slot_ix] = ShareSlot {
            from_uid,
            lexeme: lex.0,
            set: built as u32,
            set_uid: self.sets[built].uid,
        };
        Ok(true)
    }

    fn build_set_uncached(
        &mut self,
        g: &Grammar,
        unit: Option<(u32, &dyn Fn(TokenRefId) -> bool)>,
        pos: u64,
    ) -> Result<bool, RecognizeError> {
        let items_start = self.items.len();
        let leo_start = self.leo.len();
        self.begin_set(g);
        // Items visited, against `max_work_per_push`: highly ambiguous grammars make every
        // lexeme end complete many items from many sets.
        let mut work = self.scan(g, unit);
        if self.items.len() == items_start {
            return Ok(false);
        }
        // Close: only items with a concrete origin need work; predicted items come with
        // their whole closure.
        let mut accepting = false;
        let mut tokens = false;
        let mut k = items_start;
        while k < self.items.len() {
            let it = self.items[k];
            k += 1;
            if it.origin == SELF {
                continue;
            }
            match g.next(it.dot) {
                Next::End => {
                    let lhs = g.lhs(it.dot);
                    let o = it.origin;
                    if it.dot == g.accept_dot && o == 0 {
                        accepting = true;
                    }
                    if let Some(l) = self.leo_lookup(o, lhs) {
                        let origin = if l.origin == SELF { o } else { l.origin };
                        self.add_concrete(l.dot, origin);
                    } else {
                        let (a, b) = self.sets[o as usize].items;
                        work += (b - a) as usize;
                        for q in a..b {
                            let p = self.items[q as usize];
                            if g.next(p.dot) == Next::Sym(Sym::Rule(lhs)) {
                                let origin = if p.origin == SELF { o } else { p.origin };
                                self.add_concrete(DotId(p.dot.0 + 1), origin);
                            }
                        }
                    }
                }
                Next::Sym(Sym::Rule(b)) => {
                    self.predict(g, b, &mut tokens);
                    if g.nullable[b.0 as usize] {
                        self.add_concrete(DotId(it.dot.0 + 1), it.origin);
                    }
                }
                Next::Sym(Sym::Lexeme(l)) => {
                    let s = &mut self.s;
                    if s.lex_stamp[l.0 as usize] != s.stamp {
                        s.lex_stamp[l.0 as usize] = s.stamp;
                        s.lexemes.push(l);
                    }
                    if g.lexemes[l.0 as usize].nullable {
                        self.add_concrete(DotId(it.dot.0 + 1), it.origin);
                    }
                }
                Next::Sym(Sym::Token(_)) => tokens = true,
            }
            work += 1;
            let items = self.items.len() - items_start;
            if items > g.limits.max_items_per_set || work > g.limits.max_work_per_push {
                self.items.truncate(items_start);
                self.leo.truncate(leo_start);
                return Err(set_limit_error(g, work, items));
            }
        }
        self.finish_set(g, items_start, accepting, tokens, pos);
        Ok(true)
    }

    /// Scan: the items waiting for the completed lexemes (and for the token reference
    /// `unit`, in its set) move over them into the new set. Returns the items visited.
    #[inline]
    fn scan(&mut self, g: &Grammar, unit: Option<(u32, &dyn Fn(TokenRefId) -> bool)>) -> usize {
        let mut work = 0;
        for e in 0..self.s.events.len() {
            let (j, lex) = self.s.events[e];
            let (a, b) = self.sets[j as usize].items;
            work += (b - a) as usize;
            for k in a..b {
                let it = self.items[k as usize];
                if g.next(it.dot) == Next::Sym(Sym::Lexeme(lex)) {
                    let origin = if it.origin == SELF { j } else { it.origin };
                    self.add_concrete(DotId(it.dot.0 + 1), origin);
                }
            }
        }
        if let Some((u, matches)) = unit {
            let (a, b) = self.sets[u as usize].items;
            for k in a..b {
                let it = self.items[k as usize];
                if let Next::Sym(Sym::Token(t)) = g.next(it.dot)
                    && matches(t)
                {
                    let origin = if it.origin == SELF { u } else { it.origin };
                    self.add_concrete(DotId(it.dot.0 + 1), origin);
                }
            }
        }
        work
    }

    /// Computes the new set's Leo items, records it, and starts its lexer runs.
    fn finish_set(
        &mut self,
        g: &Grammar,
        items_start: usize,
        accepting: bool,
        tokens: bool,
        pos: u64,
    ) {
        let idx = self.sets.len() as u32;
        let leo_start = self.leo.len();
        let s = &mut self.s;
        // Leo: symbols with exactly one waiting item, which is penultimate.
        let stamp = s.stamp;
        for k in items_start..self.items.len() {
            if let Next::Sym(Sym::Rule(b)) = g.next(self.items[k].dot) {
                let b = b.0 as usize;
                if s.count_stamp[b] != stamp {
                    s.count_stamp[b] = stamp;
                    s.count[b] = 1;
                    s.last[b] = k as u32;
                } else {
                    s.count[b] += 1;
                }
            }
        }
        for k in items_start..self.items.len() {
            let it = self.items[k];
            if let Next::Sym(Sym::Rule(b)) = g.next(it.dot)
                && s.count[b.0 as usize] == 1
                && s.last[b.0 as usize] == k as u32
                && g.dot_penult[it.dot.0 as usize]
            {
                let after = DotId(it.dot.0 + 1);
                let (dot, origin) = if it.origin == SELF {
                    (after, SELF)
                } else {
                    let lhs = g.lhs(it.dot);
                    let (a, bnd) = self.sets[it.origin as usize].leo;
                    let slice = &self.leo[a as usize..bnd as usize];
                    match slice.binary_search_by_key(&lhs, |l| l.sym) {
                        Ok(i) => {
                            let l = slice[i];
                            (
                                l.dot,
                                if l.origin == SELF {
                                    it.origin
                                } else {
                                    l.origin
                                },
                            )
                        }
                        Err(_) => (after, it.origin),
                    }
                };
                self.leo.push(Leo {
                    sym: b,
                    dot,
                    origin,
                });
            }
        }
        self.leo[leo_start..].sort_unstable_by_key(|l| l.sym);
        let lex_start = self.set_lex.len();
        let mut first = [0u64; 4];
        for &l in &s.lexemes {
            self.set_lex.push(l);
            let f = g.lexemes[l.0 as usize].dfa().first_bytes();
            for w in 0..4 {
                first[w] |= f[w];
            }
        }
        if !s.lexemes.is_empty() {
            self.runs.push(Run {
                set: idx,
                lexeme: PENDING,
                state: 0,
            });
        }
        self.next_uid += 1;
        self.sets.push(SetInfo {
            items: (items_start as u32, self.items.len() as u32),
            leo: (leo_start as u32, self.leo.len() as u32),
            lexemes: (lex_start as u32, self.set_lex.len() as u32),
            first,
            pos,
            owns: true,
            source: (u64::MAX, LexemeId(0)),
            uid: self.next_uid,
            accepting,
            tokens,
        });
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

/// The share-cache slot of a completion.
#[inline]
fn share_slot(from_uid: u64, lexeme: LexemeId) -> usize {
    let h = from_uid
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(u64::from(lexeme.0).wrapping_mul(0xC2B2_AE3D_27D4_EB4F));
    (h >> 40) as usize % SHARE_SLOTS
}

impl Recognizer {
    /// Earley items held (all sets): a measure of work and memory for tests and benches.
    pub fn item_count(&self) -> usize {
        self.c.items.len()
    }
}

/// The limit a set being built broke: the work of one byte first, else its size.
#[cold]
fn set_limit_error(g: &Grammar, work: usize, items: usize) -> RecognizeError {
    let l = &g.limits;
    if work > l.max_work_per_push {
        let what = "Earley items visited for one byte";
        RecognizeError::limit(what, work, "max_work_per_push", l.max_work_per_push)
    } else {
        let what = "Earley items in one set";
        RecognizeError::limit(what, items, "max_items_per_set", l.max_items_per_set)
    }
}
