//! OpenTelemetry traces: the real binary, as an API process and a worker process, exports to an
//! OTLP/HTTP receiver in this test (protobuf decoded with `opentelemetry-proto`). The ticket's
//! spans, in both processes, continue the `traceparent` its creator sent and carry the GenAI
//! attributes. The tracer provider is global to a process, hence child processes.

mod support;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use support::KillOnDrop;
use testkit::fake_llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(30);

/// A span as received, with its resource's `service.name`.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    span: Span,
}

impl Received {
    fn attr(&self, key: &str) -> Option<&AnyValue> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref())
    }

    fn str(&self, key: &str) -> Option<&str> {
        match self.attr(key) {
            Some(AnyValue::StringValue(s)) => Some(s),
            _ => None,
        }
    }

    fn int(&self, key: &str) -> Option<i64> {
        match self.attr(key) {
            Some(AnyValue::IntValue(n)) => Some(*n),
            _ => None,
        }
    }
}

type Spans = Arc<Mutex<Vec<Received>>>;

async fn receive(State(spans): State<Spans>, body: Bytes) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export request");
    let mut received = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
            .map(|v| match v {
                AnyValue::StringValue(s) => s.clone(),
                other => format!("{other:?}"),
            })
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.push(Received {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    ([("content-type", "application/x-protobuf")], answer)
}

/// An OTLP/HTTP receiver on loopback: its base URL and what it received.
async fn start_receiver() -> (String, Spans) {
    let spans: Spans = Arc::default();
    let router = axum::Router::new()
        .route("/v1/traces", post(receive))
        .with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (format!("http://{addr}"), spans)
}

fn spawn(command: &str, database_url: &str, llm: &FakeLlm, otlp: &str, extra: &[(&str, &str)]) -> KillOnDrop {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentdesk"));
    cmd.arg(command)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", database_url)
        .env("OPENAI_BASE_URL", llm.openai_base_url())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
        // Export within a tenth of a second instead of five.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (name, value) in extra {
        cmd.env(name, value);
    }
    KillOnDrop(cmd.spawn().expect("start the agentdesk binary"))
}

/// Waits until spans with every one of `names` arrived in the trace; returns the trace's spans.
async fn wait_spans(spans: &Spans, trace_id: &[u8], names: &[&str]) -> Vec<Received> {
    let seen = support::Describe(|| {
        let seen: Vec<String> = spans.lock().unwrap().iter().map(|r| r.span.name.clone()).collect();
        format!("the spans {names:?} (seen: {seen:?})")
    });
    support::eventually(seen, WAIT, || async {
        let trace: Vec<Received> = spans
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.span.trace_id == trace_id)
            .cloned()
            .collect();
        names
            .iter()
            .all(|n| trace.iter().any(|r| r.span.name == *n))
            .then_some(trace)
    })
    .await
}

fn one<'a>(trace: &'a [Received], name: &str) -> &'a Received {
    let found: Vec<&Received> = trace.iter().filter(|r| r.span.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} span in {trace:#?}");
    found[0]
}

#[tokio::test]
async fn a_tickets_spans_continue_the_callers_trace_across_api_and_worker_processes() {
    let database_url = testkit::testing::fresh_database().await.unwrap();
    let llm = FakeLlm::start().await;
    llm.push(
        Reply::tool_call("close_ticket", json!({ "result": "traced" }))
            .with_call_id("call_traced_1")
            .with_text("Closing it now.")
            .usage(11, 7),
    );
    let (otlp, spans) = start_receiver().await;
    let port = support::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let addr = format!("127.0.0.1:{port}");
    // The API alone first, so it applies the migrations; then a worker in a process of its own.
    let _api = spawn("api", &database_url, &llm, &otlp, &[("AGENTDESK_ADDR", &addr)]);
    let client = reqwest::Client::new();
    support::wait_ready(&client, &base, Duration::from_secs(20)).await;
    let _worker = spawn(
        "worker",
        &database_url,
        &llm,
        &otlp,
        &[("OTEL_SERVICE_NAME", "agentdesk-worker")],
    );

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let (_, created) = support::send(
        client
            .post(format!("{base}/v1/tickets"))
            .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
            .json(&json!({ "task": "Trace this." })),
    )
    .await;
    let key = created["key"].as_str().unwrap();
    let ticket = support::wait_status_at(&client, &base, key, "done", tokio::time::Instant::now() + WAIT).await;
    let ticket_id = ticket["id"].as_str().unwrap();
    let model = llm.requests()[0].body["model"].as_str().unwrap().to_owned();

    let trace_bytes = hex::decode(trace_id).unwrap();
    let chat_name = format!("chat {model}");
    let trace = wait_spans(
        &spans,
        &trace_bytes,
        &[
            "POST /v1/tickets",
            "invoke_agent default",
            &chat_name,
            "execute_tool close_ticket",
        ],
    )
    .await;

    // The server span is the caller's child, in the API process.
    let server = one(&trace, "POST /v1/tickets");
    assert_eq!(hex::encode(&server.span.parent_span_id), caller_span);
    assert_eq!(server.service, "agentdesk");
    assert_eq!(server.str("http.request.method"), Some("POST"));
    assert_eq!(server.str("http.route"), Some("/v1/tickets"));
    assert_eq!(server.int("http.response.status_code"), Some(201));

    // The claim, in the worker process, continues under it.
    let agent = one(&trace, "invoke_agent default");
    assert_eq!(agent.service, "agentdesk-worker");
    assert_eq!(agent.span.parent_span_id, server.span.span_id);
    assert_eq!(agent.str("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(agent.str("gen_ai.agent.name"), Some("default"));
    assert_eq!(agent.str("gen_ai.conversation.id"), Some(ticket_id));

    let chat = one(&trace, &chat_name);
    assert_eq!(chat.span.parent_span_id, agent.span.span_id);
    assert_eq!(chat.str("gen_ai.operation.name"), Some("chat"));
    assert_eq!(chat.str("gen_ai.provider.name"), Some("openai"));
    assert_eq!(chat.str("gen_ai.request.model"), Some(model.as_str()));
    assert!(chat.str("gen_ai.response.model").is_some_and(|m| !m.is_empty()));
    assert_eq!(chat.int("gen_ai.usage.input_tokens"), Some(11));
    assert_eq!(chat.int("gen_ai.usage.output_tokens"), Some(7));
    assert_eq!(chat.str("gen_ai.conversation.id"), Some(ticket_id));
    match chat.attr("gen_ai.response.finish_reasons") {
        Some(AnyValue::ArrayValue(reasons)) => {
            assert_eq!(reasons.values.len(), 1);
            assert!(matches!(&reasons.values[0].value, Some(AnyValue::StringValue(r)) if r == "tool_use"));
        }
        other => panic!("finish reasons: {other:?}"),
    }
    // No contents unless asked for.
    assert!(chat.attr("gen_ai.input.messages").is_none());
    assert!(chat.attr("gen_ai.output.messages").is_none());

    let tool = one(&trace, "execute_tool close_ticket");
    assert_eq!(tool.span.parent_span_id, agent.span.span_id);
    assert_eq!(tool.str("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(tool.str("gen_ai.tool.name"), Some("close_ticket"));
    assert_eq!(tool.str("gen_ai.tool.call.id"), Some("call_traced_1"));
    assert!(tool.attr("gen_ai.tool.call.arguments").is_none());
}

#[tokio::test]
async fn contents_are_recorded_only_when_asked_for() {
    let database_url = testkit::testing::fresh_database().await.unwrap();
    let llm = FakeLlm::start().await;
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "secret sauce" })).with_call_id("call_c"));
    let (otlp, spans) = start_receiver().await;
    let port = support::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let addr = format!("127.0.0.1:{port}");
    let _serve = spawn(
        "serve",
        &database_url,
        &llm,
        &otlp,
        &[("AGENTDESK_ADDR", &addr), ("AGENTDESK_TRACE_CONTENT", "true")],
    );
    let client = reqwest::Client::new();
    support::wait_ready(&client, &base, Duration::from_secs(20)).await;
    let created = support::create_ticket_at(&client, &base, json!({ "task": "The recipe of the sauce" })).await;
    support::wait_status_at(
        &client,
        &base,
        created["key"].as_str().unwrap(),
        "done",
        tokio::time::Instant::now() + WAIT,
    )
    .await;
    // Without a traceparent the ticket starts a trace of its own, rooted at the server span.
    let server_trace = support::eventually("the server span of the create", WAIT, || async {
        spans
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.span.name == "POST /v1/tickets")
            .map(|r| r.span.trace_id.clone())
    })
    .await;
    let trace = wait_spans(
        &spans,
        &server_trace,
        &["invoke_agent default", "execute_tool close_ticket"],
    )
    .await;
    let chat = trace
        .iter()
        .find(|r| r.span.name.starts_with("chat "))
        .expect("a chat span");
    assert!(chat
        .str("gen_ai.input.messages")
        .is_some_and(|m| m.contains("The recipe of the sauce")));
    assert!(chat
        .str("gen_ai.output.messages")
        .is_some_and(|m| m.contains("close_ticket")));
    let tool = one(&trace, "execute_tool close_ticket");
    assert!(tool
        .str("gen_ai.tool.call.arguments")
        .is_some_and(|a| a.contains("secret sauce")));
    assert!(tool.str("gen_ai.tool.call.id") == Some("call_c"));
}
