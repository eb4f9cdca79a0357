//! The chunk parsing of the OpenAI stream, fed event data directly.

use serde_json::Value;

use super::Parser;
use crate::llm::stream::replay;
use crate::llm::{http, Delta, LlmError, LlmErrorKind, ModelResponse, StopReason};

const KEY: &str = "sk-secret-key";

fn run(events: &[&str]) -> (Result<ModelResponse, LlmError>, Vec<Delta>) {
    let events: Vec<(Option<&str>, &str)> = events.iter().map(|data| (None, *data)).collect();
    replay(Parser::new("req-model", Some(KEY)), &events)
}

fn text(t: &str) -> Delta {
    Delta::Text(t.to_string())
}

#[test]
fn unknown_fields_and_chunks_that_are_not_objects_are_ignored() {
    let (r, deltas) = run(&[
        r#"{"id":"c1","object":"chat.completion.chunk","system_fingerprint":null,"model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi","refusal":null},"logprobs":null,"finish_reason":null}],"x_extra":{"a":[1,{"b":null}]}}"#,
        r#""keep-alive""#,
        "[1,2]",
        "42",
        "null",
        "   ",
        r#"{"choices":"not a list","error":null}"#,
        r#"{"choices":[{"index":1,"delta":{"content":"another choice"}},7,null]}"#,
        r#"{"choices":[{"delta":{"content":" there"},"finish_reason":"stop"}]}"#,
        "[DONE]",
        "not even looked at",
    ]);
    let r = r.unwrap();
    assert_eq!(deltas, [text("Hi"), text(" there")]);
    assert_eq!(r.text, "Hi there");
    assert_eq!(r.model, "m1");
    assert_eq!(r.stop_reason, StopReason::EndTurn);
}

#[test]
fn fields_of_another_type_read_as_absent() {
    let (r, deltas) = run(&[
        r#"{"model":"","choices":[{"index":"1","delta":{"content":null,"reasoning_content":null,"reasoning":"think"},"finish_reason":5}]}"#,
        r#"{"model":7,"choices":[{"index":0,"delta":"text?","finish_reason":null}],"usage":[1]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":-1,"prompt_tokens_details":null}}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
    ]);
    // No [DONE], but a finish_reason: complete.
    let r = r.unwrap();
    assert_eq!(deltas, [Delta::Thinking("think".into())]);
    assert!(r.thinking.is_empty(), "chat completions reasoning is not sent back");
    assert_eq!(r.model, "req-model");
    assert_eq!(
        (r.usage.input_tokens, r.usage.output_tokens, r.usage.cache_read_tokens),
        (3, 0, 0)
    );
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
}

#[test]
fn tool_calls_are_kept_by_index() {
    let (r, _) = run(&[
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"name":"a","arguments":"{\"p\":"}},{"index":1,"id":"call_x","type":"function","function":{"name":"b","arguments":{"x":1,"a":[true]}}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"","function":{"name":"renamed","arguments":"1}"}},"junk"]},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ]);
    let r = r.unwrap();
    let calls: Vec<(&str, &str, &str)> = r
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        [("call_0", "a", r#"{"p":1}"#), ("call_x", "b", r#"{"x":1,"a":[true]}"#)]
    );
    // "stop" although tools were called.
    assert_eq!(r.stop_reason, StopReason::ToolUse);
}

#[test]
fn error_chunks_map_to_kinds() {
    let cases = [
        (
            r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
            LlmErrorKind::RateLimited,
        ),
        (
            r#"{"error":{"message":"slow down","code":429}}"#,
            LlmErrorKind::RateLimited,
        ),
        (
            r#"{"error":{"message":"maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
            LlmErrorKind::ContextWindowExceeded,
        ),
        (
            r#"{"error":{"message":"The model `x` does not exist","code":"model_not_found"}}"#,
            LlmErrorKind::ModelNotFound,
        ),
        (
            r#"{"error":{"message":"bad key sk-secret-key"}}"#,
            LlmErrorKind::ServerError,
        ),
        (r#"{"error":"boom"}"#, LlmErrorKind::ServerError),
        (
            r#"{"error":{"type":"server_error"},"message":"top-level words"}"#,
            LlmErrorKind::ServerError,
        ),
        (r#"{"error":true,"message":"words"}"#, LlmErrorKind::ServerError),
    ];
    for (data, kind) in cases {
        let (r, deltas) = run(&[r#"{"choices":[{"index":0,"delta":{"content":"partial"}}]}"#, data]);
        let e = r.unwrap_err();
        assert_eq!(e.kind, kind, "{data}: {e}");
        assert_eq!(deltas, [text("partial")], "deltas before the error still went out");
        assert!(!e.message.contains(KEY), "{}", e.message);
        // The same classification as for the error object parsed as a `Value`.
        let v: Value = serde_json::from_str(data).unwrap();
        let expected = http::classify_stream_error("openai", &v, Some(KEY));
        assert_eq!(
            (e.kind, &e.message, e.status),
            (expected.kind, &expected.message, expected.status)
        );
    }
    let (r, _) = run(&[r#"{"error":"boom"}"#]);
    assert_eq!(r.unwrap_err().message, "openai stream error error: boom");
}

#[test]
fn incomplete_or_garbled_streams_fail() {
    let (r, _) = run(&[r#"{"choices":[{"index":0,"delta":{"content":"cut"}}]}"#]);
    let e = r.unwrap_err();
    assert_eq!(e.kind, LlmErrorKind::StreamInterrupted);
    assert_eq!(e.message, "openai: stream ended before a finish_reason or [DONE]");
    assert!(e.unfinished);

    // [DONE] alone is how llama-cpp-python ends a request it interrupts: not a whole reply.
    let (r, _) = run(&[r#"{"choices":[{"index":0,"delta":{"content":"cut"}}]}"#, "[DONE]"]);
    let e = r.unwrap_err();
    assert_eq!(e.kind, LlmErrorKind::StreamInterrupted);
    assert!(
        e.unfinished && e.message.contains("[DONE] came without one"),
        "{}",
        e.message
    );

    // Nothing before the end, whole or not: an empty reply.
    for events in [
        &["[DONE]"][..],
        &[r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#][..],
    ] {
        let (r, _) = run(events);
        assert_eq!(r.unwrap_err().kind, LlmErrorKind::EmptyResponse, "{events:?}");
    }

    let (r, _) = run(&[r#"{"choices":[{"index":0,"delta":{"content":"x"}}"#]);
    let e = r.unwrap_err();
    assert_eq!(e.kind, LlmErrorKind::ResponseMalformed);
    assert!(e.message.starts_with("openai: unparseable event data"), "{}", e.message);
}

#[test]
fn tool_call_arguments_stream_as_deltas_of_their_call() {
    let (r, deltas) = run(&[
        r#"{"choices":[{"index":0,"delta":{"content":"Let me."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"close_ticket","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"result\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"b","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ]);
    assert_eq!(r.unwrap().tool_calls.len(), 2);
    let call = |id: &str, name: &str, delta: &str| Delta::ToolCall {
        call_id: id.into(),
        tool_name: name.into(),
        delta: delta.into(),
    };
    assert_eq!(
        deltas,
        [
            text("Let me."),
            call("call_a", "close_ticket", r#"{"result":"#),
            call("call_a", "close_ticket", "1}"),
            call("call_1", "b", "{}"),
        ]
    );
}

#[test]
fn usage_without_counts_is_no_usage() {
    let finish = r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}"#;
    for usage in [r#"{}"#, r#"{"prompt_tokens":0,"completion_tokens":0}"#] {
        let chunk = format!(r#"{{"choices":[],"usage":{usage}}}"#);
        let (r, _) = run(&[finish, &chunk, "[DONE]"]);
        assert!(!r.unwrap().usage_reported, "{usage}");
    }
    let counted = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
    // A later chunk without counts takes nothing away.
    let (r, _) = run(&[finish, counted, r#"{"choices":[],"usage":{}}"#, "[DONE]"]);
    let r = r.unwrap();
    assert!(r.usage_reported);
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (3, 1));
}
