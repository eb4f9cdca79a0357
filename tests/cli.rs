//! The client commands, end to end: the real `agentdesk` binary as a child process against a
//! service running in the test (on a real port) with a fake model server behind it.

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use support::{wait_status, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const BIN: &str = env!("CARGO_BIN_EXE_agentdesk");

#[derive(Debug)]
struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

fn command(url: &str, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(args)
        .env("AGENTDESK_URL", url)
        .env("NO_COLOR", "1")
        .env_remove("AGENTDESK_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn finish(mut child: tokio::process::Child) -> Output {
    async fn read_all(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> String {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut text).await;
        }
        text
    }
    let stdout = tokio::spawn(read_all(child.stdout.take()));
    let stderr = tokio::spawn(read_all(child.stderr.take()));
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    if status.is_err() {
        let _ = child.kill().await;
    }
    let output = Output {
        code: status.ok().and_then(|s| s.ok()).and_then(|s| s.code()).unwrap_or(-1),
        stdout: stdout.await.unwrap(),
        stderr: stderr.await.unwrap(),
    };
    assert_ne!(output.code, -1, "the command did not finish within 30 s: {output:?}");
    output
}

async fn cli(url: &str, args: &[&str]) -> Output {
    finish(command(url, args).spawn().expect("start agentdesk")).await
}

async fn start() -> (TestApp, FakeLlm) {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    (app, llm)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_watch_list_and_show_a_ticket_that_is_done() {
    let (app, llm) = start().await;
    llm.push(
        Reply::tool_call("close_ticket", json!({ "result": { "answer": 42 } }))
            .with_text("Six times seven is forty-two."),
    );
    let out = cli(
        &app.url,
        &[
            "ticket",
            "create",
            "What is six times seven?",
            "--label",
            "default",
            "--watch",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        streamed_text(&out.stdout).contains("Six times seven is forty-two."),
        "{out:?}"
    );
    assert!(
        out.stdout
            .contains("tool.started [default] close_ticket {\"result\":{\"answer\":42}}"),
        "{out:?}"
    );
    assert!(
        out.stdout.contains("ticket.done [default] result: {\"answer\":42}"),
        "{out:?}"
    );
    let key = out
        .stderr
        .trim()
        .strip_prefix("created ")
        .expect("the key on stderr")
        .to_owned();

    // Watching a finished ticket replays it (the text from its comment) and exits at once.
    let again = cli(&app.url, &["ticket", "watch", &key]).await;
    assert_eq!(again.code, 0, "{again:?}");
    assert!(
        again.stdout.contains("assistant: Six times seven is forty-two."),
        "{again:?}"
    );

    let created = cli(&app.url, &["ticket", "create", "Second task", "--priority", "5"]).await;
    assert_eq!(created.code, 0, "{created:?}");
    let second = created.stdout.trim().to_owned();
    assert!(second.starts_with("TICKET-"), "{created:?}");
    assert!(!created.stderr.contains("warning"), "{created:?}");

    let list = cli(&app.url, &["ticket", "list"]).await;
    assert_eq!(list.code, 0, "{list:?}");
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert!(lines[0].starts_with("KEY"), "{list:?}");
    assert!(
        lines[1].starts_with(&second) && lines[2].starts_with(&key),
        "newest first: {list:?}"
    );
    assert!(lines[2].contains("done") && lines[2].contains("default") && lines[2].contains("What is six"));
    let list = cli(&app.url, &["ticket", "list", "--status", "done", "--label", "default"]).await;
    assert_eq!(list.stdout.lines().count(), 2, "{list:?}");

    let show = cli(&app.url, &["ticket", "show", &key]).await;
    assert_eq!(show.code, 0, "{show:?}");
    assert!(show.stdout.contains("status     done"), "{show:?}");
    assert!(show.stdout.contains("result     {\"answer\":42}"), "{show:?}");
    assert!(show.stdout.contains("assistant: Six times seven"), "{show:?}");
    let json_out = cli(&app.url, &["ticket", "show", &key, "--json"]).await;
    let ticket: Value = serde_json::from_str(&json_out.stdout).expect("show --json prints JSON");
    assert_eq!(ticket["result"], json!({ "answer": 42 }));

    // A ticket no agent takes is created, with a warning beside its key.
    let stray = cli(&app.url, &["ticket", "create", "Nobody's", "--label", "urgent"]).await;
    assert_eq!(stray.code, 0, "{stray:?}");
    assert!(stray.stdout.trim().starts_with("TICKET-"), "{stray:?}");
    assert!(
        stray.stderr.contains("warning: no agent takes tickets labelled urgent"),
        "{stray:?}"
    );

    // Errors: the API's message and exit 4; a bad option 64.
    let missing = cli(&app.url, &["ticket", "show", "TICKET-999"]).await;
    assert_eq!(missing.code, 4, "{missing:?}");
    assert!(missing.stderr.contains("no ticket \"TICKET-999\""), "{missing:?}");
    let bad = cli(&app.url, &["ticket", "list", "--limit", "many"]).await;
    assert_eq!(bad.code, 64, "{bad:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_ticket_exits_1_and_retry_brings_it_back() {
    let (app, llm) = start().await;
    llm.push(Reply::status(401));
    let key = app.create_ticket(json!({ "task": "doomed" })).await["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = cli(&app.url, &["ticket", "watch", &key]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.contains("ticket.failed"), "{out:?}");

    llm.push(Reply::tool_call("close_ticket", json!({ "result": "fine now" })));
    let retry = cli(&app.url, &["ticket", "retry", &key]).await;
    assert_eq!(
        (retry.code, retry.stdout.trim()),
        (0, format!("{key} is todo").as_str()),
        "{retry:?}"
    );
    // The replay holds the earlier failure; the watch goes on to the end.
    let out = cli(&app.url, &["ticket", "watch", &key]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("ticket.requeued") && out.stdout.contains("result: fine now"),
        "{out:?}"
    );
    let again = cli(&app.url, &["ticket", "retry", &key]).await;
    assert_eq!(again.code, 4, "a done ticket cannot be retried: {again:?}");
    assert!(again.stderr.contains("conflict"), "{again:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_watch_exits_2_and_a_question_exits_3() {
    let (app, llm) = start().await;
    llm.push(Reply::text("a very slow answer that goes on and on").chunk_delay(Duration::from_millis(400)));
    let key = app.create_ticket(json!({ "task": "slow" })).await["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let watch = command(&app.url, &["ticket", "watch", &key]).spawn().unwrap();
    wait_status(&app, &key, "in_progress").await;
    assert!(llm.wait_for_requests(1, Duration::from_secs(10)).await);
    let cancel = cli(&app.url, &["ticket", "cancel", &key]).await;
    assert_eq!(
        (cancel.code, cancel.stdout.trim()),
        (0, format!("{key} is cancelled").as_str())
    );
    let out = finish(watch).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stdout.contains("ticket.cancelled"), "{out:?}");

    llm.push(Reply::text("Which city do you mean?"));
    let question = cli(&app.url, &["ticket", "create", "Weather, please", "--watch"]).await;
    assert_eq!(question.code, 3, "{question:?}");
    assert!(question.stdout.contains("Which city do you mean?"), "{question:?}");
    assert!(question.stdout.contains("ticket.waiting"), "{question:?}");
    let key = question.stderr.trim().strip_prefix("created ").unwrap().to_owned();

    llm.push(Reply::tool_call("close_ticket", json!({ "result": "sunny in Paris" })));
    let comment = cli(&app.url, &["ticket", "comment", &key, "Paris"]).await;
    assert_eq!(comment.code, 0, "{comment:?}");
    assert!(
        comment.stdout.starts_with(&format!("commented on {key}")),
        "{comment:?}"
    );
    let out = cli(&app.url, &["ticket", "watch", &key]).await;
    assert_eq!(out.code, 0, "a waiting event followed by more is not the end: {out:?}");
    assert!(out.stdout.contains("user: Paris"), "{out:?}");
    app.shutdown().await;
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_then_changes_nothing_then_updates_only_what_differs() {
    let app = TestApp::spawn().await;
    let dir = tempdir();
    let yaml = "providers:
  local: {kind: openai, base_url: \"http://127.0.0.1:9/v1\", api_key: \"${env:LOCAL_KEY}\"}
agents:
  researcher:
    role: You research.
    provider: local
    model: small-model
    labels: [research]
    tools: [close_ticket]
    temperature: 0.5
";
    let file = write(&dir, "agents.yaml", yaml);
    let first = cli(&app.url, &["agents", "apply", &file]).await;
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(
        first.stdout, "+ provider local created\n+ agent researcher created\n",
        "{first:?}"
    );
    let (_, agent) = app.get("/v1/agents/researcher").await;
    let (_, provider) = app.get("/v1/providers/local").await;
    assert_eq!(agent["model"], "small-model");

    let second = cli(&app.url, &["agents", "apply", &file]).await;
    assert_eq!(second.code, 0, "{second:?}");
    assert_eq!(
        second.stdout,
        "= provider local unchanged\n= agent researcher unchanged\n"
    );
    assert_eq!(
        app.get("/v1/agents/researcher").await.1["updated_at"],
        agent["updated_at"]
    );
    assert_eq!(
        app.get("/v1/providers/local").await.1["updated_at"],
        provider["updated_at"]
    );

    // JSON, by its extension; the default agent, not in the file, is left alone.
    let changed = json!({
        "providers": {"local": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "${env:LOCAL_KEY}"}},
        "agents": {"researcher": {"role": "You research.", "provider": "local", "model": "bigger-model",
            "labels": ["research"], "tools": ["close_ticket"], "temperature": 0.5}}
    });
    let file = write(&dir, "agents.json", &changed.to_string());
    let third = cli(&app.url, &["agents", "apply", &file]).await;
    assert_eq!(third.code, 0, "{third:?}");
    assert_eq!(
        third.stdout,
        "= provider local unchanged\n~ agent researcher updated (model)\n"
    );
    assert_eq!(app.get("/v1/agents/researcher").await.1["model"], "bigger-model");
    assert_eq!(app.get("/v1/agents/default").await.0, support::StatusCode::OK);

    // An entry the API refuses is reported; the others are still applied.
    let mixed = "tools:
  weather: {description: Weather, input_schema: {type: object}, url: \"https://example.com/w\", method: GET}
agents:
  writer: {role: You write., model: m}
  broken: {model: m, temperature: 7}
";
    let file = write(&dir, "mixed.yml", mixed);
    let out = cli(&app.url, &["agents", "apply", &file]).await;
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stdout.contains("+ agent writer created"), "{out:?}");
    assert!(
        out.stderr
            .contains("! agent broken: temperature must be between 0 and 2"),
        "{out:?}"
    );
    if app.get("/v1/tools").await.0 == support::StatusCode::NOT_FOUND {
        assert!(
            out.stderr
                .contains("! tool weather: this server has no /v1/tools/{name} endpoint"),
            "{out:?}"
        );
    }

    // A ticket's schema from a file (this service runs no workers: nothing claims it).
    let schema = write(&dir, "schema.yaml", "type: object\nrequired: [answer]\n");
    let out = cli(
        &app.url,
        &[
            "ticket",
            "create",
            "Answer",
            "--schema",
            &schema,
            "--label",
            "x",
            "--priority",
            "3",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, ticket) = app.get(&format!("/v1/tickets/{}", out.stdout.trim())).await;
    assert_eq!(ticket["schema"], json!({"type": "object", "required": ["answer"]}));
    assert_eq!(
        (ticket["labels"].clone(), ticket["priority"].clone()),
        (json!(["x"]), json!(3))
    );

    let bad = write(&dir, "bad.yaml", "agentz: {}\n");
    let out = cli(&app.url, &["agents", "apply", &bad]).await;
    assert_eq!(out.code, 64, "{out:?}");
    assert!(out.stderr.contains("unknown section \"agentz\""), "{out:?}");
    app.shutdown().await;
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agentdesk-cli-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Answers one HTTP request on `stream` with `head` and `body`, then closes the connection.
async fn answer(stream: &mut tokio::net::TcpStream, content_type: &str, body: &[u8]) {
    let head = format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    stream.flush().await.unwrap();
}

async fn read_request(stream: &mut tokio::net::TcpStream) -> String {
    let mut request = vec![];
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&request).to_lowercase()
}

/// A stream that breaks off after the first event is resumed with `Last-Event-ID`, and the text
/// streamed over both connections reads as one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_a_dropped_stream_with_last_event_id() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let mut requests = vec![];
        let mut event_streams = 0;
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let request = read_request(&mut stream).await;
            requests.push(request.clone());
            if request.starts_with("get /v1/tickets/ticket-1/events") {
                event_streams += 1;
                let body: &[u8] = if event_streams == 1 {
                    b"retry: 100\r\n\r\nid: 1\r\ndata: {\"seq\":1,\"kind\":\"ticket.started\",\"agent\":\"a\",\"data\":{\"attempt\":1}}\r\n\r\n: ping\r\n\r\ndata: {\"seq\":null,\"kind\":\"text.delta\",\"data\":{\"delta\":\"Hel\"}}\r\n\r\nid: 2\r\ndata: {\"seq\":2,"
                } else {
                    b"retry: 100\n\ndata: {\"seq\":null,\"kind\":\"text.delta\",\ndata: \"data\":{\"delta\":\"lo\"}}\n\nid: 2\ndata: {\"seq\":2,\"kind\":\"ticket.done\",\"data\":{\"result\":\"ok\"}}\n\n"
                };
                answer(&mut stream, "text/event-stream", body).await;
            } else {
                answer(
                    &mut stream,
                    "application/json",
                    br#"{"key":"TICKET-1","status":"done"}"#,
                )
                .await;
                return requests;
            }
        }
    });
    let out = cli(&url, &["ticket", "watch", "TICKET-1"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("Hello\n"), "{out:?}");
    assert!(out.stdout.contains("ticket.done result: ok"), "{out:?}");
    let requests = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
    assert!(!requests[0].contains("last-event-id"), "{requests:?}");
    assert!(
        requests[1].contains("last-event-id: 1\r\n"),
        "the half-read event 2 does not count: {requests:?}"
    );
}

#[tokio::test]
async fn an_unreachable_service_is_named_in_one_line() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let out = cli(&url, &["ticket", "list"]).await;
    assert_eq!(out.code, 5, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains(&url) && out.stderr.contains("refused"), "{out:?}");
}

#[tokio::test]
async fn a_bad_agents_file_stops_start_up() {
    let dir = tempdir();
    let file = write(&dir, "agents.yaml", "agents: [not, a, map]\n");
    let out = finish(
        command("http://unused", &["serve"])
            .env("AGENTDESK_AGENTS_FILE", &file)
            .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
            .env("AGENTDESK_ADDR", "127.0.0.1:0")
            .spawn()
            .unwrap(),
    )
    .await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("AGENTDESK_AGENTS_FILE") && out.stderr.contains("agents must be a map keyed by name"),
        "{out:?}"
    );
}

/// `AGENTDESK_AGENTS_FILE` is applied once the API listens; an entry it refuses stops start-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_file_is_applied_at_start_up() {
    let database_url = testkit::testing::fresh_database().await.expect("a test database");
    let dir = tempdir();
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let file = write(
        &dir,
        "agents.yaml",
        "providers:\n  local: {kind: openai, base_url: \"http://127.0.0.1:9/v1\"}\n\
         tools:\n  weather: {description: Weather., input_schema: {type: object}, url: \"https://weather.example/now\"}\n\
         mcp_servers:\n  github: {url: \"https://mcp.example/mcp\"}\n\
         agents:\n  researcher: {role: You research., provider: local, model: m, labels: [research], tools: [close_ticket, weather]}\n",
    );
    let server = |file: &str| {
        let mut cmd = command(&url, &["api"]);
        cmd.env("DATABASE_URL", &database_url)
            .env("AGENTDESK_ADDR", format!("127.0.0.1:{port}"))
            .env("AGENTDESK_AGENTS_FILE", file)
            .env_remove("AGENTDESK_API_TOKENS");
        cmd.spawn().expect("start agentdesk api")
    };
    let mut child = server(&file);
    let client = reqwest::Client::new();
    let agent: Value = support::eventually("the agent to appear", Duration::from_secs(20), || async {
        let response = client.get(format!("{url}/v1/agents/researcher")).send().await.ok()?;
        if response.status() != reqwest::StatusCode::OK {
            return None;
        }
        Some(response.json().await.unwrap())
    })
    .await;
    assert_eq!(
        (agent["provider"].as_str(), agent["model"].as_str()),
        (Some("local"), Some("m"))
    );
    // The whole file, as `agents apply` reads it: the tools and MCP servers too.
    for path in ["/v1/tools/weather", "/v1/mcp-servers/github"] {
        let response = client.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::OK, "{path}");
    }
    child.kill().await.unwrap();
    let _ = child.wait().await;

    let bad = write(&dir, "bad.yaml", "agents:\n  broken: {model: m, temperature: 7}\n");
    let out = finish(server(&bad)).await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr
            .contains("! agent broken: temperature must be between 0 and 2"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_sent_as_a_bearer_token() {
    let app = TestApp::spawn_with(|c| c.api_tokens = vec!["s3cret".into()]).await;
    let refused = cli(&app.url, &["ticket", "list"]).await;
    assert_eq!(refused.code, 4, "{refused:?}");
    assert!(
        refused.stderr.contains("a valid bearer token is required"),
        "{refused:?}"
    );
    let mut with_env = command(&app.url, &["ticket", "list"]);
    with_env.env("AGENTDESK_TOKEN", "s3cret");
    assert_eq!(finish(with_env.spawn().unwrap()).await.code, 0);
    let with_option = cli(&app.url, &["ticket", "list", "--token", "s3cret"]).await;
    assert_eq!(with_option.code, 0, "{with_option:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_commands_and_the_schedules_map_of_the_agents_file() {
    let app = TestApp::spawn().await;
    let out = cli(
        &app.url,
        &[
            "schedule",
            "create",
            "0 9 * * mon-fri",
            "digest for {scheduled_for}",
            "--name",
            "digest",
            "--timezone",
            "Europe/Berlin",
            "--label",
            "research",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("digest next run 20"), "{out:?}");
    let list = cli(&app.url, &["schedule", "list"]).await;
    assert!(list.stdout.starts_with("SCHEDULE"), "{list:?}");
    assert!(list.stdout.contains("digest") && list.stdout.contains("Europe/Berlin") && list.stdout.contains("enabled"));
    let show = cli(&app.url, &["schedule", "show", "digest"]).await;
    assert!(
        show.stdout.contains("upcoming") && show.stdout.contains("0 9 * * mon-fri"),
        "{show:?}"
    );
    let paused = cli(&app.url, &["schedule", "pause", "digest"]).await;
    assert_eq!(paused.stdout, "digest paused; next run -\n", "{paused:?}");
    assert_eq!(app.get("/v1/schedules/digest").await.1["enabled"], false);
    let resumed = cli(&app.url, &["schedule", "resume", "digest"]).await;
    assert!(resumed.stdout.starts_with("digest resumed; next run 20"), "{resumed:?}");
    let run = cli(&app.url, &["schedule", "run", "digest"]).await;
    assert!(run.stdout.starts_with("TICKET-"), "{run:?}");
    let (_, ticket) = app.get(&format!("/v1/tickets/{}", run.stdout.trim())).await;
    assert_eq!(ticket["metadata"]["schedule"]["name"], "digest");
    let bad = cli(&app.url, &["schedule", "create", "not cron", "t"]).await;
    assert_eq!(bad.code, 4, "{bad:?}");
    assert!(bad.stderr.contains("cron"), "{bad:?}");
    let deleted = cli(&app.url, &["schedule", "delete", "digest"]).await;
    assert_eq!(deleted.code, 0, "{deleted:?}");
    assert_eq!(cli(&app.url, &["schedule", "show", "digest"]).await.code, 4);

    // The agents file: created by name, then unchanged, then only what differs.
    let dir = tempdir();
    let yaml = "schedules:
  nightly:
    cron: \"0 2 * * *\"
    timezone: America/New_York
    ticket: {task: \"Clean up after {scheduled_for}\", labels: [ops]}
";
    let file = write(&dir, "schedules.yaml", yaml);
    let first = cli(&app.url, &["agents", "apply", &file]).await;
    assert_eq!(first.stdout, "+ schedule nightly created\n", "{first:?}");
    let (_, created) = app.get("/v1/schedules/nightly").await;
    assert_eq!(created["timezone"], "America/New_York");
    let second = cli(&app.url, &["agents", "apply", &file]).await;
    assert_eq!(second.stdout, "= schedule nightly unchanged\n", "{second:?}");
    assert_eq!(
        app.get("/v1/schedules/nightly").await.1["updated_at"],
        created["updated_at"]
    );
    let changed = yaml.replace("0 2 * * *", "0 3 * * *").replace("[ops]", "[ops, night]");
    let file = write(&dir, "schedules.yaml", &changed);
    let third = cli(&app.url, &["agents", "apply", &file]).await;
    assert_eq!(third.stdout, "~ schedule nightly updated (cron, ticket)\n", "{third:?}");
    let (_, updated) = app.get("/v1/schedules/nightly").await;
    assert_eq!(updated["cron"], "0 3 * * *");
    assert_eq!(updated["ticket"]["labels"], json!(["ops", "night"]));
    app.shutdown().await;
}

/// What `--watch` printed of the model's text: its output without the event lines (`  4
/// request.started …`). A stored event can be printed in the middle of the streamed text (the live
/// deltas of a request may arrive before its stored `request.started`), on a line of its own.
fn streamed_text(stdout: &str) -> String {
    let is_event = |line: &str| {
        let mut words = line.split_whitespace();
        let seq = words.next().is_some_and(|w| w.parse::<u64>().is_ok());
        seq && line.starts_with(' ') && words.next().is_some_and(|kind| kind.contains('.'))
    };
    stdout.lines().filter(|line| !is_event(line)).collect()
}

/// The global options configure a server: a client command's help leaves them out, and the
/// command refuses them.
#[tokio::test]
async fn client_commands_neither_list_nor_take_the_server_options() {
    for args in [
        &["ticket", "create", "--help"][..],
        &["schedule", "--help"],
        &["agents", "apply", "--help"],
    ] {
        let help = cli("http://127.0.0.1:1", args).await;
        assert_eq!(help.code, 0, "{help:?}");
        assert!(
            help.stdout.contains("--url") || help.stdout.contains("Usage"),
            "{help:?}"
        );
        for option in ["--database-url", "--data-dir", "--log-format"] {
            assert!(!help.stdout.contains(option), "{args:?} lists {option}: {help:?}");
        }
    }
    let refused = cli(
        "http://127.0.0.1:1",
        &["ticket", "list", "--database-url", "postgres://x"],
    )
    .await;
    assert_eq!(refused.code, 64, "{refused:?}");
    let serve = std::process::Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&serve.stdout).contains("--database-url"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_and_token_commands_and_the_project_option() {
    let app = TestApp::spawn().await;
    let made = cli(&app.url, &["project", "create", "ops", "OPS", "--weight", "2"]).await;
    assert_eq!(made.code, 0, "{made:?}");
    let listed = cli(&app.url, &["project", "list"]).await;
    assert!(
        listed.stdout.contains("ops") && listed.stdout.contains("OPS"),
        "{listed:?}"
    );

    // `--project` (or AGENTDESK_PROJECT) acts in the project: its keys are the project's.
    let ticket = cli(&app.url, &["ticket", "create", "In ops", "--project", "ops"]).await;
    assert_eq!(ticket.code, 0, "{ticket:?}");
    assert!(ticket.stdout.contains("OPS-1"), "{ticket:?}");
    let mut in_ops = command(&app.url, &["ticket", "list"]);
    in_ops.env("AGENTDESK_PROJECT", "ops");
    let in_ops = finish(in_ops.spawn().unwrap()).await;
    assert!(in_ops.stdout.contains("OPS-1"), "{in_ops:?}");
    let in_default = cli(&app.url, &["ticket", "list"]).await;
    assert!(!in_default.stdout.contains("OPS-1"), "{in_default:?}");

    // A token's secret is printed once; the list shows it without; revoked, it is refused.
    let token = cli(
        &app.url,
        &["token", "create", "ci", "--scope", "read", "--project", "ops"],
    )
    .await;
    assert_eq!(token.code, 0, "{token:?}");
    let secret = token.stdout.trim().to_owned();
    assert!(secret.starts_with("adk_"), "{token:?}");
    let tokens = cli(&app.url, &["token", "list", "--project", "ops"]).await;
    assert!(
        tokens.stdout.contains("ci") && !tokens.stdout.contains(&secret),
        "{tokens:?}"
    );
    let id = tokens
        .stdout
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let mut reading = command(&app.url, &["ticket", "list"]);
    reading.env("AGENTDESK_TOKEN", &secret);
    let reading = finish(reading.spawn().unwrap()).await;
    assert!(reading.code == 0 && reading.stdout.contains("OPS-1"), "{reading:?}");
    let revoked = cli(&app.url, &["token", "revoke", &id, "--project", "ops"]).await;
    assert_eq!(revoked.code, 0, "{revoked:?}");
    let mut refused = command(&app.url, &["ticket", "list"]);
    refused.env("AGENTDESK_TOKEN", &secret);
    let refused = finish(refused.spawn().unwrap()).await;
    assert_ne!(refused.code, 0, "{refused:?}");

    let deleted = cli(&app.url, &["project", "delete", "ops"]).await;
    assert_ne!(deleted.code, 0, "a project with tickets stays: {deleted:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answer_approve_replay_and_agent_versions_commands() {
    let (app, llm) = start().await;
    let agent = json!({"provider": "openai", "model": "m1", "tools": ["close_ticket", "ask_human"]});
    assert!(app.put("/v1/agents/default", agent).await.0.is_success());
    llm.push(Reply::tool_call(
        "ask_human",
        json!({"question": "How many?", "response_schema": {"type": "integer"}}),
    ));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "done" })));
    let key = app.create_ticket(json!({ "task": "count" })).await["key"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_status(&app, &key, "waiting").await;
    let show = cli(&app.url, &["ticket", "show", &key]).await;
    assert!(show.stdout.contains("How many?"), "{show:?}");
    let wrong = cli(&app.url, &["ticket", "answer", &key, "three"]).await;
    assert_ne!(wrong.code, 0, "text is not an integer: {wrong:?}");
    let answered = cli(&app.url, &["ticket", "answer", &key, "--json", "3"]).await;
    assert_eq!(answered.code, 0, "{answered:?}");
    wait_status(&app, &key, "done").await;

    let none = cli(&app.url, &["ticket", "approve", &key]).await;
    assert_ne!(none.code, 0, "nothing waits for approval: {none:?}");

    let agent = json!({"provider": "openai", "model": "m2", "tools": ["close_ticket", "ask_human"]});
    assert!(app.put("/v1/agents/default", agent).await.0.is_success());
    let versions = cli(&app.url, &["agents", "versions", "default"]).await;
    assert_eq!(versions.code, 0, "{versions:?}");
    assert!(
        versions.stdout.contains("m2") && versions.stdout.contains("m1"),
        "{versions:?}"
    );
    let back = cli(&app.url, &["agents", "rollback", "default", "2"]).await;
    assert_eq!(back.code, 0, "{back:?}");
    assert_eq!(app.get("/v1/agents/default").await.1["model"], "m1");

    llm.push(Reply::tool_call(
        "ask_human",
        json!({"question": "How many?", "response_schema": {"type": "integer"}}),
    ));
    llm.push(Reply::tool_call("close_ticket", json!({ "result": "replayed" })));
    let replay = cli(&app.url, &["ticket", "replay", &key, "--model", "m3"]).await;
    assert_eq!(replay.code, 0, "{replay:?}");
    let done = wait_status(&app, replay.stdout.trim(), "done").await;
    assert_eq!(done["metadata"]["replay_of"], key.as_str());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experiment_create_and_show() {
    let (app, llm) = start().await;
    llm.set_responder(|request: &Value| {
        let answer = if request["model"] == "m2" { "two" } else { "one" };
        Reply::tool_call("close_ticket", json!({ "result": answer }))
    });
    let key = app.create_ticket(json!({ "task": "count" })).await["key"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_status(&app, &key, "done").await;
    let bad = cli(
        &app.url,
        &[
            "experiment",
            "create",
            "--name",
            "x",
            "--ticket",
            &key,
            "--arm",
            "agent=default",
        ],
    )
    .await;
    assert_eq!(bad.code, 64, "an arm needs a name: {bad:?}");
    let created = cli(
        &app.url,
        &[
            "experiment",
            "create",
            "--name",
            "models",
            "--ticket",
            &key,
            "--arm",
            "name=first",
            "--arm",
            "name=second,agent=default,model=m2",
        ],
    )
    .await;
    assert_eq!(created.code, 0, "{created:?}");
    let id = created.stdout.trim().to_owned();
    support::eventually("the experiment to finish", Duration::from_secs(30), || async {
        (app.get(&format!("/v1/experiments/{id}")).await.1["status"] == "done").then_some(())
    })
    .await;
    let show = cli(&app.url, &["experiment", "show", &id]).await;
    assert_eq!(show.code, 0, "{show:?}");
    assert!(
        show.stdout.contains("first") && show.stdout.contains("second"),
        "{show:?}"
    );
    assert!(show.stdout.contains("second: TICKET-3 done two"), "{show:?}");
    assert!(!show.stdout.contains("e-"), "no exponents in amounts: {show:?}");
    app.shutdown().await;
}
