//! OpenTelemetry traces over OTLP, following the GenAI semantic conventions: `invoke_agent {agent}`
//! per claim, `chat {model}` per model request, `execute_tool {tool}` per tool call, and a server
//! span per HTTP request. On only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) is
//! set: otherwise no tracer exists and every function here returns at its first check, so spans
//! cost nothing.
//!
//! A ticket's spans continue the trace of the request that created it: the `traceparent` of
//! `POST /v1/tickets` (through its server span) is stored with the ticket, and the claim, in
//! whichever process, starts `invoke_agent` under it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
static TRACER: OnceLock<SdkTracer> = OnceLock::new();
/// `AGENTDESK_TRACE_CONTENT=true`: spans carry messages, tool arguments and results.
static CONTENT: AtomicBool = AtomicBool::new(false);

/// The service name when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "agentdesk";

/// The standard `OTEL_*` variables are read here rather than in the configuration: the SDK's
/// exporter reads the same ones itself, so they stay together, and telemetry depends on nothing.
fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Starts the OTLP exporter when the standard variables ask for one; Ok(false) when they don't.
/// Call once, before the runtime starts (the HTTP exporter's blocking client builds its own).
/// The exporter honours `OTEL_EXPORTER_OTLP_{,TRACES_}{ENDPOINT,HEADERS,TIMEOUT,PROTOCOL}`, the
/// SDK `OTEL_TRACES_SAMPLER{,_ARG}` and `OTEL_BSP_*`, the resource `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES`; `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it off.
pub fn init_from_env() -> anyhow::Result<bool> {
    if env("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() && env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none() {
        return Ok(false);
    }
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return Ok(false);
    }
    let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    let protocol = match protocol.as_str() {
        "http/protobuf" => Protocol::HttpBinary,
        "http/json" => Protocol::HttpJson,
        other => anyhow::bail!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={other} is not supported: use http/protobuf (the default, port 4318) or http/json"
        ),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    let named = env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES")
            .is_some_and(|a| a.split(',').any(|kv| kv.trim().starts_with("service.name=")));
    if !named {
        resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer(DEFAULT_SERVICE_NAME);
    CONTENT.store(
        env("AGENTDESK_TRACE_CONTENT").is_some_and(|v| v.eq_ignore_ascii_case("true")),
        Ordering::Relaxed,
    );
    let _ = TRACER.set(tracer);
    let _ = PROVIDER.set(provider);
    Ok(true)
}

/// Exports what is left and stops the exporter (at exit).
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        if let Err(err) = provider.shutdown() {
            eprintln!("agentdesk: could not export the last spans: {err}");
        }
    }
}

fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
}

pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// Whether spans may carry message contents (`AGENTDESK_TRACE_CONTENT=true`).
pub fn content_enabled() -> bool {
    enabled() && CONTENT.load(Ordering::Relaxed)
}

/// The context a W3C `traceparent` (with its `tracestate`, if any) names; None when it is absent
/// or malformed.
fn remote_context(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Context> {
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_owned(), traceparent?.to_owned());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

fn traceparent_of(cx: &Context) -> Option<String> {
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    carrier.remove("traceparent")
}

/// The trace context to store with a new ticket: the current server span when tracing is on
/// (itself a child of the caller's `traceparent`), else the caller's valid `traceparent` as it
/// came, so that a worker process that traces still continues the caller's trace.
pub fn ticket_trace_context(incoming_traceparent: Option<&str>) -> Option<String> {
    if enabled() {
        if let Some(tp) = traceparent_of(&Context::current()) {
            return Some(tp);
        }
    }
    remote_context(incoming_traceparent, None).and_then(|cx| traceparent_of(&cx))
}

/// An HTTP server span, ended (with the response status) by [`HttpSpan::end`] or on drop.
pub struct HttpSpan {
    pub cx: Context,
}

/// Starts the server span of a request (None when tracing is off). `route` is the route template.
pub fn http_server_span(
    method: &str,
    route: Option<&str>,
    path: &str,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) -> Option<HttpSpan> {
    let tracer = tracer()?;
    let parent = remote_context(traceparent, tracestate).unwrap_or_default();
    let name = match route {
        Some(route) => format!("{method} {route}"),
        None => method.to_owned(),
    };
    let mut attributes = vec![
        KeyValue::new("http.request.method", method.to_owned()),
        KeyValue::new("url.path", path.to_owned()),
    ];
    if let Some(route) = route {
        attributes.push(KeyValue::new("http.route", route.to_owned()));
    }
    let span = tracer
        .span_builder(name)
        .with_kind(SpanKind::Server)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent);
    Some(HttpSpan {
        cx: parent.with_span(span),
    })
}

impl HttpSpan {
    pub fn end(self, status: u16) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("http.response.status_code", i64::from(status)));
        if status >= 500 {
            span.set_attribute(KeyValue::new("error.type", status.to_string()));
            span.set_status(Status::error(""));
        }
        span.end();
    }
}

/// The `invoke_agent {agent}` span of one claim; an inert value when tracing is off. Ended when
/// dropped.
#[derive(Default)]
pub struct AgentSpan {
    cx: Option<Context>,
    ticket_id: String,
}

impl AgentSpan {
    /// Starts the span under the ticket's stored `traceparent` (a new trace without one).
    pub fn start(
        project: &str,
        agent: &str,
        ticket_id: &str,
        ticket_key: &str,
        traceparent: Option<&str>,
    ) -> AgentSpan {
        let Some(tracer) = tracer() else {
            return AgentSpan::default();
        };
        let parent = remote_context(traceparent, None).unwrap_or_default();
        let span = tracer
            .span_builder(format!("invoke_agent {agent}"))
            .with_kind(SpanKind::Internal)
            .with_attributes(vec![
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.agent.name", agent.to_owned()),
                KeyValue::new("gen_ai.conversation.id", ticket_id.to_owned()),
                KeyValue::new("agentdesk.ticket.key", ticket_key.to_owned()),
                KeyValue::new("agentdesk.project", project.to_owned()),
            ])
            .start_with_context(tracer, &parent);
        AgentSpan {
            cx: Some(parent.with_span(span)),
            ticket_id: ticket_id.to_owned(),
        }
    }

    /// How the claim ended (`done`, `failed`, …); a failure marks the span as an error.
    pub fn set_outcome(&self, outcome: &str, failed: bool) {
        if let Some(cx) = &self.cx {
            let span = cx.span();
            span.set_attribute(KeyValue::new("agentdesk.outcome", outcome.to_owned()));
            if failed {
                span.set_attribute(KeyValue::new("error.type", outcome.to_owned()));
                span.set_status(Status::error(outcome.to_owned()));
            }
        }
    }

    /// A `chat {model}` span for one model request, a child of this one.
    pub fn chat(&self, provider: &str, model: &str) -> ChildSpan {
        let (Some(cx), Some(tracer)) = (&self.cx, tracer()) else {
            return ChildSpan(None);
        };
        let span = tracer
            .span_builder(format!("chat {model}"))
            .with_kind(SpanKind::Client)
            .with_attributes(vec![
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.provider.name", provider.to_owned()),
                KeyValue::new("gen_ai.request.model", model.to_owned()),
                KeyValue::new("gen_ai.conversation.id", self.ticket_id.clone()),
            ])
            .start_with_context(tracer, cx);
        ChildSpan(Some(cx.with_span(span)))
    }

    /// An `execute_tool {tool}` span for one tool call, a child of this one.
    pub fn tool(&self, tool: &str, call_id: &str) -> ChildSpan {
        let (Some(cx), Some(tracer)) = (&self.cx, tracer()) else {
            return ChildSpan(None);
        };
        let span = tracer
            .span_builder(format!("execute_tool {tool}"))
            .with_kind(SpanKind::Internal)
            .with_attributes(vec![
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                KeyValue::new("gen_ai.tool.call.id", call_id.to_owned()),
                KeyValue::new("gen_ai.conversation.id", self.ticket_id.clone()),
            ])
            .start_with_context(tracer, cx);
        ChildSpan(Some(cx.with_span(span)))
    }
}

impl Drop for AgentSpan {
    fn drop(&mut self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }
}

/// A `chat` or `execute_tool` span (inert when tracing is off); ended when dropped.
pub struct ChildSpan(Option<Context>);

/// What a model response reports, for its `chat` span.
pub struct ChatResult<'a> {
    pub response_model: &'a str,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub finish_reason: &'a str,
    /// What the request cost in US dollars; None when its model has no price.
    pub cost_usd: Option<f64>,
}

impl ChildSpan {
    pub fn is_recording(&self) -> bool {
        self.0.is_some()
    }

    pub fn chat_result(&self, result: ChatResult<'_>) {
        let Some(cx) = &self.0 else { return };
        let span = cx.span();
        if !result.response_model.is_empty() {
            span.set_attribute(KeyValue::new("gen_ai.response.model", result.response_model.to_owned()));
        }
        span.set_attribute(KeyValue::new("gen_ai.usage.input_tokens", result.input_tokens as i64));
        span.set_attribute(KeyValue::new("gen_ai.usage.output_tokens", result.output_tokens as i64));
        if let Some(cost) = result.cost_usd {
            span.set_attribute(KeyValue::new("gen_ai.usage.cost", cost));
        }
        let reasons = Array::String(vec![StringValue::from(result.finish_reason.to_owned())]);
        span.set_attribute(KeyValue::new("gen_ai.response.finish_reasons", Value::Array(reasons)));
    }

    /// Marks the span failed with `error.type` = `kind`.
    pub fn fail(&self, kind: &str, message: &str) {
        let Some(cx) = &self.0 else { return };
        let span = cx.span();
        span.set_attribute(KeyValue::new("error.type", kind.to_owned()));
        span.set_status(Status::error(message.to_owned()));
    }

    /// Adds attributes computed only when contents are recorded (`AGENTDESK_TRACE_CONTENT=true`).
    pub fn content(&self, attributes: impl FnOnce() -> Vec<(&'static str, String)>) {
        let Some(cx) = &self.0 else { return };
        if !CONTENT.load(Ordering::Relaxed) {
            return;
        }
        let span = cx.span();
        for (key, value) in attributes() {
            span.set_attribute(KeyValue::new(key, value));
        }
    }
}

impl Drop for ChildSpan {
    fn drop(&mut self) {
        if let Some(cx) = &self.0 {
            cx.span().end();
        }
    }
}
