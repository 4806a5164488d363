//! Free text and its trigger: where the grammar applies after a marker (the end of
//! reasoning), the decoder watches the sampled text for it, starts the grammar on what a
//! token brings after it, and forces it when a reasoning budget is spent or the model
//! would end without an answer.

use super::{Decoder, Emit, Phase};
use crate::generate::{FinishReason, GenerateError, Next};
use crate::scope::Scope;
use corral_trie::{TokenId, TokenSpace};
use std::sync::Arc;

impl Decoder {
    /// The trigger's tokens, if a reasoning budget is used up in free text.
    pub(super) fn reasoning_budget_spent(&self) -> Option<Vec<TokenId>> {
        let Scope::After {
            budget: Some(b), ..
        } = &self.opts.scope
        else {
            return None;
        };
        if !matches!(self.phase, Phase::Free) || self.triggered || self.free_tokens < *b {
            return None;
        }
        Some(self.forced_trigger_tokens())
    }

    /// The trigger's tokens, if a grammar is to apply after a trigger not seen yet.
    pub(super) fn trigger_still_owed(&self) -> Option<Vec<TokenId>> {
        if !matches!(self.opts.scope, Scope::After { .. })
            || !matches!(self.phase, Phase::Free)
            || self.constraint.is_none()
        {
            return None;
        }
        Some(self.forced_trigger_tokens())
    }

    /// What is appended when the trigger is forced ([`Scope::After`]'s `forced` where
    /// there is output, else the trigger itself), as tokens: a special token's name is
    /// that token, the rest is text.
    fn forced_trigger_tokens(&self) -> Vec<TokenId> {
        let Scope::After {
            trigger, forced, ..
        } = &self.opts.scope
        else {
            return Vec::new();
        };
        let text = match forced {
            Some(_) if self.tokens.is_empty() => trigger.as_str(),
            Some(f) if self.last_control_is(&f.after) => f.in_body.as_str(),
            Some(f) => f.otherwise.as_str(),
            None => trigger.as_str(),
        };
        let vocab = self.space.vocab();
        if let Some(id) = vocab.token_by_text(text) {
            return vec![id];
        }
        let specials = vocab.special_tokens();
        let mut tokens = Vec::new();
        let (mut rest, mut plain) = (text, 0);
        while plain < rest.len() {
            let special = specials
                .iter()
                .filter(|(_, name)| !name.is_empty() && rest[plain..].starts_with(name.as_str()))
                .max_by_key(|(_, name)| name.len());
            match special {
                Some((id, name)) => {
                    let text = &rest[..plain];
                    tokens.extend(self.space.trie().greedy_tokens(text.as_bytes()).0);
                    tokens.push(*id);
                    rest = &rest[plain + name.len()..];
                    plain = 0;
                }
                None => plain += rest[plain..].chars().next().map_or(1, char::len_utf8),
            }
        }
        tokens.extend(self.space.trie().greedy_tokens(rest.as_bytes()).0);
        tokens
    }

    /// Whether the output's last control token (one without bytes) is the one named
    /// `name`.
    fn last_control_is(&self, name: &str) -> bool {
        let vocab = self.space.vocab();
        let last = self
            .tokens
            .iter()
            .rev()
            .find(|&&t| vocab.token_bytes(t).is_none());
        last.is_some_and(|&t| vocab.token_by_text(name) == Some(t))
    }

    /// Appends the trigger without sampling; the grammar applies from there.
    pub(super) fn force_trigger(
        &mut self,
        forced: Vec<TokenId>,
        out: &mut dyn FnMut(Emit<'_>),
    ) -> Next {
        if self.tokens.len() + forced.len() > self.max_tokens {
            return Next::Done(FinishReason::Length);
        }
        for &f in &forced {
            self.emit_forced(f, false, out);
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
    pub(super) fn sample_watching_trigger(
        &mut self,
        v: &mut Arc<Vec<f32>>,
    ) -> Result<TokenId, GenerateError> {
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
            Arc::make_mut(v)[tok.index()] = f32::NEG_INFINITY;
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
