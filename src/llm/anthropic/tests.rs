//! The event parsing of the Anthropic stream, fed event data directly.

use serde_json::Value;

use super::Parser;
use crate::llm::stream::replay;
use crate::llm::{http, ContentBlock, Delta, LlmError, LlmErrorKind, ModelResponse, StopReason};

const KEY: &str = "sk-ant-secret";

fn run(events: &[(Option<&str>, &str)]) -> (Result<ModelResponse, LlmError>, Vec<Delta>) {
    replay(Parser::new("req-model", Some(KEY)), events)
}

/// Events as Anthropic sends them: the SSE event name repeats the data's `type`.
fn named<'a>(events: &[(&'a str, &'a str)]) -> Vec<(Option<&'a str>, &'a str)> {
    events.iter().map(|(name, data)| (Some(*name), *data)).collect()
}

const START: (&str, &str) = (
    "message_start",
    r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"usage":{"input_tokens":12,"output_tokens":1,"cache_read_input_tokens":4,"service_tier":"standard"}}}"#,
);
const STOP: (&str, &str) = ("message_stop", r#"{"type":"message_stop"}"#);

#[test]
fn unknown_events_blocks_and_fields_are_ignored() {
    let (r, deltas) = run(&named(&[
        START,
        ("ping", r#"{"type": "ping"}"#),
        (
            "brand_new_event",
            r#"{"type":"brand_new_event","index":0,"delta":{"type":"text_delta","text":"no"}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"","citations":[]}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"x":1}}}"#,
        ),
        ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"xx"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hidden"}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":2,"content_block":"odd"}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5,"input_tokens":"n/a"}}"#,
        ),
        STOP,
        ("content_block_delta", "not read after message_stop"),
    ]));
    let r = r.unwrap();
    assert_eq!(deltas, [Delta::Text("Hello".into())]);
    assert_eq!(r.text, "Hello");
    assert_eq!(r.model, "claude-x");
    assert_eq!(
        (
            r.usage.input_tokens,
            r.usage.output_tokens,
            r.usage.cache_read_tokens,
            r.usage.cache_creation_tokens
        ),
        (12, 5, 4, 0)
    );
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert!(r.thinking.is_empty() && r.tool_calls.is_empty());
}

#[test]
fn the_event_name_stands_in_for_a_missing_type() {
    let (r, deltas) = run(&[
        (Some("message_start"), r#"{"message":{"model":"m2","usage":null}}"#),
        (
            Some("content_block_delta"),
            r#"{"type":7,"delta":{"type":"text_delta","text":"hi"}}"#,
        ),
        // The data's own type wins over the event name.
        (Some("message_stop"), r#"{"type":"ping"}"#),
        (None, r#"{"index":0}"#),
        (Some("message_stop"), "null"),
    ]);
    let r = r.unwrap();
    assert_eq!(deltas, [Delta::Text("hi".into())]);
    assert_eq!(r.model, "m2");
    assert_eq!(r.usage, Default::default());
}

#[test]
fn thinking_signatures_and_tool_input_accumulate_per_block() {
    let (r, deltas) = run(&named(&[
        START,
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hm"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s1"}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":"Pre","signature":"ab"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"cd"}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"run","input":{}}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"cmd\":"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"thinking_delta","thinking":"misplaced"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"ls\"}"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":9,"delta":{"type":"input_json_delta","partial_json":"lost"}}"#,
        ),
        ("message_delta", r#"{"type":"message_delta","delta":{}}"#),
        STOP,
    ]));
    let r = r.unwrap();
    let call = |delta: &str| Delta::ToolCall {
        call_id: "toolu_1".into(),
        tool_name: "run".into(),
        delta: delta.into(),
    };
    assert_eq!(
        deltas,
        [
            Delta::Thinking("Hm".into()),
            Delta::Thinking("Pre".into()),
            call(r#"{"cmd":"#),
            call(r#""ls"}"#)
        ]
    );
    assert_eq!(
        r.thinking,
        [
            ContentBlock::Thinking {
                text: "Hm".into(),
                signature: Some("s1".into())
            },
            ContentBlock::Thinking {
                text: "Pre".into(),
                signature: Some("abcd".into())
            },
        ]
    );
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(
        (r.tool_calls[0].id.as_str(), r.tool_calls[0].name.as_str()),
        ("toolu_1", "run")
    );
    assert_eq!(r.tool_calls[0].arguments, r#"{"cmd":"ls"}"#);
    // No stop_reason given: tool calls make it tool_use.
    assert_eq!(r.stop_reason, StopReason::ToolUse);
}

#[test]
fn error_events_map_to_kinds() {
    let err = |t: &str, m: &str| format!(r#"{{"type":"error","error":{{"type":"{t}","message":"{m}"}}}}"#);
    let cases = [
        (err("overloaded_error", "Overloaded"), LlmErrorKind::RateLimited),
        (err("rate_limit_error", "slow"), LlmErrorKind::RateLimited),
        (err("api_error", "Internal server error"), LlmErrorKind::ServerError),
        (
            err("invalid_request_error", "prompt is too long: 210000 tokens"),
            LlmErrorKind::ContextWindowExceeded,
        ),
        (err("invalid_request_error", "bad"), LlmErrorKind::BadRequest),
        (
            err("authentication_error", "key sk-ant-secret is invalid"),
            LlmErrorKind::AuthenticationFailed,
        ),
        (err("permission_error", "no"), LlmErrorKind::PermissionDenied),
        (err("not_found_error", "model: x"), LlmErrorKind::ModelNotFound),
        (err("something_new", "?"), LlmErrorKind::ServerError),
        (
            r#"{"type":"error","error":{"code":529,"message":"busy"}}"#.into(),
            LlmErrorKind::RateLimited,
        ),
        (
            r#"{"type":"error","message":"no error object","code":"rate_limit"}"#.into(),
            LlmErrorKind::RateLimited,
        ),
        (
            r#"{"type":"error","error":null,"message":"null error"}"#.into(),
            LlmErrorKind::ServerError,
        ),
        (r#"{"error":"a bare string"}"#.into(), LlmErrorKind::ServerError),
        (r#""overloaded""#.into(), LlmErrorKind::ServerError),
        ("[]".into(), LlmErrorKind::ServerError),
    ];
    for (data, kind) in &cases {
        let (r, _) = run(&[START, ("ping", r#"{"type":"ping"}"#), ("error", data)].map(|(n, d)| (Some(n), d)));
        let e = r.unwrap_err();
        assert_eq!(e.kind, *kind, "{data}: {e}");
        assert!(!e.message.contains(KEY), "{}", e.message);
        // The same classification as for the event parsed as a `Value`.
        let v: Value = serde_json::from_str(data).unwrap();
        let expected = http::classify_stream_error("anthropic", &v, Some(KEY));
        assert_eq!(
            (e.kind, &e.message, e.status),
            (expected.kind, &expected.message, expected.status)
        );
    }
    let (r, _) = run(&named(&[("error", &err("overloaded_error", "Overloaded"))]));
    assert_eq!(
        r.unwrap_err().message,
        "anthropic stream error overloaded_error: Overloaded"
    );
}

#[test]
fn incomplete_or_garbled_streams_fail() {
    let (r, _) = run(&named(&[
        START,
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"cut"}}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#,
        ),
    ]));
    let e = r.unwrap_err();
    assert_eq!(e.kind, LlmErrorKind::StreamInterrupted);
    assert_eq!(e.message, "anthropic: stream ended before message_stop");

    // Nothing before the end: an empty reply, not an interrupted one.
    let (r, _) = run(&named(&[
        START,
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#,
        ),
    ]));
    assert_eq!(r.unwrap_err().kind, LlmErrorKind::EmptyResponse);

    // OpenAI's end marker means nothing here.
    for data in ["[DONE]", "{not json"] {
        let (r, _) = run(&named(&[START, ("message_stop", data)]));
        let e = r.unwrap_err();
        assert_eq!(e.kind, LlmErrorKind::ResponseMalformed, "{data}");
        assert!(
            e.message.starts_with("anthropic: unparseable event data"),
            "{}",
            e.message
        );
    }
}

#[test]
fn input_json_fragments_stream_as_deltas_of_their_call() {
    let (r, deltas) = run(&named(&[
        START,
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"run","input":{}}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"cmd\":"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"ls\"}"}}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"}}"#,
        ),
        STOP,
    ]));
    assert_eq!(r.unwrap().tool_calls[0].arguments, r#"{"cmd":"ls"}"#);
    let call = |delta: &str| Delta::ToolCall {
        call_id: "toolu_1".into(),
        tool_name: "run".into(),
        delta: delta.into(),
    };
    assert_eq!(deltas, [call(r#"{"cmd":"#), call(r#""ls"}"#)]);
}

#[test]
fn usage_without_counts_is_no_usage() {
    let start = (
        "message_start",
        r#"{"type":"message_start","message":{"model":"claude-x","usage":{}}}"#,
    );
    let (r, _) = run(&named(&[
        start,
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ]));
    assert!(!r.unwrap().usage_reported);
}
