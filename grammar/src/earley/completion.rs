//! The shortest completion from a recognizer's state ([`Recognizer::shortest_completion`]):
//! the search up the Earley chart, memoized per (set, symbol). The static half, per
//! grammar, is [`crate::complete`].

use super::{Recognizer, Run, SetIdx};
use crate::compiled::{AfterDot, DotId, Sym, TokenRefId};
use crate::complete::{self, Completion};
use rustc_hash::FxHashSet;

impl Recognizer {
    /// The shortest completion of a sentence from here: text, and token references where
    /// the grammar names tokens. Empty if the input is complete already; `None` if nothing
    /// completes it (or the chart is nested deeper than this search follows). See
    /// `crate::complete`.
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
                    if self.g.lhs(after) == self.g.start_rule && origin == SetIdx::FIRST {
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
}

/// How completing a symbol in a set goes on (the first step of its cheapest way up).
#[derive(Clone, Copy, Debug)]
enum Step {
    /// The sentence is complete.
    Accept,
    /// The item waiting for the symbol moves to `after`; its production's remaining
    /// symbols follow, then its left-hand side completes from `origin`.
    Item { after: DotId, origin: SetIdx },
    /// A Leo item: the complete item `done` (from `origin`) directly.
    Leo { done: DotId, origin: SetIdx },
}

/// Where a shortest completion starts: finishing a lexer run, or a token reference the
/// current set expects.
#[derive(Clone, Copy, Debug)]
enum Start {
    Run(Run),
    Token(SetIdx, TokenRefId),
}

/// The search behind [`Recognizer::shortest_completion`]: the cheapest way to complete
/// `(set, symbol)` up to the start rule, memoized.
struct CompletionSearch<'a> {
    rec: &'a Recognizer,
    sh: &'a complete::Shortest,
    memo: rustc_hash::FxHashMap<(SetIdx, Sym), (u64, Option<Step>)>,
    /// Pairs being computed (a cycle back to one costs more than going around it).
    active: FxHashSet<(SetIdx, Sym)>,
}

impl CompletionSearch<'_> {
    /// Units (bytes and tokens) needed after `sym` completes in `set`, whether the result depends on a pair
    /// being computed (then it is not memoized), and the first step.
    fn complete(&mut self, set: SetIdx, sym: Sym, depth: u32) -> (u64, bool, Option<Step>) {
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
            let origin = l.origin.in_set(set);
            if l.dot == g.accept_dot && origin == SetIdx::FIRST {
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
            let (a, b) = c.sets[set.index()].items;
            for k in a..b {
                let it = c.items[k as usize];
                if g.next(it.dot) != AfterDot::Sym(sym) {
                    continue;
                }
                let after = DotId(it.dot.0 + 1);
                let origin = it.origin.in_set(set);
                let suffix = self.sh.suffix_len(g, after);
                if suffix >= best.0 {
                    continue;
                }
                let lhs = g.lhs(after);
                let up = if lhs == g.start_rule && origin == SetIdx::FIRST {
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
