//! Synthetic model output streams for splitter benchmarks (deterministic).

/// A harmony stream of about `target` bytes: analysis messages, tool calls and results,
/// final answers, with multi-byte text and stray `<` characters.
pub fn harmony(target: usize) -> String {
    let mut s = String::with_capacity(target + 1024);
    let mut i = 0u64;
    while s.len() < target {
        s.push_str("<|start|>assistant<|channel|>analysis<|message|>");
        s.push_str(&format!("Step {i}: the user asks about café prices in 東京 😀; compare a < b and x <| y before answering. "));
        s.push_str(
            "Let me check the weather tool first, then reason about the numbers carefully.<|end|>",
        );
        s.push_str("<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
        s.push_str(&format!(
            "{{\"city\": \"Tokyo\", \"day\": {}}}<|end|>",
            i % 7
        ));
        s.push_str("<|start|>assistant<|channel|>final<|message|>");
        s.push_str(&format!(
            "Answer {i}: it will be sunny; prices average ¥{}. ",
            500 + i % 300
        ));
        s.push_str("Here is a longer sentence to make the final channel realistic in size.<|end|>");
        i += 1;
    }
    s.push_str("<|start|>assistant<|channel|>final<|message|>Done.<|return|>");
    s
}

/// A `<think>` / `<tool_call>` stream of about `target` bytes.
pub fn think_tools(target: usize) -> String {
    let mut s = String::with_capacity(target + 1024);
    let mut i = 0u64;
    while s.len() < target {
        s.push_str(&format!(
            "<think>Round {i}: the user wants prices in 東京; compare a < b. Call the tool.</think>"
        ));
        s.push_str(&format!("Checking now.<tool_call>{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Tokyo\", \"note\": \"a </tool_call> in a string\", \"day\": {}}}}}</tool_call>", i % 7));
        s.push_str(&format!(" The answer for round {i} is sunny, with <b>markup</b> and ```code <think>``` fences.\n"));
        i += 1;
    }
    s
}

/// A harmony stream of analysis and final messages only (no tool calls), about `target`
/// bytes.
pub fn harmony_plain(target: usize) -> String {
    let mut s = String::with_capacity(target + 1024);
    let mut i = 0u64;
    while s.len() < target {
        s.push_str("<|start|>assistant<|channel|>analysis<|message|>");
        s.push_str(&format!("Step {i}: the user asks about café prices in 東京; think about it step by step, compare the numbers and check the units. "));
        s.push_str("<|end|><|start|>assistant<|channel|>final<|message|>");
        s.push_str(&format!(
            "Answer {i}: prices average ¥{} this season, a little higher than last year.<|end|>",
            500 + i % 300
        ));
        i += 1;
    }
    s.push_str("<|start|>assistant<|channel|>final<|message|>Done.<|return|>");
    s
}
