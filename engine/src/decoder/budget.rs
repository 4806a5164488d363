//! The token budget: under a grammar, every output ends complete within `max_tokens`.
//! Before a sampled token is kept, the shortest completion from after it must still fit in
//! what is left; if not, the completion is appended instead. Jump-forward appends what the
//! grammar forces, as much of it as leaves room to complete.

use super::{Decoder, Emit, Phase, Stepped};
use crate::adapter::Completion;
use crate::generate::{FinishReason, GenerateError, Next};
use crate::scope::Scope;
use corral_trie::TokenId;

impl Decoder {
    /// Steps the adapter with `tok`; under a budget, if no completion fits after it, rolls
    /// it back and appends the shortest completion instead: whole ([`Stepped::Completed`]:
    /// the output ends), or with log-probabilities recorded, its first token in `tok`'s
    /// place and the rest one per step ([`Stepped::Replaced`]).
    pub(super) fn step_constraint(
        &mut self,
        tok: TokenId,
        out: &mut dyn FnMut(Emit<'_>),
    ) -> Result<Stepped, GenerateError> {
        let Phase::Constrained(a) = &mut self.phase else {
            return Ok(Stepped::Kept);
        };
        if a.output().is_empty()
            && self.opts.scope != Scope::Whole
            && self.space.whitespace_tokens().binary_search(&tok).is_ok()
        {
            return Ok(Stepped::Kept);
        }
        a.step_with_token(tok)?;
        if !self.budgeted {
            return Ok(Stepped::Kept);
        }
        let left = self.max_tokens - self.tokens.len() - 1;
        if fits(a.completion_tokens_within(left)?, left) {
            return Ok(Stepped::Kept);
        }
        a.rollback(1)?;
        // The completion from before `tok` fit (checked at the step before, or when the
        // decoder was made); `None` here means the recognizer's search gave up.
        let mut completion = a.completion_tokens()?.ok_or(GenerateError::NoCompletion)?;
        if self.one_by_one() && !completion.is_empty() {
            completion.reverse();
            let first = completion.pop().expect("not empty");
            let named = self.names_token(first);
            if let Phase::Constrained(a) = &mut self.phase {
                a.step_with_token(first)?;
            }
            self.completing = completion;
            return Ok(Stepped::Replaced {
                token: first,
                named,
            });
        }
        for &t in &completion {
            self.append(t, out)?;
        }
        Ok(Stepped::Completed)
    }

    /// Steps the constraint with `t`, a token the engine chose (a completion's), and
    /// streams it.
    pub(super) fn append(
        &mut self,
        t: TokenId,
        out: &mut dyn FnMut(Emit<'_>),
    ) -> Result<(), GenerateError> {
        let named = self.names_token(t);
        if let Phase::Constrained(a) = &mut self.phase {
            a.step_with_token(t)?;
        }
        self.emit_forced(t, named, out);
        Ok(())
    }

    /// A token the engine appended without sampling it (jump-forward, a trigger, a
    /// completion): streamed, kept in the output and the history, counted as forced.
    pub(super) fn emit_forced(&mut self, t: TokenId, named: bool, out: &mut dyn FnMut(Emit<'_>)) {
        self.emit_as(t, named, out);
        self.push(t);
        self.stats.forced_tokens += 1;
    }

    /// Jump-forward: the tokens of the continuation the grammar forces, appended to `feed`
    /// (as many as leave room to complete within the budget).
    pub(super) fn jump_forward(
        &mut self,
        feed: &mut Vec<TokenId>,
        out: &mut dyn FnMut(Emit<'_>),
    ) -> Result<(), GenerateError> {
        let room = self.max_tokens.saturating_sub(self.tokens.len());
        let Phase::Constrained(a) = &mut self.phase else {
            return Ok(());
        };
        let mut forced = a.forced_tokens()?;
        forced.truncate(room);
        // The forced bytes start every completion, but their tokens may split them
        // differently: keep only as many as leave room to complete.
        if self.budgeted {
            while !forced.is_empty() {
                a.step_with_tokens(&forced)?;
                let left = room - forced.len();
                let fit = fits(a.completion_tokens_within(left)?, left);
                a.rollback(forced.len())?;
                if fit {
                    break;
                }
                forced.pop();
            }
        }
        a.step_with_tokens(&forced)?;
        for f in forced {
            self.emit_forced(f, false, out);
            feed.push(f);
        }
        Ok(())
    }

    /// The next token of a budget's completion, its log-probability read off this step's
    /// distribution `v`.
    pub(super) fn append_completion(
        &mut self,
        v: &[f32],
        tok: TokenId,
        out: &mut dyn FnMut(Emit<'_>),
    ) -> Result<Next, GenerateError> {
        self.record_logprob(v, tok);
        self.append(tok, out)?;
        if self.completing.is_empty() {
            return Ok(Next::Done(FinishReason::BudgetCompleted));
        }
        Ok(self.feed(vec![tok]))
    }
}

/// Whether a completion fits in `left` tokens.
pub(super) fn fits(c: Completion, left: usize) -> bool {
    matches!(c, Completion::Tokens(t) if t.len() <= left)
}
