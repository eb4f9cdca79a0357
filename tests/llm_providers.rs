//! The providers against the fake model server, over real HTTP.

use std::time::{Duration, Instant};

use agentdesk::llm::anthropic::Anthropic;
use agentdesk::llm::openai::OpenAi;
use agentdesk::llm::{
    ContentBlock, Delta, LlmError, LlmErrorKind, Message, ModelRequest, ModelResponse, Provider, Providers, Role,
    StopReason, ToolSpec,
};
use serde_json::{json, Value};
use testkit::fake_llm::{FakeLlm, Reply};

const IDLE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    OpenAi,
    Anthropic,
}

const BOTH: [Kind; 2] = [Kind::OpenAi, Kind::Anthropic];

fn provider(fake: &FakeLlm, kind: Kind) -> Box<dyn Provider> {
    match kind {
        Kind::OpenAi => Box::new(OpenAi::new(fake.openai_base_url(), Some("sk-test-key".into()))),
        Kind::Anthropic => Box::new(Anthropic::new(
            fake.anthropic_base_url(),
            Some("sk-ant-test-key".into()),
        )),
    }
}

fn simple_request() -> ModelRequest {
    ModelRequest {
        model: "test-model".into(),
        system: "You are a careful engineer.".into(),
        messages: vec![Message {
            role: Role::User,
            content: vec![ContentBlock::text("Fix the bug")],
        }],
        ..Default::default()
    }
}

async fn run_with(
    fake: &FakeLlm,
    kind: Kind,
    req: &ModelRequest,
    idle: Duration,
) -> (Result<ModelResponse, LlmError>, Vec<Delta>) {
    let p = provider(fake, kind);
    let mut deltas = Vec::new();
    let res = p.stream(req, &mut |d| deltas.push(d), idle).await;
    (res, deltas)
}

async fn run(fake: &FakeLlm, kind: Kind, reply: Reply) -> (Result<ModelResponse, LlmError>, Vec<Delta>) {
    fake.push(reply);
    run_with(fake, kind, &simple_request(), IDLE).await
}

async fn run_err(fake: &FakeLlm, kind: Kind, reply: Reply) -> LlmError {
    match run(fake, kind, reply).await.0 {
        Ok(r) => panic!("{kind:?}: expected an error, got {r:?}"),
        Err(e) => e,
    }
}

fn text_of(deltas: &[Delta]) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            Delta::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn thinking_of(deltas: &[Delta]) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            Delta::Thinking(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn text_streams_in_order_with_usage() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let text = "Hello, streaming wörld — with ✓ unicode!";
        let (res, deltas) = run(&fake, kind, Reply::text(text).usage(42, 7)).await;
        let r = res.unwrap();
        assert!(deltas.len() >= 2, "{kind:?}: expected several deltas, got {deltas:?}");
        assert_eq!(text_of(&deltas), text, "{kind:?}");
        assert_eq!(r.text, text);
        assert_eq!(r.usage.input_tokens, 42, "{kind:?}");
        assert_eq!(r.usage.output_tokens, 7, "{kind:?}");
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert_eq!(r.model, "test-model");
        assert!(r.tool_calls.is_empty());
    }
}

#[tokio::test]
async fn deltas_arrive_while_streaming() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        fake.push(Reply::text("one two three four").chunk_delay(Duration::from_millis(60)));
        let p = provider(&fake, kind);
        let start = Instant::now();
        let mut stamps = Vec::new();
        let r = p
            .stream(&simple_request(), &mut |_| stamps.push(start.elapsed()), IDLE)
            .await
            .unwrap();
        let total = start.elapsed();
        assert_eq!(r.text, "one two three four");
        assert!(
            stamps[0] + Duration::from_millis(100) < total,
            "{kind:?}: first delta at {:?}, done at {total:?}",
            stamps[0]
        );
    }
}

#[tokio::test]
async fn cache_tokens_are_reported() {
    let fake = FakeLlm::start().await;
    let (res, _) = run(&fake, Kind::OpenAi, Reply::text("hi").usage(100, 3).cache_tokens(64, 0)).await;
    assert_eq!(res.unwrap().usage.cache_read_tokens, 64);
    let (res, _) = run(
        &fake,
        Kind::Anthropic,
        Reply::text("hi").usage(100, 3).cache_tokens(64, 16),
    )
    .await;
    let u = res.unwrap().usage;
    assert_eq!((u.cache_read_tokens, u.cache_creation_tokens), (64, 16));
}

#[tokio::test]
async fn tool_call_arguments_reassembled_from_fragments() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let args = json!({"path": "src/main.rs", "content": "fn main() { println!(\"hé\"); }"});
        let (res, deltas) = run(
            &fake,
            kind,
            Reply::tool_call("write_file", args.clone()).with_text("Writing it."),
        )
        .await;
        let r = res.unwrap();
        assert_eq!(text_of(&deltas), "Writing it.");
        assert_eq!(r.tool_calls.len(), 1, "{kind:?}");
        let call = &r.tool_calls[0];
        assert_eq!(call.name, "write_file");
        assert!(call.id.starts_with("call_"), "{kind:?}: id {}", call.id);
        assert_eq!(serde_json::from_str::<Value>(&call.arguments).unwrap(), args);
        assert_eq!(r.stop_reason, StopReason::ToolUse);
    }
}

#[tokio::test]
async fn two_tool_calls_keep_their_order() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let (res, _) = run(
            &fake,
            kind,
            Reply::tool_calls(vec![
                ("read_file", json!({"path": "a.rs"})),
                ("run", json!({"cmd": "cargo test"})),
            ]),
        )
        .await;
        let r = res.unwrap();
        let names: Vec<&str> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["read_file", "run"], "{kind:?}");
        assert_eq!(
            serde_json::from_str::<Value>(&r.tool_calls[1].arguments).unwrap(),
            json!({"cmd": "cargo test"})
        );
        assert_ne!(r.tool_calls[0].id, r.tool_calls[1].id);
    }
}

#[tokio::test]
async fn truncated_arguments_are_passed_through_verbatim() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let raw = r#"{"path": "src/lib.rs", "content": "unfinished"#;
        let (res, _) = run(
            &fake,
            kind,
            Reply::raw_tool_call("write_file", raw)
                .with_call_id("call_fixed")
                .with_stop_reason("max_tokens"),
        )
        .await;
        let r = res.unwrap();
        assert_eq!(r.tool_calls[0].arguments, raw);
        assert_eq!(r.tool_calls[0].id, "call_fixed");
        assert_eq!(r.stop_reason, StopReason::MaxTokens, "{kind:?}");
    }
}

#[tokio::test]
async fn anthropic_thinking_round_trip() {
    let fake = FakeLlm::start().await;
    let (res, deltas) = run(
        &fake,
        Kind::Anthropic,
        Reply::text("The answer.")
            .with_thinking("Let me consider the bug.", "sig-XYZ==")
            .usage(10, 20),
    )
    .await;
    let r = res.unwrap();
    assert_eq!(thinking_of(&deltas), "Let me consider the bug.");
    assert_eq!(text_of(&deltas), "The answer.");
    // The signature delta emits nothing: every delta is thinking text or answer text.
    assert!(deltas.iter().all(|d| match d {
        Delta::Text(t) | Delta::Thinking(t) => !t.contains("sig-XYZ"),
        Delta::ToolCall { delta, .. } => !delta.contains("sig-XYZ"),
    }));
    assert_eq!(
        r.thinking,
        vec![ContentBlock::Thinking {
            text: "Let me consider the bug.".into(),
            signature: Some("sig-XYZ==".into()),
        }]
    );

    // Send it back: the block must reach the API verbatim, an unsigned one not at all.
    let mut req = simple_request();
    let mut assistant = r.thinking.clone();
    assistant.push(ContentBlock::Thinking {
        text: "unsigned".into(),
        signature: None,
    });
    assistant.push(ContentBlock::text("The answer."));
    req.messages.push(Message {
        role: Role::Assistant,
        content: assistant,
    });
    req.messages.push(Message {
        role: Role::User,
        content: vec![ContentBlock::text("thanks")],
    });
    fake.push(Reply::text("ok"));
    run_with(&fake, Kind::Anthropic, &req, IDLE).await.0.unwrap();
    let body = fake.requests().last().unwrap().body.clone();
    let content = &body["messages"][1]["content"];
    assert_eq!(
        content,
        &json!([
            {"type": "thinking", "thinking": "Let me consider the bug.", "signature": "sig-XYZ=="},
            {"type": "text", "text": "The answer."},
        ])
    );
}

#[tokio::test]
async fn openai_reasoning_is_streamed_but_not_stored() {
    let fake = FakeLlm::start().await;
    let (res, deltas) = run(
        &fake,
        Kind::OpenAi,
        Reply::text("Done.").with_thinking("hmm, think", "sig"),
    )
    .await;
    let r = res.unwrap();
    assert_eq!(thinking_of(&deltas), "hmm, think");
    assert!(r.thinking.is_empty());
    assert_eq!(r.text, "Done.");
}

#[tokio::test]
async fn rate_limit_with_retry_after() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let e = run_err(&fake, kind, Reply::status(429).retry_after(7)).await;
        assert_eq!(e.kind, LlmErrorKind::RateLimited, "{kind:?}");
        assert_eq!(e.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(e.status, Some(429));
        assert!(e.kind.is_retryable());
        assert!(e.message.contains("429"), "{}", e.message);
    }
}

#[tokio::test]
async fn overloaded_is_rate_limited() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let e = run_err(&fake, kind, Reply::status(529)).await;
        assert_eq!(e.kind, LlmErrorKind::RateLimited, "{kind:?}");
        let e = run_err(&fake, kind, Reply::error_event("overloaded_error")).await;
        assert_eq!(e.kind, LlmErrorKind::RateLimited, "{kind:?}: {e}");
        assert_eq!(e.status, None);
    }
}

#[tokio::test]
async fn mid_stream_api_error_is_server_error() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let e = run_err(&fake, kind, Reply::error_event("api_error")).await;
        assert_eq!(e.kind, LlmErrorKind::ServerError, "{kind:?}: {e}");
    }
}

#[tokio::test]
async fn http_errors_are_classified() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let cases = [
            (Reply::status(500), LlmErrorKind::ServerError),
            (Reply::status(503), LlmErrorKind::ServerError),
            (Reply::status(401), LlmErrorKind::AuthenticationFailed),
            (Reply::status(403), LlmErrorKind::PermissionDenied),
            (Reply::status(404), LlmErrorKind::ModelNotFound),
            (Reply::status(400), LlmErrorKind::BadRequest),
            (Reply::context_overflow(), LlmErrorKind::ContextWindowExceeded),
        ];
        for (reply, expected) in cases {
            let e = run_err(&fake, kind, reply).await;
            assert_eq!(e.kind, expected, "{kind:?}: {e}");
            assert!(!e.message.contains("test-key"), "key leaked: {}", e.message);
        }
    }
}

#[tokio::test]
async fn garbage_is_malformed() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let e = run_err(&fake, kind, Reply::text("some text here").garbage_after(2)).await;
        assert_eq!(e.kind, LlmErrorKind::ResponseMalformed, "{kind:?}: {e}");
        assert!(!e.kind.is_retryable());
    }
}

#[tokio::test]
async fn dropped_connection_is_interrupted() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let e = run_err(&fake, kind, Reply::text("some text here").drop_after(2)).await;
        assert_eq!(e.kind, LlmErrorKind::StreamInterrupted, "{kind:?}: {e}");
        assert!(e.kind.is_retryable());
    }
}

#[tokio::test]
async fn stalled_stream_times_out() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        fake.push(Reply::text("some text here").stall_after(2));
        let start = Instant::now();
        let (res, deltas) = run_with(&fake, kind, &simple_request(), Duration::from_millis(300)).await;
        let e = res.unwrap_err();
        assert_eq!(e.kind, LlmErrorKind::StreamStalled, "{kind:?}: {e}");
        assert!(start.elapsed() < Duration::from_secs(1), "{:?}", start.elapsed());
        if kind == Kind::OpenAi {
            // role chunk, then the first text delta
            assert_eq!(deltas.len(), 1);
        }
    }
}

#[tokio::test]
async fn slow_first_byte_times_out() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        fake.push(Reply::text("late").first_byte_delay(Duration::from_secs(2)));
        let start = Instant::now();
        let (res, _) = run_with(&fake, kind, &simple_request(), Duration::from_millis(300)).await;
        assert_eq!(res.unwrap_err().kind, LlmErrorKind::StreamStalled);
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}

#[tokio::test]
async fn refused_connection_fails_fast() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let providers: [Box<dyn Provider>; 2] = [
        Box::new(OpenAi::new(format!("http://127.0.0.1:{port}/v1"), None)),
        Box::new(Anthropic::new(format!("http://127.0.0.1:{port}"), None)),
    ];
    for p in providers {
        let e = p.stream(&simple_request(), &mut |_| {}, IDLE).await.unwrap_err();
        assert_eq!(e.kind, LlmErrorKind::ConnectionFailed, "{}: {e}", p.name());
    }
}

fn conversation() -> ModelRequest {
    ModelRequest {
        model: "test-model".into(),
        system: "SYSTEM PROMPT".into(),
        messages: vec![
            Message {
                role: Role::User,
                content: vec![ContentBlock::text("Please look at two files")],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Thinking {
                        text: "plan".into(),
                        signature: Some("s1".into()),
                    },
                    ContentBlock::text("Reading both."),
                    ContentBlock::ToolUse {
                        id: "call_a".into(),
                        name: "read_file".into(),
                        input: json!({"path": "a.rs"}),
                    },
                    ContentBlock::ToolUse {
                        id: "call_b".into(),
                        name: "read_file".into(),
                        input: json!({"path": "b.rs"}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "call_a".into(),
                    output: "contents of a".into(),
                    is_error: false,
                }],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::text("also note this"),
                    ContentBlock::ToolResult {
                        tool_use_id: "call_b".into(),
                        output: "no such file".into(),
                        is_error: true,
                    },
                ],
            },
        ],
        tools: vec![ToolSpec::new(
            "read_file",
            "Reads a file",
            &json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        )],
        temperature: Some(0.2),
        max_tokens: None,
        thinking_budget: None,
        tool_choice: Default::default(),
    }
}

#[tokio::test]
async fn openai_request_mapping() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("ok"));
    run_with(&fake, Kind::OpenAi, &conversation(), IDLE).await.0.unwrap();
    let rec = fake.requests().pop().unwrap();
    assert_eq!(rec.path, "/v1/chat/completions");
    assert_eq!(rec.header("authorization"), Some("Bearer sk-test-key"));
    let b = rec.body;
    assert_eq!(b["stream"], json!(true));
    assert_eq!(b["stream_options"]["include_usage"], json!(true));
    assert_eq!(b["temperature"], json!(0.2));
    assert!(b.get("max_tokens").is_none());
    assert_eq!(
        b["tools"],
        json!([{"type": "function", "function": {"name": "read_file", "description": "Reads a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}])
    );
    let msgs = b["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool", "user"]);
    assert_eq!(msgs[0]["content"], "SYSTEM PROMPT");
    assert_eq!(msgs[2]["content"], "Reading both.");
    assert_eq!(msgs[2]["tool_calls"][0]["id"], "call_a");
    assert_eq!(msgs[2]["tool_calls"][0]["type"], "function");
    let args = msgs[2]["tool_calls"][1]["function"]["arguments"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(args).unwrap(), json!({"path": "b.rs"}));
    assert_eq!(
        msgs[3],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "contents of a"})
    );
    assert_eq!(msgs[4]["tool_call_id"], "call_b");
    assert_eq!(msgs[5]["content"], "also note this");
    assert!(!b.to_string().contains("plan"), "thinking must not be sent to OpenAI");
}

#[tokio::test]
async fn openai_assistant_without_text_has_empty_content_never_null() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("ok"));
    let mut req = conversation();
    req.system.clear();
    req.messages[1]
        .content
        .retain(|b| matches!(b, ContentBlock::ToolUse { .. }));
    run_with(&fake, Kind::OpenAi, &req, IDLE).await.0.unwrap();
    let b = fake.requests().pop().unwrap().body;
    assert_eq!(b["messages"][0]["role"], "user", "no empty system message");
    // Local servers (llama-cpp-python) refuse `"content": null`.
    assert_eq!(b["messages"][1]["content"], "");
}

#[tokio::test]
async fn anthropic_request_mapping() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("ok"));
    run_with(&fake, Kind::Anthropic, &conversation(), IDLE).await.0.unwrap();
    let rec = fake.requests().pop().unwrap();
    assert_eq!(rec.path, "/v1/messages");
    assert_eq!(rec.header("x-api-key"), Some("sk-ant-test-key"));
    assert_eq!(rec.header("anthropic-version"), Some("2023-06-01"));
    assert!(rec.header("content-type").unwrap().starts_with("application/json"));
    let b = rec.body;
    assert_eq!(b["system"], "SYSTEM PROMPT");
    assert_eq!(b["max_tokens"], json!(8192));
    assert_eq!(b["stream"], json!(true));
    assert_eq!(b["temperature"], json!(0.2));
    assert_eq!(b["tools"][0]["input_schema"]["type"], "object");
    let msgs = b["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "consecutive user messages merge: {msgs:?}");
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(
        msgs[1]["content"][0],
        json!({"type": "thinking", "thinking": "plan", "signature": "s1"})
    );
    assert_eq!(
        msgs[1]["content"][2],
        json!({"type": "tool_use", "id": "call_a", "name": "read_file", "input": {"path": "a.rs"}})
    );
    assert_eq!(msgs[2]["role"], "user");
    assert_eq!(
        msgs[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "call_a", "content": "contents of a", "is_error": false},
            {"type": "tool_result", "tool_use_id": "call_b", "content": "no such file", "is_error": true},
            {"type": "text", "text": "also note this"},
        ])
    );
}

#[tokio::test]
async fn keyed_replies_and_waiting() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("from the queue"));
    fake.push_for("TICKET-7", Reply::text("for ticket 7"));
    fake.set_responder(|body| Reply::text(&format!("echo {}", body["model"].as_str().unwrap_or("?"))));

    let mut req = simple_request();
    req.messages[0].content = vec![ContentBlock::text("Work on TICKET-7")];
    let (r, _) = run_with(&fake, Kind::OpenAi, &req, IDLE).await;
    assert_eq!(r.unwrap().text, "for ticket 7");
    let (r, _) = run_with(&fake, Kind::Anthropic, &req, IDLE).await;
    assert_eq!(r.unwrap().text, "from the queue");
    let (r, _) = run_with(&fake, Kind::Anthropic, &req, IDLE).await;
    assert_eq!(r.unwrap().text, "echo test-model");

    assert_eq!(fake.request_count(), 3);
    assert!(fake.wait_for_requests(3, Duration::from_millis(10)).await);
    assert!(!fake.wait_for_requests(4, Duration::from_millis(50)).await);
}

#[tokio::test]
async fn paced_tokens_for_benchmarks() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("").tokens_per_second(200, 20));
    let start = Instant::now();
    let (r, deltas) = run_with(&fake, Kind::OpenAi, &simple_request(), IDLE).await;
    let r = r.unwrap();
    assert_eq!(deltas.len(), 20);
    assert_eq!(r.usage.output_tokens, 20);
    assert!(start.elapsed() >= Duration::from_millis(90), "{:?}", start.elapsed());
}

#[tokio::test]
async fn dropping_the_future_cancels_the_request() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("never finishes").stall_after(1));
    let p = provider(&fake, Kind::Anthropic);
    let req = simple_request();
    let res = tokio::time::timeout(
        Duration::from_millis(200),
        p.stream(&req, &mut |_| {}, Duration::from_secs(60)),
    )
    .await;
    assert!(res.is_err(), "the stalled stream must still be pending");
    // The provider stays usable after a cancelled request.
    fake.push(Reply::text("fresh"));
    let r = p.stream(&req, &mut |_| {}, IDLE).await.unwrap();
    assert_eq!(r.text, "fresh");
}

#[tokio::test]
async fn providers_select_by_name() {
    let fake = FakeLlm::start().await;
    let providers = Providers::new(Some(OpenAi::new(fake.openai_base_url(), None)), None);
    assert_eq!(providers.detected(), Some("openai"));
    let p = providers.get(None).unwrap();
    fake.push(Reply::text("via detection"));
    let r = p.stream(&simple_request(), &mut |_| {}, IDLE).await.unwrap();
    assert_eq!(r.text, "via detection");
    assert!(fake.requests()[0].header("authorization").is_none());
    let e = providers.get(Some("anthropic")).err().unwrap();
    assert_eq!(e.kind, LlmErrorKind::ProviderUnconfigured);
    assert_eq!(
        e.message,
        "provider 'anthropic' is not configured: set ANTHROPIC_API_KEY"
    );
}

#[tokio::test]
async fn connections_are_reused_across_requests() {
    let fake = FakeLlm::start().await;
    for kind in BOTH {
        let p = provider(&fake, kind);
        for _ in 0..3 {
            fake.push(Reply::tool_call("run", json!({"cmd": "ls"})).with_text("hi"));
            p.stream(&simple_request(), &mut |_| {}, IDLE).await.unwrap();
        }
    }
    let reqs = fake.requests();
    assert_eq!(reqs[0].peer, reqs[2].peer, "openai requests opened new connections");
    assert_eq!(reqs[3].peer, reqs[5].peer, "anthropic requests opened new connections");
}

/// With HTTP/2 (`AGENTDESK_OPENAI_HTTP2`), requests in flight at once share one connection, so a
/// ticket waiting on the model holds a stream rather than a socket; without it, each has its own.
#[tokio::test]
async fn http2_carries_requests_in_flight_at_once_on_one_connection() {
    for kind in BOTH {
        for http2 in [false, true] {
            let fake = FakeLlm::start().await;
            fake.set_reply(Reply::text("thought it over").first_byte_delay(Duration::from_millis(300)));
            let p: Box<dyn Provider> = match kind {
                Kind::OpenAi => Box::new(OpenAi::new(fake.openai_base_url(), None).with_http2(http2)),
                Kind::Anthropic => {
                    Box::new(Anthropic::new(fake.anthropic_base_url(), Some("k".into())).with_http2(http2))
                }
            };
            let req = simple_request();
            let calls = (0..3).map(|_| async {
                let mut text = String::new();
                let res = p
                    .stream(
                        &req,
                        &mut |d| {
                            if let Delta::Text(t) = d {
                                text.push_str(&t)
                            }
                        },
                        IDLE,
                    )
                    .await;
                (res, text)
            });
            for (res, text) in futures::future::join_all(calls).await {
                res.unwrap_or_else(|e| panic!("{kind:?}, http2 {http2}: {e:?}"));
                assert_eq!(text, "thought it over");
            }
            assert_eq!(
                fake.max_in_flight(),
                3,
                "{kind:?}: the three requests were in flight at once"
            );
            let peers: std::collections::HashSet<_> = fake.requests().iter().map(|r| r.peer).collect();
            assert_eq!(
                peers.len(),
                if http2 { 1 } else { 3 },
                "{kind:?}, http2 {http2}: connections used"
            );
        }
    }
}

#[tokio::test]
async fn a_fake_that_keeps_no_copies_still_counts_requests() {
    let fake = FakeLlm::start().await;
    run(&fake, Kind::OpenAi, Reply::text("kept")).await.0.unwrap();
    fake.keep_requests(false);
    run(&fake, Kind::Anthropic, Reply::text("not kept")).await.0.unwrap();
    assert_eq!(fake.request_count(), 2);
    assert_eq!(fake.requests().len(), 1, "only the request made while keeping is kept");
    assert!(fake.wait_for_requests(2, Duration::from_secs(1)).await);
}

#[tokio::test]
async fn a_fixed_reply_answers_what_no_scripted_reply_does() {
    let fake = FakeLlm::start().await;
    fake.set_reply(Reply::text("always this"));
    fake.push(Reply::text("scripted first"));
    for (kind, expected) in [
        (Kind::OpenAi, "scripted first"),
        (Kind::Anthropic, "always this"),
        (Kind::OpenAi, "always this"),
    ] {
        let (res, _) = run_with(&fake, kind, &simple_request(), IDLE).await;
        let r = res.unwrap();
        assert_eq!(r.text, expected, "{kind:?}");
        assert_eq!(r.model, "test-model", "{kind:?}: the model is read from the request");
    }
}

#[tokio::test]
async fn a_fixed_reply_is_rendered_once_per_model_and_never_ahead_of_a_scripted_one() {
    let fake = FakeLlm::start().await;
    fake.set_reply(Reply::text("first fixed"));
    let mut other_model = simple_request();
    other_model.model = "other-model".into();
    let steps = [
        (None, &simple_request(), "first fixed", "test-model"),
        // The second answer comes from the rendering kept for this model.
        (None, &simple_request(), "first fixed", "test-model"),
        (None, &other_model, "first fixed", "other-model"),
        (
            Some(Reply::text("scripted")),
            &simple_request(),
            "scripted",
            "test-model",
        ),
    ];
    for (scripted, request, text, model) in steps {
        if let Some(reply) = scripted {
            fake.push(reply);
        }
        let r = run_with(&fake, Kind::OpenAi, request, IDLE).await.0.unwrap();
        assert_eq!((r.text.as_str(), r.model.as_str()), (text, model));
    }
    fake.set_reply(Reply::text("second fixed"));
    let r = run_with(&fake, Kind::OpenAi, &simple_request(), IDLE).await.0.unwrap();
    assert_eq!(r.text, "second fixed", "a new fixed reply replaces the kept rendering");
}
