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
//!   depend on its own index, which lets the closure of "lexeme L completed from set j" be
//!   memoized and copied wherever the trie walk meets it again ([`Recognizer::set_memo`]).
//! - Nullable rules: Aycock-Horspool. Predicting a nullable symbol also moves over it, so a
//!   completion whose origin is the current set never needs to look at the current set.
//! - Right recursion: Leo items. In a set where exactly one item waits for `B` and `B` is the
//!   last symbol of its production, the completion of `B` jumps straight to the topmost
//!   item of the chain, so long right-recursive lists cost O(1) per element, not O(n).
//!   Repetitions the front end desugars (`x*`) are left-recursive and need no Leo item.
//!
//! # Glossary
//! Earley *set* = a chart row (one per position where a lexeme ends, not per byte); *item*
//! = dotted production + origin set; *run* = a partial lexeme (the seeds' "partial match");
//! *frame* = the state after one push, the unit of rollback.

use crate::compiled::{DotId, Grammar, LexemeId, Next, RuleId, Sym, TokenRefId};
use crate::error::RecognizeError;
use crate::lexeme::DEAD;
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;

/// Origin of an item predicted in the set that holds it.
pub const SELF: u32 = u32::MAX;

/// An Earley item: a dotted production and the set where it started ([`SELF`] for the set
/// holding it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Item {
    pub dot: DotId,
    pub origin: u32,
}

/// A lexeme being matched: started at Earley set `set`, DFA now in `state` (never `DEAD`).
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
    items: (u32, u32),
    leo: (u32, u32),
    /// Unique over the recognizer's life (indices are reused after a pop; uids are not).
    uid: u64,
    accepting: bool,
    /// Some item waits for a token reference.
    tokens: bool,
}

/// The state after one push. Lengths are those after the push.
#[derive(Clone, Copy, Debug)]
struct Frame {
    /// This frame's runs are `runs[runs_start..next frame's runs_start]`.
    runs_start: u32,
    sets_len: u32,
    items_len: u32,
    leo_len: u32,
    /// This push built an Earley set (the last one).
    new_set: bool,
    /// Bytes consumed so far.
    pos: u64,
}

/// A closure memoized by `(start set uid, lexeme)`: what the new set gets.
#[derive(Debug)]
struct MemoEntry {
    items: Box<[Item]>,
    leo: Box<[Leo]>,
    lexemes: Box<[LexemeId]>,
    accepting: bool,
    tokens: bool,
}

const MEMO_CAPACITY: usize = 8192;

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
    concrete: FxHashSet<(u32, u32)>,
    lexemes: Vec<LexemeId>,
    events: Vec<(u32, LexemeId)>,
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
#[derive(Debug)]
pub struct Recognizer {
    g: Arc<Grammar>,
    sets: Vec<SetInfo>,
    items: Vec<Item>,
    leo: Vec<Leo>,
    runs: Vec<Run>,
    frames: Vec<Frame>,
    keep_history: bool,
    next_uid: u64,
    memo_on: bool,
    memo: FxHashMap<(u64, LexemeId), MemoEntry>,
    s: Scratch,
}

impl Clone for Recognizer {
    fn clone(&self) -> Recognizer {
        Recognizer {
            g: self.g.clone(),
            sets: self.sets.clone(),
            items: self.items.clone(),
            leo: self.leo.clone(),
            runs: self.runs.clone(),
            frames: self.frames.clone(),
            keep_history: self.keep_history,
            next_uid: self.next_uid,
            memo_on: self.memo_on,
            memo: FxHashMap::default(),
            s: Scratch::default(),
        }
    }
}

impl Recognizer {
    /// A recognizer at the start of the input.
    pub fn new(g: Arc<Grammar>) -> Recognizer {
        let mut r = Recognizer {
            g,
            sets: Vec::new(),
            items: Vec::new(),
            leo: Vec::new(),
            runs: Vec::new(),
            frames: Vec::new(),
            keep_history: true,
            next_uid: 0,
            memo_on: false,
            memo: FxHashMap::default(),
            s: Scratch::default(),
        };
        r.init();
        r
    }

    fn init(&mut self) {
        let g = self.g.clone();
        self.begin_set();
        let start = g.start_rule;
        let mut accepting = false;
        let mut tokens = false;
        self.predict(start, &mut tokens);
        for it in &self.items {
            accepting |= it.dot == g.accept_dot;
        }
        self.finish_set(0, accepting, tokens);
        self.frames.push(Frame {
            runs_start: 0,
            sets_len: 1,
            items_len: self.items.len() as u32,
            leo_len: self.leo.len() as u32,
            new_set: true,
            pos: 0,
        });
    }

    /// Back to the start of the input (keeps allocations).
    pub fn reset(&mut self) {
        self.sets.clear();
        self.items.clear();
        self.leo.clear();
        self.runs.clear();
        self.frames.clear();
        self.memo.clear();
        self.init();
    }

    /// The grammar.
    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.g
    }

    /// With `false`, pushes forget the previous frame (no [`Recognizer::pop`]), so memory
    /// grows only with the Earley sets: for one-pass matching of large inputs.
    pub fn set_keep_history(&mut self, keep: bool) {
        self.keep_history = keep;
        if !keep {
            self.forget_history();
        }
    }

    /// Memoizes set closures by (start set, lexeme). Pays off when the same completions are
    /// met many times, as in a token-trie walk; costs allocations in a one-pass match.
    pub fn set_memo(&mut self, on: bool) {
        self.memo_on = on;
        if !on {
            self.memo.clear();
        }
    }

    fn forget_history(&mut self) {
        let top = *self.frames.last().expect("at least one frame");
        self.runs.drain(..top.runs_start as usize);
        self.frames.clear();
        self.frames.push(Frame {
            runs_start: 0,
            ..top
        });
    }

    /// Bytes consumed.
    pub fn position(&self) -> u64 {
        self.frames.last().expect("at least one frame").pos
    }

    /// Number of frames that [`Recognizer::pop`] can undo.
    pub fn depth(&self) -> usize {
        self.frames.len() - 1
    }

    /// Whether the input so far is a complete sentence of the grammar.
    pub fn is_accepting(&self) -> bool {
        let top = self.frames.last().expect("at least one frame");
        top.new_set && self.sets[top.sets_len as usize - 1].accepting
    }

    /// The lexer runs alive now (partial lexemes, and lexemes expected from here).
    pub fn runs(&self) -> &[Run] {
        let top = self.frames.last().expect("at least one frame");
        &self.runs[top.runs_start as usize..]
    }

    /// The Earley set ending at the current position, if a lexeme ended here.
    fn current_set(&self) -> Option<u32> {
        let top = self.frames.last().expect("at least one frame");
        top.new_set.then_some(top.sets_len - 1)
    }

    /// The token references that can come next.
    pub fn expected_tokens(&self) -> Vec<TokenRefId> {
        let mut out = Vec::new();
        if let Some(set) = self.current_set() {
            let info = self.sets[set as usize];
            if info.tokens {
                for it in &self.items[info.items.0 as usize..info.items.1 as usize] {
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
        let top = *self.frames.last().expect("at least one frame");
        let start = top.runs_start as usize;
        let end = self.runs.len();
        let new_start = end;
        self.s.events.clear();
        for i in start..end {
            let r = self.runs[i];
            let dfa = &self.g.lexemes[r.lexeme.0 as usize].dfa;
            let s = dfa.next(r.state, byte);
            if s == DEAD {
                continue;
            }
            if dfa.is_accepting(s) {
                self.s.events.push((r.set, r.lexeme));
            }
            if dfa.can_continue(s) {
                self.runs.push(Run { state: s, ..r });
            }
        }
        self.finish_push(top, new_start, 1, None, false)
    }

    /// Pushes the end of `run`'s lexeme, with the run itself going on in `end_state` (an
    /// accepting state of its DFA), and no other run: the state right after `run`'s lexeme
    /// ended at some byte. The mask computation uses it to continue a walk from where a
    /// cached lexeme ends, without replaying the bytes before. Counts as one frame of zero
    /// bytes.
    pub fn push_lexeme_end(&mut self, run: Run, end_state: u32) -> Result<bool, RecognizeError> {
        let top = *self.frames.last().expect("at least one frame");
        let new_start = self.runs.len();
        let dfa = &self.g.lexemes[run.lexeme.0 as usize].dfa;
        debug_assert!(dfa.is_accepting(end_state));
        if dfa.can_continue(end_state) {
            self.runs.push(Run {
                state: end_state,
                ..run
            });
        }
        self.s.events.clear();
        self.s.events.push((run.set, run.lexeme));
        self.finish_push(top, new_start, 0, None, false)
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
        let unit_set = self.current_set().filter(|&s| self.sets[s as usize].tokens);
        let Some(unit_set) = unit_set else {
            return self.push_bytes_all_or_nothing(bytes);
        };
        // The byte branch may die inside the token while the token branch lives, so the
        // intermediate frames may be empty.
        let n = bytes.len();
        for (i, &b) in bytes.iter().enumerate() {
            let top = *self.frames.last().expect("at least one frame");
            let start = top.runs_start as usize;
            let end = self.runs.len();
            self.s.events.clear();
            for k in start..end {
                let r = self.runs[k];
                let dfa = &self.g.lexemes[r.lexeme.0 as usize].dfa;
                let s = dfa.next(r.state, b);
                if s == DEAD {
                    continue;
                }
                if dfa.is_accepting(s) {
                    self.s.events.push((r.set, r.lexeme));
                }
                if dfa.can_continue(s) {
                    self.runs.push(Run { state: s, ..r });
                }
            }
            let last = i + 1 == n;
            let unit = last.then_some((unit_set, matches));
            match self.finish_push(top, end, 1, unit, !last) {
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
            let top = *self.frames.last().expect("at least one frame");
            self.s.events.clear();
            let new_start = self.runs.len();
            return self.finish_push(top, new_start, 0, Some((unit_set, matches)), false);
        }
        Ok(true)
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
        let n = n.min(self.frames.len() - 1);
        if n == 0 {
            return 0;
        }
        let first_popped = self.frames[self.frames.len() - n];
        self.frames.truncate(self.frames.len() - n);
        self.runs.truncate(first_popped.runs_start as usize);
        let top = *self.frames.last().expect("at least one frame");
        self.sets.truncate(top.sets_len as usize);
        self.items.truncate(top.items_len as usize);
        self.leo.truncate(top.leo_len as usize);
        n
    }

    /// Ends a push whose stepped runs start at `new_start` and whose completions are in
    /// `self.s.events`.
    fn finish_push(
        &mut self,
        prev: Frame,
        new_start: usize,
        bytes: u64,
        unit: Option<(u32, &dyn Fn(TokenRefId) -> bool)>,
        allow_empty: bool,
    ) -> Result<bool, RecognizeError> {
        let built = if !self.s.events.is_empty() || unit.is_some() {
            match self.build_set(unit) {
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
        if self.runs.len() - new_start > self.g.limits.max_lexer_runs {
            let value = self.runs.len() - new_start;
            self.runs.truncate(new_start);
            if built {
                self.drop_last_set(prev);
            }
            return Err(RecognizeError::Limit {
                what: "lexer runs alive at one position",
                value,
                limit_name: "max_lexer_runs",
                limit: self.g.limits.max_lexer_runs,
            });
        }
        self.frames.push(Frame {
            runs_start: new_start as u32,
            sets_len: self.sets.len() as u32,
            items_len: self.items.len() as u32,
            leo_len: self.leo.len() as u32,
            new_set: built,
            pos: prev.pos + bytes,
        });
        if !self.keep_history {
            self.forget_history();
        }
        Ok(true)
    }

    fn drop_last_set(&mut self, prev: Frame) {
        self.sets.truncate(prev.sets_len as usize);
        self.items.truncate(prev.items_len as usize);
        self.leo.truncate(prev.leo_len as usize);
    }

    fn begin_set(&mut self) {
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
        let g = &self.g;
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
        s.lexemes.clear();
    }

    /// Adds the prediction closure of `rule` to the set being built.
    fn predict(&mut self, rule: RuleId, tokens: &mut bool) {
        let s = &mut self.s;
        if s.rule_stamp[rule.0 as usize] == s.stamp {
            return;
        }
        s.rule_stamp[rule.0 as usize] = s.stamp;
        let p = &self.g.predictions[rule.0 as usize];
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
        if self.s.concrete.insert((dot.0, origin)) {
            self.items.push(Item { dot, origin });
        }
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
        unit: Option<(u32, &dyn Fn(TokenRefId) -> bool)>,
    ) -> Result<bool, RecognizeError> {
        let g = self.g.clone();
        if self.memo_on && unit.is_none() && self.s.events.len() == 1 {
            let (j, lex) = self.s.events[0];
            let key = (self.sets[j as usize].uid, lex);
            if !self.memo.contains_key(&key) {
                let items_start = self.items.len();
                let leo_start = self.leo.len();
                if !self.build_set_uncached(&g, None)? {
                    return Ok(false);
                }
                let info = *self.sets.last().expect("just built");
                let lexemes = self.s.lexemes.clone().into_boxed_slice();
                if self.memo.len() >= MEMO_CAPACITY {
                    self.memo.clear();
                }
                self.memo.insert(
                    key,
                    MemoEntry {
                        items: self.items[items_start..].into(),
                        leo: self.leo[leo_start..].into(),
                        lexemes,
                        accepting: info.accepting,
                        tokens: info.tokens,
                    },
                );
                return Ok(true);
            }
            let m = &self.memo[&key];
            let idx = self.sets.len() as u32;
            let items_start = self.items.len() as u32;
            let leo_start = self.leo.len() as u32;
            self.items.extend_from_slice(&m.items);
            self.leo.extend_from_slice(&m.leo);
            for &l in m.lexemes.iter() {
                self.runs.push(Run {
                    set: idx,
                    lexeme: l,
                    state: g.lexemes[l.0 as usize].dfa.start(),
                });
            }
            self.next_uid += 1;
            self.sets.push(SetInfo {
                items: (items_start, self.items.len() as u32),
                leo: (leo_start, self.leo.len() as u32),
                uid: self.next_uid,
                accepting: m.accepting,
                tokens: m.tokens,
            });
            return Ok(true);
        }
        self.build_set_uncached(&g, unit)
    }

    fn build_set_uncached(
        &mut self,
        g: &Grammar,
        unit: Option<(u32, &dyn Fn(TokenRefId) -> bool)>,
    ) -> Result<bool, RecognizeError> {
        let items_start = self.items.len();
        let leo_start = self.leo.len();
        self.begin_set();
        // Scan: items waiting for the completed lexemes move over them.
        for e in 0..self.s.events.len() {
            let (j, lex) = self.s.events[e];
            let (a, b) = self.sets[j as usize].items;
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
                    self.predict(b, &mut tokens);
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
            if self.items.len() - items_start > g.limits.max_items_per_set {
                let value = self.items.len() - items_start;
                self.items.truncate(items_start);
                self.leo.truncate(leo_start);
                return Err(RecognizeError::Limit {
                    what: "Earley items in one set",
                    value,
                    limit_name: "max_items_per_set",
                    limit: g.limits.max_items_per_set,
                });
            }
        }
        self.finish_set(items_start, accepting, tokens);
        Ok(true)
    }

    /// Computes the new set's Leo items, records it, and starts its lexer runs.
    fn finish_set(&mut self, items_start: usize, accepting: bool, tokens: bool) {
        let g = self.g.clone();
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
        for &l in &s.lexemes {
            self.runs.push(Run {
                set: idx,
                lexeme: l,
                state: g.lexemes[l.0 as usize].dfa.start(),
            });
        }
        self.next_uid += 1;
        self.sets.push(SetInfo {
            items: (items_start as u32, self.items.len() as u32),
            leo: (leo_start as u32, self.leo.len() as u32),
            uid: self.next_uid,
            accepting,
            tokens,
        });
    }
}
