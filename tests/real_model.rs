//! End to end against real OpenAI-compatible model servers of the two families people run
//! locally, both with a real (tiny) model, SmolLM2-135M, on CPU, as `.ci/real-model.sh` starts them:
//! - llama-cpp-python's stock server (`AGENTDESK_REAL_MODEL_URL`);
//! - llama.cpp's `llama-server --jinja --parallel 2` (`AGENTDESK_LLAMA_SERVER_URL`).
//!
//! Each base URL ends in `/v1`. The tests are `#[ignore]`d, so `cargo test` stays fast on a
//! machine without the servers (and says they were ignored); `cargo test --test real_model --
//! --ignored` runs them, as CI does, and fails where a server is not given. Every check runs on
//! both servers.
//!
//! A 135M model follows instructions poorly, so the agents lean on what the servers guarantee: with
//! `tool_choice` naming a tool (llama-cpp-python) or `"required"` (llama-server, which reads only
//! the string forms) the reply is constrained by a grammar to a call of the one tool offered.

mod support;

use std::time::Duration;

use agentdesk::app::Mode;
use agentdesk::llm::openai::OpenAi;
use agentdesk::llm::Providers;
use serde_json::{json, Value};
use support::{event_data, event_kinds, StatusCode, TestApp};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// A real model server and the settings the README gives for it.
struct RealServer {
    /// For messages.
    name: &'static str,
    /// The variable holding its base URL.
    url_var: &'static str,
    /// The model name sent (both servers serve their one model whatever the name).
    model: &'static str,
    /// The context length of one request (`--n_ctx`; llama-server's `-c` over `--parallel`).
    window: u64,
    /// The agent's `tool_choice` that makes the server constrain a reply to a tool call.
    tool_choice: &'static str,
    /// The provider's `max_concurrent`: llama-cpp-python serves one request at a time and
    /// interrupts it for the next; llama-server serves one per slot.
    max_concurrent: u32,
}

const LLAMA_CPP_PYTHON: RealServer = RealServer {
    name: "llama-cpp-python",
    url_var: "AGENTDESK_REAL_MODEL_URL",
    model: "smollm2-135m",
    window: 2048,
    tool_choice: "close_ticket",
    max_concurrent: 1,
};

const LLAMA_SERVER: RealServer = RealServer {
    name: "llama-server",
    url_var: "AGENTDESK_LLAMA_SERVER_URL",
    model: "smollm2-135m",
    window: 2048,
    tool_choice: "required",
    max_concurrent: 2,
};

/// The models run on CPU, next to the service and Postgres.
const TICKET_TIMEOUT: Duration = Duration::from_secs(300);
/// Twelve tickets through one or two requests at a time: a few seconds each on an idle 2-core
/// machine, up to a minute each while a build shares its cores.
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(1200);

/// The servers share the machine's cores: the tests take turns.
static TURN: Mutex<()> = Mutex::const_new(());

impl RealServer {
    /// The server's base URL; the test fails, saying how to start the servers, without it.
    fn url(&self, test: &str) -> String {
        match std::env::var(self.url_var) {
            Ok(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_owned(),
            _ => panic!(
                "real_model::{test} on {} needs {}: `bash .ci/real-model.sh` starts the servers and prints \
                 their URLs",
                self.name, self.url_var
            ),
        }
    }
}

/// API and workers with the built-in OpenAI provider pointed at the server.
async fn start(url: &str) -> TestApp {
    let providers = Providers::new(Some(OpenAi::new(url.to_owned(), None)), None);
    TestApp::spawn_full(Mode::Serve, providers, |config| {
        // Prompt processing on a busy CPU can keep the first token waiting.
        config.stream_idle = Duration::from_secs(240);
    })
    .await
}

/// An agent that must answer with a call of `close_ticket`, taking only tickets labelled `name`.
async fn put_closer(app: &TestApp, server: &RealServer, name: &str, extra: Value) {
    let mut body = json!({
        "role": "You work tickets. Read the task and call close_ticket with a short answer as the result.",
        "provider": "openai",
        "model": server.model,
        "tools": ["close_ticket"],
        "tool_choice": server.tool_choice,
        "temperature": 0,
        "max_tokens": 128,
        "max_request_retries": 2,
        "request_retry_delay_ms": 500,
    });
    for (key, value) in extra.as_object().expect("an object").iter() {
        body[key] = value.clone();
    }
    let (status, agent) = app.put(&format!("/v1/agents/{name}"), body).await;
    assert!(status.is_success(), "PUT /v1/agents/{name}: {status} {agent}");
    assert_eq!(
        agent["tool_choice"], server.tool_choice,
        "the agent keeps its tool_choice: {agent}"
    );
}
/// Polls until the ticket stops working (done, failed, cancelled or waiting), or panics with its
/// events and transcript after `TICKET_TIMEOUT`.
async fn wait_settled(app: &TestApp, key: &str) -> Value {
    wait_settled_by(app, key, Instant::now() + TICKET_TIMEOUT).await
}

/// Like `wait_settled`, with a deadline of the caller's.
async fn wait_settled_by(app: &TestApp, key: &str, deadline: Instant) -> Value {
    loop {
        let (code, ticket) = app.get(&format!("/v1/tickets/{key}")).await;
        assert_eq!(code, StatusCode::OK, "GET /v1/tickets/{key}: {ticket}");
        if ["done", "failed", "cancelled", "waiting"].contains(&ticket["status"].as_str().unwrap_or_default()) {
            return ticket;
        }
        if Instant::now() >= deadline {
            panic!(
                "{key} did not settle in time: {ticket}\n{}",
                diagnosis(app, &ticket).await
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The ticket's event kinds and transcript, for failure messages.
async fn diagnosis(app: &TestApp, ticket: &Value) -> String {
    let kinds = event_kinds(app, ticket["id"].as_str().unwrap_or_default()).await;
    let failed = event_data(app, ticket["id"].as_str().unwrap_or_default(), "request.failed").await;
    let comments = app
        .list_all(&format!(
            "/v1/tickets/{}/comments",
            ticket["key"].as_str().unwrap_or_default()
        ))
        .await;
    format!("ticket: {ticket}\nevents: {kinds:?}\nrequest.failed: {failed:?}\ncomments: {comments:#?}")
}

#[track_caller]
fn assert_done(ticket: &Value, diagnosis: &str) {
    assert_eq!(ticket["status"], "done", "{ticket}\n{diagnosis}");
}

/// Whether the server reports usage on a streamed chat completion asked for it.
async fn server_reports_streaming_usage(server: &RealServer, url: &str) -> bool {
    let response = reqwest::Client::new()
        .post(format!("{url}/chat/completions"))
        .timeout(Duration::from_secs(120))
        .json(&json!({
            "model": server.model,
            "messages": [{ "role": "user", "content": "Say hi." }],
            "max_tokens": 4,
            "stream": true,
            "stream_options": { "include_usage": true },
        }))
        .send()
        .await
        .expect("reach the model server");
    assert!(
        response.status().is_success(),
        "a plain chat completion: {}",
        response.status()
    );
    let body = response.text().await.expect("read the stream");
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .any(|chunk| chunk["usage"].is_object())
}

/// Each check runs once per server, as a test of its own: `CHECK::on_llama_cpp_python` and
/// `CHECK::on_llama_server`.
macro_rules! on_both_servers {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[tokio::test]
            #[ignore = "needs a real model server: bash .ci/real-model.sh, then cargo test --test real_model -- --ignored"]
            async fn on_llama_cpp_python() {
                super::$check(&super::LLAMA_CPP_PYTHON).await;
            }

            #[tokio::test]
            #[ignore = "needs a real model server: bash .ci/real-model.sh, then cargo test --test real_model -- --ignored"]
            async fn on_llama_server() {
                super::$check(&super::LLAMA_SERVER).await;
            }
        }
    )*};
}

on_both_servers!(
    an_agent_whose_tool_choice_names_close_ticket_finishes_a_ticket,
    usage_is_estimated_when_the_server_reports_none,
    compaction_on_a_2048_token_window_keeps_the_task_verbatim,
    twelve_ordinary_tickets_at_once_finish,
);

async fn an_agent_whose_tool_choice_names_close_ticket_finishes_a_ticket(server: &RealServer) {
    let url = server.url("an_agent_whose_tool_choice_names_close_ticket_finishes_a_ticket");
    let _turn = TURN.lock().await;
    let app = start(&url).await;
    put_closer(&app, server, "closer", json!({})).await;
    let ticket = app
        .create_ticket(json!({ "task": "What is the capital of France?", "labels": ["closer"] }))
        .await;
    let key = ticket["key"].as_str().unwrap();
    let settled = wait_settled(&app, key).await;
    let why = diagnosis(&app, &settled).await;
    assert_done(&settled, &why);
    assert!(!settled["result"].is_null(), "close_ticket carried a result: {settled}");
    assert!(settled["usage"]["tool_calls"].as_u64().unwrap_or(0) >= 1, "{settled}");
    let kinds = event_kinds(&app, settled["id"].as_str().unwrap()).await;
    assert!(kinds.contains(&"tool.finished".to_owned()), "{kinds:?}");
    eprintln!("real_model on {}: {key} done with {}", server.name, settled["result"]);
    app.shutdown().await;
}

async fn usage_is_estimated_when_the_server_reports_none(server: &RealServer) {
    let url = server.url("usage_is_estimated_when_the_server_reports_none");
    let _turn = TURN.lock().await;
    let reports = server_reports_streaming_usage(server, &url).await;
    let app = start(&url).await;
    put_closer(&app, server, "counter", json!({})).await;
    let ticket = app
        .create_ticket(json!({ "task": "Name a primary colour.", "labels": ["counter"] }))
        .await;
    let settled = wait_settled(&app, ticket["key"].as_str().unwrap()).await;
    let why = diagnosis(&app, &settled).await;
    assert_done(&settled, &why);
    let usage = &settled["usage"];
    assert!(usage["requests"].as_u64().unwrap_or(0) >= 1, "{usage}");
    assert!(usage["input_tokens"].as_u64().unwrap_or(0) > 0, "{usage}");
    assert!(usage["output_tokens"].as_u64().unwrap_or(0) > 0, "{usage}");
    if reports {
        assert_ne!(usage["estimated"], true, "the server reported usage: {usage}");
    } else {
        assert_eq!(usage["estimated"], true, "the server reports no usage: {usage}");
    }
    eprintln!(
        "real_model on {}: server reports streaming usage: {reports}; ticket usage {usage}",
        server.name
    );
    app.shutdown().await;
}

/// Plain English, about 4 characters per token for the model's tokenizer as for the estimate.
fn notes(n: usize) -> String {
    const SENTENCES: [&str; 6] = [
        "The night shift checked the backup job on the storage server and saw that it finished late again.",
        "Someone restarted the queue worker by hand, which cleared the warning but not the slow disk.",
        "The team agreed to watch the graphs for another day before changing any settings.",
        "A customer wrote that the export page was slow in the morning and fine after lunch.",
        "The database vacuum ran for most of the night and blocked a few reports for a while.",
        "Nobody has found a clear cause yet, so these notes only record what people noticed.",
    ];
    let mut text = format!("Shift notes, part {n}. ");
    for i in 0..18 {
        text.push_str(SENTENCES[(i + n) % SENTENCES.len()]);
        text.push(' ');
    }
    text
}

async fn compaction_on_a_2048_token_window_keeps_the_task_verbatim(server: &RealServer) {
    let url = server.url("compaction_on_a_2048_token_window_keeps_the_task_verbatim");
    let _turn = TURN.lock().await;
    let app = start(&url).await;
    let task = "Task REAL-7: reply with the single word ready. Keep this sentence exactly as written.";
    // The task becomes the transcript's first comment when a ticket is first claimed; the claim
    // here fails at once (the agent names the unconfigured Anthropic provider), so the comments
    // after it make the transcript long before any request is sent.
    let (status, body) = app
        .put(
            "/v1/agents/warmup",
            json!({ "provider": "anthropic", "tools": ["close_ticket"], "max_request_retries": 0 }),
        )
        .await;
    assert!(status.is_success(), "PUT /v1/agents/warmup: {status} {body}");
    let ticket = app.create_ticket(json!({ "task": task, "labels": ["warmup"] })).await;
    let key = ticket["key"].as_str().unwrap();
    let first = wait_settled(&app, key).await;
    assert_eq!(first["status"], "failed", "the warm-up claim fails: {first}");
    let (status, body) = app.delete("/v1/agents/warmup").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "DELETE /v1/agents/warmup: {body}");
    // Each comment reopens the ticket, which no agent takes while it is labelled warmup.
    let mut chars = 0;
    for n in 1..=6 {
        let text = notes(n);
        chars += text.len();
        app.comment(key, &text).await;
    }
    assert!(
        chars as u64 / 4 > server.window,
        "the comments alone exceed the window ({chars} characters)"
    );
    put_closer(&app, server, "compactor", json!({ "context_window": server.window })).await;
    let (status, body) = app
        .patch(&format!("/v1/tickets/{key}"), json!({ "labels": ["compactor"] }))
        .await;
    assert_eq!(status, StatusCode::OK, "PATCH {key}: {body}");

    let settled = wait_settled(&app, key).await;
    let why = diagnosis(&app, &settled).await;
    let id = settled["id"].as_str().unwrap();
    let kinds = event_kinds(&app, id).await;
    assert!(kinds.contains(&"compaction.started".to_owned()), "{why}");
    assert!(kinds.contains(&"compaction.finished".to_owned()), "{why}");
    let finished = &event_data(&app, id, "compaction.finished").await[0];
    let (before, after) = (finished["tokens_before"].as_u64(), finished["tokens_after"].as_u64());
    assert!(after.unwrap() < before.unwrap(), "{finished}");

    let comments = app.list_all(&format!("/v1/tickets/{key}/comments")).await;
    let texts: Vec<&str> = comments
        .iter()
        .flat_map(|c| c["content"].as_array().into_iter().flatten())
        .filter_map(|block| block["text"].as_str())
        .collect();
    assert!(
        texts.iter().any(|text| text.contains(task)),
        "the task survives compaction verbatim\n{why}"
    );
    assert!(
        !texts.iter().any(|text| *text == notes(3)),
        "the notes were summarised away\n{why}"
    );
    assert_done(&settled, &why);
    app.shutdown().await;
}

/// Ordinary tickets of the kind people post: short questions, a haiku, a report to summarise.
fn ordinary_tasks() -> Vec<String> {
    let report: String = (1..=3).map(notes).collect::<String>().chars().take(5_000).collect();
    let mut tasks: Vec<String> = [
        "What is the capital of France?",
        "Name the three primary colours.",
        "Write a haiku about autumn rain.",
        "How many days are there in a leap year?",
        "Translate 'good morning' into Spanish.",
        "What is 12 times 12?",
        "Suggest a name for a grey cat.",
        "What does CPU stand for?",
        "Give one tip for sleeping well.",
        "Which planet is closest to the sun?",
        "Write one sentence thanking a colleague for their help with a release.",
    ]
    .map(str::to_owned)
    .into();
    tasks.push(format!("Summarise this report in two sentences.\n\n{report}"));
    tasks
}

/// A result a person would call an answer: not null and not an empty string, object or list.
fn is_answer(result: &Value) -> bool {
    match result {
        Value::Null => false,
        Value::String(text) => !text.trim().is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(fields) => !fields.is_empty(),
        _ => true,
    }
}

/// The workload a new user tries first: twelve tickets posted at once to an agent on a named
/// provider with the server's documented `max_concurrent`, the server as it is run. Eleven of
/// twelve must be done with an answer, and none may be left `waiting` or working.
async fn twelve_ordinary_tickets_at_once_finish(server: &RealServer) {
    let url = server.url("twelve_ordinary_tickets_at_once_finish");
    let _turn = TURN.lock().await;
    let app = start(&url).await;
    let (status, body) = app
        .put(
            "/v1/providers/local",
            json!({ "kind": "openai", "base_url": url, "max_concurrent": server.max_concurrent }),
        )
        .await;
    assert!(status.is_success(), "PUT /v1/providers/local: {status} {body}");
    put_closer(
        &app,
        server,
        "local",
        json!({ "provider": "local", "context_window": server.window, "max_tokens": 256 }),
    )
    .await;

    let started = Instant::now();
    let creates = ordinary_tasks()
        .into_iter()
        .map(|task| app.create_ticket(json!({ "task": task, "labels": ["local"] })));
    let keys: Vec<String> = futures::future::join_all(creates)
        .await
        .iter()
        .map(|ticket| ticket["key"].as_str().expect("a key").to_owned())
        .collect();
    let deadline = started + WORKLOAD_TIMEOUT;
    let mut settled = Vec::new();
    for key in &keys {
        settled.push(wait_settled_by(&app, key, deadline).await);
    }
    let elapsed = started.elapsed();

    let mut report = String::new();
    let (mut answered, mut queued, mut interrupted) = (0, 0, 0);
    for ticket in &settled {
        let id = ticket["id"].as_str().unwrap();
        let kinds = event_kinds(&app, id).await;
        queued += kinds.iter().filter(|kind| *kind == "request.queued").count();
        let retries = event_data(&app, id, "request.retried").await;
        interrupted += retries
            .iter()
            .filter(|retry| retry.to_string().contains("stream_interrupted"))
            .count();
        if ticket["status"] == "done" && is_answer(&ticket["result"]) {
            answered += 1;
        }
        report.push_str(&format!(
            "\n  {} {} requests={} result={:.80} error={}",
            ticket["key"].as_str().unwrap_or_default(),
            ticket["status"],
            ticket["usage"]["requests"],
            ticket["result"].to_string(),
            ticket["error"]
        ));
    }
    eprintln!(
        "real_model on {}: {answered}/12 done with an answer in {:.0?}, {queued} request.queued, \
         {interrupted} stream_interrupted retries{report}",
        server.name, elapsed
    );
    for ticket in &settled {
        assert!(
            ["done", "failed", "cancelled"].contains(&ticket["status"].as_str().unwrap_or_default()),
            "no ticket is left waiting or working: {ticket}\n{}",
            diagnosis(&app, ticket).await
        );
    }
    assert!(
        answered >= 11,
        "at least 11 of 12 done with an answer on {}:{report}",
        server.name
    );
    // Twelve tickets at once on a provider with a limit: some requests waited their turn, visibly.
    assert!(queued > 0, "request.queued shows the wait for a slot");
    if server.max_concurrent == 1 {
        // The limit is what keeps llama-cpp-python from interrupting a request for the next one.
        assert_eq!(interrupted, 0, "no request was interrupted by another:{report}");
    }
    app.shutdown().await;
}
