//! Where a grammar applies, from a splitter's format: the engine's [`Scope`] knows only
//! trigger strings; which string ends reasoning or opens a tool call is the format's
//! business (corral-split), resolved here once into a value.

use corral_engine::Forced;
use corral_engine::Scope;
use corral_split::{FINAL_HEADER, Format, MESSAGE_OPEN, RegionKind, forced_header};

/// The answer of a reasoning model: after the format's closing reasoning marker, with at
/// most `budget` free tokens of reasoning before the marker is forced. `None` if the format
/// has no reasoning region.
pub fn answer(format: &Format, budget: Option<usize>) -> Option<Scope> {
    let r = format
        .regions
        .iter()
        .find(|r| r.kind == RegionKind::Reasoning)?;
    Some(Scope::After {
        trigger: r.close.clone()?,
        budget,
        forced: None,
    })
}

/// Harmony's final channel ([`corral_split::forced_header`] says what forcing it appends).
pub fn harmony_answer(budget: Option<usize>) -> Scope {
    let (in_body, otherwise) = forced_header(FINAL_HEADER);
    Scope::After {
        trigger: FINAL_HEADER.to_string(),
        budget,
        forced: Some(Forced {
            after: MESSAGE_OPEN.to_string(),
            in_body,
            otherwise,
        }),
    }
}

/// Each tool call of the format (the grammar describes one call's body). `None` if the
/// format has no tool-call region with an opening marker.
pub fn tool_calls(format: &Format) -> Option<Scope> {
    let r = format
        .regions
        .iter()
        .find(|r| matches!(r.kind, RegionKind::ToolCall(_)))?;
    Some(Scope::Each {
        open: r.open.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_from_the_hermes_format() {
        let f = Format::hermes();
        assert_eq!(
            answer(&f, Some(5)),
            Some(Scope::After {
                trigger: "</think>".into(),
                budget: Some(5),
                forced: None,
            })
        );
        assert_eq!(
            tool_calls(&f),
            Some(Scope::Each {
                open: "<tool_call>".into()
            })
        );
    }
}
