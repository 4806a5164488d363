use super::*;
use serde_json::json;

fn codec() -> ToolCallCodec {
    ToolCallCodec::new(
        vec![ToolSpec {
            name: "get_weather".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}),
        }],
        Duration::from_millis(200),
    )
    .unwrap()
}

#[test]
fn repairs_common_breakage() {
    assert_eq!(
        repair_json("{'city': 'Paris',}").unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(
        repair_json("{city: Paris, days: 3}").unwrap(),
        json!({"city": "Paris", "days": 3})
    );
    assert_eq!(
        repair_json("{\"city\": \"Par").unwrap(),
        json!({"city": "Par"})
    );
    assert_eq!(repair_json("{\"a\": [1, 2,").unwrap(), json!({"a": [1, 2]}));
    assert_eq!(
        repair_json("{עיר: תל אביב}").unwrap(),
        json!({"עיר": "תל אביב"})
    );
    assert_eq!(
        repair_json("{ok: true, n: -1.5e2, x: null}").unwrap(),
        json!({"ok": true, "n": -150.0, "x": null})
    );
}

#[test]
fn ordered_gate_native_envelope_bare() {
    let c = codec();
    let text =
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>";
    let native = [NativeCall {
        name: "get_weather".into(),
        arguments: "{\"city\": \"Rome\"}".into(),
    }];
    let CodecOutcome::Calls { path, calls } = c.decode(&native, text) else {
        panic!()
    };
    assert_eq!(path, CallPath::Native);
    assert_eq!(calls[0].arguments, json!({"city": "Rome"}));
    let CodecOutcome::Calls { path, calls } = c.decode(&[], text) else {
        panic!()
    };
    assert_eq!(path, CallPath::Envelope);
    assert_eq!(calls[0].arguments, json!({"city": "Oslo"}));
    let bare = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}";
    assert!(matches!(
        c.decode(&[], bare),
        CodecOutcome::Calls {
            path: CallPath::BareJson,
            ..
        }
    ));
    // Bare JSON that does not validate is not a call; nor is broken bare JSON.
    assert_eq!(
        c.decode(
            &[],
            "{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}"
        ),
        CodecOutcome::None
    );
    assert_eq!(c.decode(&[], "{name: get_weather}"), CodecOutcome::None);
    assert_eq!(c.decode(&[], "Just text."), CodecOutcome::None);
}

#[test]
fn normalisation_repair_validation_and_raw_fallback() {
    let c = codec();
    let text =
        "<tool_call>{name: get_weather, arguments: {city: \u{202B}ＰＡＲＩＳ\u{202C}}}</tool_call>";
    let CodecOutcome::Calls { calls, .. } = c.decode(&[], text) else {
        panic!("{:?}", c.decode(&[], text))
    };
    assert_eq!(calls[0].arguments, json!({"city": "PARIS"}));
    assert!(calls[0].repaired);
    assert_eq!(calls[0].bidi_removed, 2);
    let bad =
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"days\": \"x\"}}</tool_call>";
    match c.decode(&[], bad) {
        CodecOutcome::Raw { reason, .. } => {
            assert!(reason.contains("do not match its schema"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let unknown = "<tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call>";
    assert!(
        matches!(c.decode(&[], unknown), CodecOutcome::Raw { reason, .. } if reason.contains("unknown tool"))
    );
}

#[test]
fn time_budget_returns_raw() {
    let c = ToolCallCodec::new(vec![], Duration::ZERO).unwrap();
    let text = "<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>";
    std::thread::sleep(Duration::from_millis(1));
    match c.decode(&[], text) {
        CodecOutcome::Raw { reason, .. } => assert!(reason.contains("time budget")),
        other => panic!("{other:?}"),
    }
}
