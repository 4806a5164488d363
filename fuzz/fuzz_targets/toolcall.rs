//! Any payload through the tool-call codec and the JSON repair: a result or a reason, never
//! a panic.
#![no_main]
use corral_split::toolcall::{NativeCall, ToolCallCodec, ToolSpec, repair_json};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::Duration;

fn codec() -> &'static ToolCallCodec {
    static C: OnceLock<ToolCallCodec> = OnceLock::new();
    C.get_or_init(|| {
        ToolCallCodec::new(
            vec![ToolSpec {
                name: "f".into(),
                parameters: serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer"}}}),
            }],
            Duration::from_millis(20),
        )
        .unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = repair_json(&text);
    let _ = codec().decode(&[], &text);
    let _ = codec().decode(&[NativeCall { name: "f".into(), arguments: text.to_string() }], "");
    let _ = codec().decode_payload(None, &text);
});
