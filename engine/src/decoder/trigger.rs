//! Free text and its trigger: where the grammar applies after a marker (the end of
//! reasoning), the decoder watches the sampled text for it, starts the grammar on what a
//! token brings after it, and forces it when a reasoning budget is spent or the model
//! would end without an answer.

use super::{Decoder, Phase};
use crate::generate::{FinishReason, GenerateError, Next};
use crate::scope::Scope;
use corral_trie::{TokenId, TokenSpace};

impl Decoder {
    /// The trigger's tokens, if a reasoning budget is used up in free text.
    pub(super) fn reasoning_budget_spent(&self) -> Option<Vec<TokenId>> {
        let Scope::After {
            trigger,
            budget: Some(b),
        } = &self.opts.scope
        else {
            return None;
        };
        if !matches!(self.phase, Phase::Free) || self.triggered || self.free_tokens < *b {
            return None;
        }
        Some(self.trigger_tokens(trigger))
    }

    /// The trigger's tokens, if a grammar is to apply after a trigger not seen yet.
    pub(super) fn trigger_still_owed(&self) -> Option<Vec<TokenId>> {
        let Scope::After { trigger, .. } = &self.opts.scope else {
            return None;
        };
        if !matches!(self.phase, Phase::Free) || self.constraint.is_none() {
            return None;
        }
        Some(self.trigger_tokens(trigger))
    }

    pub(super) fn trigger_tokens(&self, trigger: &str) -> Vec<TokenId> {
        match self.space.vocab().token_by_text(trigger) {
            Some(id) => vec![id],
            None => self.space.trie().greedy_tokens(trigger.as_bytes()).0,
        }
    }

    /// Appends the trigger without sampling; the grammar applies from there.
    pub(super) fn force_trigger(
        &mut self,
        forced: Vec<TokenId>,
        on_delta: &mut dyn FnMut(&str),
    ) -> Next {
        if self.tokens.len() + forced.len() > self.max_tokens {
            return Next::Done(FinishReason::Length);
        }
        for &f in &forced {
            self.emit_forced(f, false, on_delta);
        }
        self.phase = self.fresh_phase();
        self.triggered = self.constraint.is_none();
        self.mask_ready = false;
        self.watch.clear();
        self.free_tokens = 0;
        if self.pos + forced.len() >= self.max_pos {
            return Next::Done(FinishReason::Length);
        }
        self.pos += forced.len();
        self.stats.forward_passes += 1;
        Next::Feed(forced)
    }

    /// Draws from `v` (masked and adjusted logits). In free text, a token that completes
    /// the trigger starts the grammar on what it brings after the trigger (whitespace
    /// first is free); a token whose rest the grammar refuses is not taken (its logit
    /// becomes minus infinity in `v`, and the draw is made again).
    pub(super) fn sample(&mut self, v: &mut [f32]) -> Result<TokenId, GenerateError> {
        loop {
            let tok = self.sampler.draw(v).ok_or(GenerateError::NothingToSample)?;
            let watching = matches!(self.phase, Phase::Free) && !self.triggered;
            let Some(trigger) = self.opts.scope.trigger().filter(|_| watching) else {
                return Ok(tok);
            };
            let before = self.watch.clone();
            let Some(rest) = self.watch.push(trigger, &token_text(&self.space, tok)) else {
                self.free_tokens += 1;
                return Ok(tok);
            };
            if self.constraint.is_none() {
                // Nothing to constrain after the trigger: free text goes on.
                self.triggered = true;
                return Ok(tok);
            }
            let Phase::Constrained(mut a) = self.fresh_phase() else {
                unreachable!("a constraint gives a constrained phase");
            };
            let taken = match rest.iter().position(|b| !b.is_ascii_whitespace()) {
                Some(i) => a.push_bytes(&rest[i..])?,
                None => true,
            };
            if taken {
                self.phase = Phase::Constrained(a);
                self.free_tokens = 0;
                return Ok(tok);
            }
            self.watch = before;
            v[tok.index()] = f32::NEG_INFINITY;
        }
    }
}

/// A token's text for trigger detection: its bytes, or a special token's name.
pub(super) fn token_text(space: &TokenSpace, t: TokenId) -> Vec<u8> {
    match space.vocab().token_bytes(t) {
        Some(b) => b.to_vec(),
        None => space
            .vocab()
            .special_tokens()
            .iter()
            .find(|(id, _)| *id == t)
            .map(|(_, name)| name.as_bytes().to_vec())
            .unwrap_or_default(),
    }
}
