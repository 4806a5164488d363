//! Where the grammar applies, on replayed streams: a scripted model proposes a recorded
//! output token by token (its next token gets the top logit), the generation loop masks it
//! where the grammar applies, and the splitter separates reasoning, answer and tool calls.
//! A vocabulary of single bytes plus the markers as whole tokens.

use corral::engine::{
    BatchItem, CausalLm, Constraint, CpuLogits, FinishReason, GenerateOptions, Logits, ModelError,
    SamplingOptions, Scope, Sequence, generate,
};
use corral::grammar::{CompileOptions, compile_gbnf};
use corral::scope;
use corral::split::{Format, GenericParser, split_all};
use corral::trie::{TokenId, TokenSpace, Vocabulary};
use std::sync::Arc;

const MARKERS: &[&str] = &["<think>", "</think>", "<tool_call>", "</tool_call>"];
const EOS: u32 = 300;
const WIDTH: usize = 304;

fn space() -> Arc<TokenSpace> {
    let mut tokens: Vec<(TokenId, Vec<u8>)> =
        (0..=255u8).map(|b| (TokenId(b as u32), vec![b])).collect();
    for (i, m) in MARKERS.iter().enumerate() {
        tokens.push((TokenId(256 + i as u32), m.as_bytes().to_vec()));
    }
    let vocab = Vocabulary::from_parts(tokens, [(TokenId(EOS), "</s>".to_string())]);
    Arc::new(TokenSpace::new(vocab, Some(WIDTH), vec![TokenId(EOS)]))
}

/// Tokens of `text`: markers whole, everything else byte by byte; EOS at the end.
fn tokenize(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    'outer: while i < b.len() {
        for (k, m) in MARKERS.iter().enumerate() {
            if b[i..].starts_with(m.as_bytes()) {
                out.push(256 + k as u32);
                i += m.len();
                continue 'outer;
            }
        }
        out.push(b[i] as u32);
        i += 1;
    }
    out.push(EOS);
    out
}

/// Proposes the token of the script at the output's length (so a correction of the same
/// length keeps it in step); past the script's end, end-of-sequence.
struct Scripted {
    script: String,
    out: Vec<u8>,
    space: Arc<TokenSpace>,
}

impl CausalLm for Scripted {
    fn forward(&mut self, tokens: &[TokenId], pos: usize) -> Result<Box<dyn Logits>, ModelError> {
        if pos == 0 {
            self.out.clear();
        } else {
            for &t in tokens {
                self.out
                    .extend(self.space.vocab().token_bytes(t).unwrap_or(&[]));
            }
        }
        // Prefers the script's next token; otherwise a fixed order (by id).
        let mut v: Vec<f32> = (0..WIDTH).map(|i| -(i as f32) / 1000.0).collect();
        let script = self.script.as_bytes();
        let rest =
            String::from_utf8_lossy(&script[self.out.len().min(script.len())..]).into_owned();
        v[tokenize(&rest)[0] as usize] = 10.0;
        Ok(Box::new(CpuLogits(v)))
    }
    fn logit_width(&self) -> usize {
        WIDTH
    }
    fn max_positions(&self) -> usize {
        4096
    }
    fn reset(&mut self) {}
    fn new_sequence(&self) -> Sequence {
        Sequence::new(())
    }
    // The generation loop these tests drive uses `forward` alone.
    fn forward_batch(
        &mut self,
        _: &mut [BatchItem<'_>],
    ) -> Result<Vec<Box<dyn Logits>>, ModelError> {
        Err(ModelError::Backend(
            "the scripted model runs one sequence, through forward".into(),
        ))
    }
}

fn run(script: &str, grammar: &str, scope: Scope) -> (String, FinishReason) {
    run_with(script, grammar, scope, true)
}

fn run_with(script: &str, grammar: &str, scope: Scope, jump: bool) -> (String, FinishReason) {
    run_scripted(script, Some(grammar), scope, jump)
}

/// The scripted model's output under `grammar` (none: free text) where `scope` says.
fn run_scripted(
    script: &str,
    grammar: Option<&str>,
    scope: Scope,
    jump: bool,
) -> (String, FinishReason) {
    let space = space();
    let c = grammar.map(|g| {
        let g = compile_gbnf(g, &CompileOptions::default()).unwrap();
        Constraint::new(g, space.clone())
    });
    let mut lm = Scripted {
        script: script.to_string(),
        out: Vec::new(),
        space: space.clone(),
    };
    let opts = GenerateOptions {
        max_tokens: 400,
        sampling: SamplingOptions::greedy(),
        scope,
        jump_forward: jump,
        ..GenerateOptions::default()
    };
    let out = generate(
        &mut lm,
        &space,
        c.as_ref(),
        &[TokenId(b'>' as u32)],
        &opts,
        &mut |_| {},
    )
    .unwrap();
    (out.text, out.finish_reason)
}

const ANSWER: &str = r#"root ::= "{" "\"ok\": " ("true" | "false") "}""#;

#[test]
fn the_grammar_applies_after_reasoning_only() {
    let f = Format::hermes().prefilled(true);
    let scope = scope::answer(&f, None).unwrap();
    // Reasoning the grammar would refuse; then (whitespace first, free) the answer, which
    // it accepts.
    let script = "Hmm, {\"ok\": maybe}? Let me think.</think>\n{\"ok\": true}";
    let (text, finish) = run_with(script, ANSWER, scope.clone(), false);
    assert_eq!(text, script);
    assert_eq!(finish, FinishReason::GrammarComplete);
    let (sum, _) = split_all(&mut GenericParser::new(f.clone()).unwrap(), [text.as_str()]);
    assert_eq!(sum.reasoning, "Hmm, {\"ok\": maybe}? Let me think.");
    assert_eq!(sum.content.trim(), "{\"ok\": true}");
    // With jump-forward, the grammar's forced start comes at once after the trigger.
    let (text, _) = run(script, ANSWER, scope.clone());
    assert!(
        text.starts_with("Hmm, {\"ok\": maybe}? Let me think.</think>{\"ok\": "),
        "{text}"
    );
    // An answer the grammar refuses is corrected by the mask, reasoning untouched.
    let (text, _) = run("Sure.</think>{\"ok\": maybe}", ANSWER, scope);
    assert!(text.starts_with("Sure.</think>{\"ok\": "), "{text}");
    let (sum, _) = split_all(&mut GenericParser::new(f).unwrap(), [text.as_str()]);
    assert!(
        sum.content == "{\"ok\": true}" || sum.content == "{\"ok\": false}",
        "{text}"
    );
}

#[test]
fn a_reasoning_budget_forces_the_answer() {
    let f = Format::hermes().prefilled(true);
    let scope = scope::answer(&f, Some(6)).unwrap();
    // The model would reason on and on; after 6 tokens the end of reasoning is forced.
    let (text, finish) = run("thinking and thinking and thinking", ANSWER, scope);
    assert!(text.starts_with("thinki</think>"), "{text}");
    let (sum, _) = split_all(
        &mut GenericParser::new(Format::hermes().prefilled(true)).unwrap(),
        [text.as_str()],
    );
    assert!(sum.content.trim().starts_with("{\"ok\": "), "{text}");
    assert_eq!(finish, FinishReason::GrammarComplete);
}

#[test]
fn a_model_that_ends_inside_its_reasoning_still_answers_under_the_grammar() {
    let f = Format::hermes().prefilled(true);
    let scope = scope::answer(&f, None).unwrap();
    // The script ends (end-of-sequence) before any `</think>`.
    let (text, finish) = run("thinking only", ANSWER, scope);
    assert!(text.starts_with("thinking only</think>"), "{text:?}");
    let (sum, _) = split_all(&mut GenericParser::new(f).unwrap(), [text.as_str()]);
    assert!(
        sum.content.trim() == "{\"ok\": true}" || sum.content.trim() == "{\"ok\": false}",
        "{text:?}"
    );
    assert!(
        matches!(
            finish,
            FinishReason::GrammarComplete | FinishReason::BudgetCompleted
        ),
        "{finish:?}"
    );
}

#[test]
fn a_reasoning_budget_ends_reasoning_without_a_constraint_too() {
    let f = Format::hermes().prefilled(true);
    let scope = scope::answer(&f, Some(6)).unwrap();
    let script = "thinking and thinking and thinking</think>An answer.";
    let (text, finish) = run_scripted(script, None, scope, true);
    // Forced once after 6 tokens; then the scripted model goes on from the script at the
    // output's length, and nothing is forced again.
    assert_eq!(text, "thinki</think>hinking and thinking</think>An answer.");
    assert_eq!(finish, FinishReason::Stop);
}

#[test]
fn tool_call_grammar_is_triggered_by_its_tag() {
    let f = Format::hermes();
    let scope = scope::tool_calls(&f).unwrap();
    let call = r#"root ::= "{\"name\": \"" ("get_weather" | "get_time") "\", \"arguments\": {\"city\": \"" [A-Za-z]+ "\"}}""#;
    let script = "Let me look that up. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call> Done.";
    let (text, finish) = run(script, call, scope.clone());
    assert_eq!(text, script);
    assert_eq!(finish, FinishReason::Stop);
    let (sum, _) = split_all(&mut GenericParser::new(f.clone()).unwrap(), [text.as_str()]);
    assert_eq!(sum.tool_calls.len(), 1);
    assert_eq!(sum.tool_calls[0].0, "get_weather");
    // A call naming an unknown tool is steered to a known one; text outside is free.
    let script = "x <tool_call>{\"name\": \"get_tome\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call> {not json} <tool_call>{\"name\": \"get_time\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>";
    let (text, _) = run(script, call, scope);
    let (sum, _) = split_all(&mut GenericParser::new(f).unwrap(), [text.as_str()]);
    assert!(text.contains(" {not json} "), "{text}");
    assert_eq!(sum.tool_calls.len(), 2, "{text}");
    assert!(
        sum.tool_calls
            .iter()
            .all(|(n, _)| n == "get_weather" || n == "get_time"),
        "{text}"
    );
}
