//! `GET /metrics`: the Prometheus text format parsed back (names, types, labels), values that move
//! when a ticket runs through the fake model server, route templates as labels, the token rule.
//!
//! The recorder is global to the test process and other tests run services beside these, so
//! every check of a value compares it before and after, or reads a series labelled by something
//! only this test uses (its own agent and model names).

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::json;
use support::{wait_status, StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

/// One scrape: each metric family's type, and every sample by name and labels.
#[derive(Debug, Default)]
struct Scrape {
    types: HashMap<String, String>,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Scrape {
    /// Parses the text format, failing the test on a line that does not follow it.
    fn parse(text: &str) -> Scrape {
        let mut scrape = Scrape::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
                scrape.types.insert(name.to_owned(), kind.to_owned());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("a sample is `series value`");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("a number in {line:?}"));
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some((name, labels)) => {
                    let labels = labels.strip_suffix('}').expect("labels end with }");
                    (name.to_owned(), parse_labels(labels))
                }
            };
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "metric name {name:?}"
            );
            scrape.samples.push((name, labels, value));
        }
        scrape
    }

    /// The value of the sample with exactly these labels (0 when absent: a counter not yet bumped).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .find(|(n, l, _)| {
                n == name
                    && l.len() == labels.len()
                    && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map_or(0.0, |(_, _, v)| *v)
    }

    fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples
            .iter()
            .any(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
    }

    /// The label names of a metric's samples (histogram series: `le` left out).
    fn label_names(&self, name: &str) -> Vec<Vec<String>> {
        self.samples
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, l, _)| l.keys().filter(|k| *k != "le").cloned().collect())
            .collect()
    }
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = text.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('"'), "a label value is quoted");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => panic!("a dangling escape"),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        labels.insert(name.trim_start_matches(',').to_owned(), value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    labels
}

async fn scrape(app: &TestApp) -> (String, Scrape) {
    let response = app
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .expect("scrape /metrics");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = response.text().await.unwrap();
    let parsed = Scrape::parse(&text);
    (text, parsed)
}

const CONTRACT: &[(&str, &str, &[&str])] = &[
    ("agentdesk_tickets", "gauge", &["project", "status"]),
    (
        "agentdesk_tickets_finished_total",
        "counter",
        &["agent", "project", "status"],
    ),
    ("agentdesk_claims_total", "counter", &[]),
    ("agentdesk_leases_lost_total", "counter", &[]),
    ("agentdesk_requeues_total", "counter", &["reason"]),
    (
        "agentdesk_model_requests_total",
        "counter",
        &["model", "outcome", "project", "provider"],
    ),
    (
        "agentdesk_model_request_duration_seconds",
        "histogram",
        &["model", "project", "provider"],
    ),
    (
        "agentdesk_model_time_to_first_token_seconds",
        "histogram",
        &["model", "project", "provider"],
    ),
    (
        "agentdesk_tokens_total",
        "counter",
        &["model", "project", "provider", "type"],
    ),
    ("agentdesk_tool_calls_total", "counter", &["outcome", "tool"]),
    ("agentdesk_tool_duration_seconds", "histogram", &["tool"]),
    ("agentdesk_events_total", "counter", &["kind"]),
    ("agentdesk_sse_subscribers", "gauge", &[]),
    (
        "agentdesk_http_requests_total",
        "counter",
        &["method", "route", "status"],
    ),
    (
        "agentdesk_http_request_duration_seconds",
        "histogram",
        &["method", "route"],
    ),
    ("agentdesk_db_pool_connections", "gauge", &["state"]),
    ("agentdesk_webhook_deliveries_total", "counter", &["outcome"]),
    ("agentdesk_build_info", "gauge", &["version"]),
];

#[tokio::test]
async fn a_ticket_run_moves_the_metrics_with_the_contract_names_types_and_labels() {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    assert!(!agentdesk::telemetry::trace::enabled(), "no OTLP endpoint, no tracer");
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    let (agent, model) = (format!("metrics-{suffix}"), format!("model-{suffix}"));
    let (code, _) = app
        .put(
            &format!("/v1/agents/{agent}"),
            json!({ "role": "You count.", "model": model, "labels": [agent], "tools": ["close_ticket"] }),
        )
        .await;
    assert!(code.is_success(), "{code}");
    let (_, before) = scrape(&app).await;

    llm.push(
        Reply::tool_call("close_ticket", json!({ "result": "counted" }))
            .usage(120, 30)
            .cache_tokens(5, 2),
    );
    let ticket = app
        .create_ticket(json!({ "task": "Count this.", "labels": [agent] }))
        .await;
    let key = ticket["key"].as_str().unwrap().to_owned();
    wait_status(&app, &key, "done").await;
    let mut events = app.sse("/v1/events", None).await;
    events.wait_ready(Duration::from_secs(5)).await;
    let (code, _) = app
        .get(&format!("/v1/tickets/{}", ticket["id"].as_str().unwrap()))
        .await;
    assert_eq!(code, StatusCode::OK);
    let missing = format!("/no-such-{suffix}");
    assert_eq!(app.get(&missing).await.0, StatusCode::NOT_FOUND);
    let (text, after) = scrape(&app).await;

    for (name, kind, labels) in CONTRACT {
        assert_eq!(
            after.types.get(*name).map(String::as_str),
            Some(*kind),
            "{name}'s # TYPE"
        );
        let suffixes: &[&str] = if *kind == "histogram" {
            &["_bucket", "_sum", "_count"]
        } else {
            &[""]
        };
        for suffix in suffixes {
            let series = format!("{name}{suffix}");
            let names = after.label_names(&series);
            assert!(!names.is_empty(), "no sample of {series}");
            for found in names {
                assert_eq!(found, *labels, "{series}'s labels");
            }
        }
    }

    // This test's own agent and model: exact values.
    let finished = [("project", "default"), ("agent", agent.as_str()), ("status", "done")];
    assert_eq!(after.value("agentdesk_tickets_finished_total", &finished), 1.0);
    let ok = [
        ("project", "default"),
        ("provider", "openai"),
        ("model", model.as_str()),
        ("outcome", "ok"),
    ];
    assert_eq!(after.value("agentdesk_model_requests_total", &ok), 1.0);
    let series = [
        ("project", "default"),
        ("provider", "openai"),
        ("model", model.as_str()),
    ];
    assert_eq!(
        after.value("agentdesk_model_request_duration_seconds_count", &series),
        1.0
    );
    assert_eq!(
        after.value("agentdesk_model_time_to_first_token_seconds_count", &series),
        1.0
    );
    // The OpenAI wire format reports cached reads only, no cache writes.
    for (kind, count) in [
        ("input", 120.0),
        ("output", 30.0),
        ("cache_read", 5.0),
        ("cache_creation", 0.0),
    ] {
        let labels = [
            ("project", "default"),
            ("provider", "openai"),
            ("model", model.as_str()),
            ("type", kind),
        ];
        assert_eq!(after.value("agentdesk_tokens_total", &labels), count, "{kind} tokens");
    }
    // Shared by every test of the process: they moved by at least this ticket's share.
    let moved = |name: &str, labels: &[(&str, &str)]| after.value(name, labels) - before.value(name, labels);
    assert!(moved("agentdesk_claims_total", &[]) >= 1.0);
    let closed = [("tool", "close_ticket"), ("outcome", "ok")];
    assert!(moved("agentdesk_tool_calls_total", &closed) >= 1.0);
    assert!(moved("agentdesk_tool_duration_seconds_count", &[("tool", "close_ticket")]) >= 1.0);
    for kind in [
        "ticket.created",
        "ticket.started",
        "request.finished",
        "tool.finished",
        "ticket.done",
    ] {
        assert!(
            moved("agentdesk_events_total", &[("kind", kind)]) >= 1.0,
            "{kind} events"
        );
    }
    // The batched stages the ticket passed through, each statement timed and sized.
    for stage in ["intake", "claims", "steps", "event_reader"] {
        for name in ["agentdesk_db_batch_duration_seconds", "agentdesk_db_batch_size"] {
            assert_eq!(after.types.get(name).map(String::as_str), Some("histogram"));
            assert!(
                moved(&format!("{name}_count"), &[("stage", stage)]) >= 1.0,
                "{name} of {stage}"
            );
        }
    }
    assert!(moved("agentdesk_db_batch_size_sum", &[("stage", "claims")]) >= 1.0);
    assert!(moved("agentdesk_db_batch_wait_seconds_count", &[("stage", "intake")]) >= 1.0);
    assert!(
        after.value("agentdesk_sse_subscribers", &[]) >= 1.0,
        "the open stream counts"
    );
    // Read from this service's database and pool.
    assert_eq!(
        after.value("agentdesk_tickets", &[("project", "default"), ("status", "done")]),
        1.0
    );
    assert_eq!(
        after.value("agentdesk_tickets", &[("project", "default"), ("status", "todo")]),
        0.0
    );
    assert_eq!(after.value("agentdesk_db_pool_connections", &[("state", "max")]), 8.0);
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(after.value("agentdesk_build_info", &[("version", version)]), 1.0);

    // Requests by route template: never a ticket's id or key, never an unmatched path.
    let by_id = [("method", "GET"), ("route", "/v1/tickets/{ticket}"), ("status", "200")];
    assert!(after.has("agentdesk_http_requests_total", &by_id));
    let created = [("method", "POST"), ("route", "/v1/tickets"), ("status", "201")];
    assert!(after.has("agentdesk_http_requests_total", &created));
    let unmatched = [("method", "GET"), ("route", "unmatched"), ("status", "404")];
    assert!(after.has("agentdesk_http_requests_total", &unmatched));
    assert!(after.has(
        "agentdesk_http_request_duration_seconds_bucket",
        &[("route", "/v1/tickets/{ticket}")]
    ));
    for leak in [ticket["id"].as_str().unwrap(), &key, &missing] {
        assert!(!text.contains(leak), "{leak} appears in the metrics");
    }
    drop(events);
    app.shutdown().await;
}

#[tokio::test]
async fn a_cancel_and_a_retry_are_counted() {
    let app = TestApp::spawn().await;
    let (_, before) = scrape(&app).await;
    let ticket = app.create_ticket(json!({ "task": "Never mind." })).await;
    let key = ticket["key"].as_str().unwrap();
    assert_eq!(
        app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await.0,
        StatusCode::OK
    );
    assert_eq!(
        app.post(&format!("/v1/tickets/{key}/retry"), json!({})).await.0,
        StatusCode::OK
    );
    let (_, after) = scrape(&app).await;
    let moved = |name: &str, labels: &[(&str, &str)]| after.value(name, labels) - before.value(name, labels);
    let cancelled = [("project", "default"), ("agent", ""), ("status", "cancelled")];
    assert!(moved("agentdesk_tickets_finished_total", &cancelled) >= 1.0);
    assert!(moved("agentdesk_requeues_total", &[("reason", "retry")]) >= 1.0);
    assert!(moved("agentdesk_events_total", &[("kind", "ticket.cancelled")]) >= 1.0);
    assert_eq!(
        after.value("agentdesk_tickets", &[("project", "default"), ("status", "todo")]),
        1.0
    );
    app.shutdown().await;
}

#[tokio::test]
async fn metrics_take_the_same_tokens_as_the_api() {
    let app = TestApp::spawn_with(|c| c.api_tokens = vec!["writer".into(), "other".into()]).await;
    let anonymous = app.client.get(app.endpoint("/metrics")).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let body: serde_json::Value = anonymous.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let wrong = app
        .client
        .get(app.endpoint("/metrics"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    for token in ["writer", "other"] {
        let scraped = app
            .client
            .get(app.endpoint("/metrics"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(scraped.status(), StatusCode::OK, "{token}");
        let text = scraped.text().await.unwrap();
        assert!(text.contains("# TYPE agentdesk_tickets gauge"), "{text}");
    }
    // The refused scrape is itself counted, under its route.
    let (_, scrape) = {
        let response = app
            .client
            .get(app.endpoint("/metrics"))
            .bearer_auth("writer")
            .send()
            .await
            .unwrap();
        let text = response.text().await.unwrap();
        let parsed = Scrape::parse(&text);
        (text, parsed)
    };
    let refused = [("method", "GET"), ("route", "/metrics"), ("status", "401")];
    assert!(scrape.value("agentdesk_http_requests_total", &refused) >= 2.0);
    app.shutdown().await;
}

#[tokio::test]
async fn a_worker_process_serves_its_metrics_on_the_metrics_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = TestApp::spawn_mode(agentdesk::app::Mode::Worker, |c| {
        c.metrics_addr = Some(([127, 0, 0, 1], port).into());
        c.api_tokens = vec!["scraper".into()];
    })
    .await;
    assert!(app.url.is_empty(), "a worker serves no API");
    let url = format!("http://127.0.0.1:{port}/metrics");
    let refused = app.client.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let scraped = app.client.get(&url).bearer_auth("scraper").send().await.unwrap();
    assert_eq!(scraped.status(), StatusCode::OK);
    let scrape = Scrape::parse(&scraped.text().await.unwrap());
    assert_eq!(
        scrape.types.get("agentdesk_claims_total").map(String::as_str),
        Some("counter")
    );
    assert_eq!(
        scrape.value("agentdesk_tickets", &[("project", "default"), ("status", "todo")]),
        0.0
    );
    assert!(scrape.has("agentdesk_db_pool_connections", &[("state", "max")]));
    let elsewhere = app
        .client
        .get(format!("http://127.0.0.1:{port}/v1/tickets"))
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), StatusCode::NOT_FOUND);
    app.shutdown().await;
}

/// The `agentdesk_runtime_threads` gauge of a real `agentdesk worker` process started with
/// `runtime_threads` (None: the variable unset), read from its metrics address.
async fn runtime_threads_of_a_worker_process(database_url: &str, runtime_threads: Option<&str>) -> f64 {
    let port = support::free_port();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentdesk"));
    command
        .arg("worker")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", database_url)
        .env("AGENTDESK_METRICS_ADDR", format!("127.0.0.1:{port}"))
        .env("AGENTDESK_DB_MAX_CONNECTIONS", "4")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if let Some(threads) = runtime_threads {
        command.env("AGENTDESK_RUNTIME_THREADS", threads);
    }
    let mut child = command.spawn().expect("start an agentdesk worker");
    let client = reqwest::Client::new();
    let started = std::time::Instant::now();
    let text = loop {
        match client.get(format!("http://127.0.0.1:{port}/metrics")).send().await {
            Ok(r) if r.status() == StatusCode::OK => break r.text().await.unwrap(),
            _ if started.elapsed() < Duration::from_secs(60) => tokio::time::sleep(Duration::from_millis(50)).await,
            _ => panic!("the worker never served its metrics"),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let scrape = Scrape::parse(&text);
    assert_eq!(
        scrape.types.get("agentdesk_runtime_threads").map(String::as_str),
        Some("gauge")
    );
    scrape.value("agentdesk_runtime_threads", &[])
}

#[tokio::test]
async fn a_process_runs_its_tasks_on_one_thread_per_core_or_as_many_as_it_is_told() {
    // Each worker applies the migrations itself.
    let database_url = testkit::testing::fresh_database().await.unwrap();
    assert_eq!(runtime_threads_of_a_worker_process(&database_url, Some("3")).await, 3.0);
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(
        runtime_threads_of_a_worker_process(&database_url, None).await,
        cores as f64
    );
}
