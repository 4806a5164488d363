//! Where a grammar applies in a generation: the whole output, the answer after a reasoning
//! block, or each tool call. The markers come from the splitter's format table (or the
//! harmony channel header) as data, so the generation loop has no format branches:
//!
//! - [`Scope::Whole`]: every token is masked (the default);
//! - [`Scope::After`]: free text (reasoning) until the trigger appears in the output (the
//!   end of reasoning, or harmony's final-channel header); from there the grammar applies
//!   (whitespace right after the trigger is free) and the output ends when it completes. A
//!   reasoning budget forces the trigger after that many free tokens;
//! - [`Scope::Each`]: free text; each time the opening marker appears (`<tool_call>`), the
//!   grammar applies until it completes, then text is free again (a lazily triggered
//!   tool-call grammar).

/// Where the grammar applies. See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// The grammar constrains every token.
    #[default]
    Whole,
    /// Free text until `trigger` appears in the output; the grammar constrains the rest.
    After {
        /// The marker that ends the free text (the end of reasoning, or harmony's
        /// final-channel header).
        trigger: String,
        /// Free tokens before the trigger is forced (`None`: no limit).
        budget: Option<usize>,
        /// What a forced trigger appends once there is output (`None`: the trigger).
        forced: Option<Forced>,
    },
    /// The grammar applies to each span after `open`, until it completes; text between
    /// spans is free.
    Each {
        /// The marker that opens a constrained span (`<tool_call>`).
        open: String,
    },
}

/// What a forced trigger appends ([`Scope::After`]) once there is output, by where the
/// output is: `in_body` when its last control token is `after` (a message body is open),
/// `otherwise` when it is another one or there is none. With no output yet the trigger
/// itself is. A special token's name in either is that token. Harmony, for its final
/// channel: `<|end|><|start|>assistant<|channel|>final<|message|>` in a body (after
/// `<|message|>`), `<|start|>assistant<|channel|>final<|message|>` anywhere else (a new
/// header, which also abandons one half written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forced {
    /// The control token, by name, whose being last means a message body is open
    /// (harmony's `<|message|>`).
    pub after: String,
    /// Appended when the output's last control token is `after`.
    pub in_body: String,
    /// Appended when the output's last control token is another one, or there is none.
    pub otherwise: String,
}

impl Scope {
    /// The marker after which the grammar starts, if it does not apply from the start.
    pub fn trigger(&self) -> Option<&str> {
        match self {
            Scope::Whole => None,
            Scope::After { trigger, .. } => Some(trigger),
            Scope::Each { open } => Some(open),
        }
    }
}

/// Watches the output for a trigger, holding the last bytes that may begin it.
#[derive(Clone, Debug, Default)]
pub(crate) struct TriggerWatch {
    tail: Vec<u8>,
}

impl TriggerWatch {
    /// Appends `bytes`; if the trigger ends inside them, returns the bytes after it (and
    /// forgets what came before).
    pub fn push(&mut self, trigger: &str, bytes: &[u8]) -> Option<Vec<u8>> {
        let t = trigger.as_bytes();
        self.tail.extend_from_slice(bytes);
        if let Some(at) = self.tail.windows(t.len()).position(|w| w == t) {
            let rest = self.tail[at + t.len()..].to_vec();
            self.tail.clear();
            return Some(rest);
        }
        // Keep only what could still begin the trigger.
        let keep = t.len().saturating_sub(1).min(self.tail.len());
        self.tail.drain(..self.tail.len() - keep);
        None
    }

    pub fn clear(&mut self) {
        self.tail.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_across_tokens() {
        let mut w = TriggerWatch::default();
        assert_eq!(w.push("</think>", b"I think </th"), None);
        assert_eq!(
            w.push("</think>", b"ink>\n{\"a\""),
            Some(b"\n{\"a\"".to_vec())
        );
        assert_eq!(w.push("</think>", b"</think>"), Some(Vec::new()));
    }
}
