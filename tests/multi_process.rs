//! Scale-out: two `api` and two `worker` processes of the real binary on one database. Tickets
//! come in through both APIs; a worker is killed with SIGKILL mid-run; then every process is
//! stopped and started again in turn while tickets run. Every ticket must finish exactly once,
//! and an event-stream client on each API must see every persisted event exactly once (resuming
//! with `Last-Event-ID` across its API's restart), and the live text of models that stream in the
//! worker processes.

mod support;

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use support::{eventually, SseClient};
use testkit::fake_llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(60);

/// One agentdesk process: its mode, port and log, and the running child when it runs.
struct Process {
    mode: &'static str,
    port: u16,
    log: String,
    child: Option<Child>,
}

impl Process {
    fn new(mode: &'static str, name: &str) -> Process {
        Process {
            mode,
            port: support::free_port(),
            log: format!("target/multi-process-{name}.log"),
            child: None,
        }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn start(&mut self, database_url: &str, llm: &FakeLlm) {
        self.start_with(database_url, &[("OPENAI_BASE_URL", &llm.openai_base_url())]);
    }

    /// Starts it with `env` besides the test's settings (a provider's, or none).
    fn start_with(&mut self, database_url: &str, env: &[(&str, &str)]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_agentdesk"))
            .arg(self.mode)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", database_url)
            .envs(env.iter().copied())
            .env("AGENTDESK_ADDR", format!("127.0.0.1:{}", self.port))
            .env("AGENTDESK_LEASE_SECS", "2")
            .env("AGENTDESK_WORKERS", "8")
            .env("AGENTDESK_DB_MAX_CONNECTIONS", "8")
            .env("AGENTDESK_SHUTDOWN_GRACE_SECS", "5")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the agentdesk binary");
        self.child = Some(child);
    }

    /// SIGKILL: no shutdown, no release; the lease must run out.
    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM, as an orchestrator stops a process: it must exit 0 within its grace.
    async fn stop(&mut self) {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "{} on {} exited with {status}", self.mode, self.port);
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{} did not stop", self.mode);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_ready(&self, client: &reqwest::Client) {
        let what = format!("{} on {} to become ready (see {})", self.mode, self.port, self.log);
        let readyz = &format!("{}/readyz", self.base());
        eventually(what, Duration::from_secs(20), || async move {
            let answer = client.get(readyz).send().await;
            answer.ok().filter(|r| r.status().is_success()).map(drop)
        })
        .await
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Follows `/v1/events` of one API for the whole test, reconnecting with `Last-Event-ID` whenever
/// the connection ends (its API restarting), and keeps every event it receives. The flag is set
/// once its first stream's starting point is fixed (every event written afterwards is sent).
type Follower = (Arc<Mutex<Vec<Value>>>, Arc<AtomicBool>, tokio::task::JoinHandle<()>);

fn follow_events(base: String, stop: Arc<AtomicBool>) -> Follower {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let connected = Arc::new(AtomicBool::new(false));
    let connected_out = connected.clone();
    let task = tokio::spawn(async move {
        let mut last_id: Option<String> = None;
        while !stop.load(Ordering::SeqCst) {
            let stream = SseClient::connect(&format!("{base}/v1/events"), last_id.as_deref()).await;
            let Ok(mut stream) = stream else {
                // Not a wait for anything: the pause between tries to reconnect.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            if stream.wait_ready(Duration::from_secs(5)).await {
                connected.store(true, Ordering::SeqCst);
            }
            loop {
                match stream.next_event(Duration::from_millis(200)).await {
                    Some(event) => out.lock().unwrap().push(event.data),
                    None if stream.ended() || stream.error().is_some() => break,
                    None if stop.load(Ordering::SeqCst) => break,
                    None => {}
                }
            }
            if let Some(id) = stream.last_id() {
                last_id = Some(id.to_string());
            }
        }
    });
    (seen, connected_out, task)
}

async fn create(client: &reqwest::Client, api: &Process, i: usize) -> String {
    let response = client
        .post(format!("{}/v1/tickets", api.base()))
        .header("Idempotency-Key", format!("multi-{i}"))
        .json(&json!({ "task": format!("job {i}") }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "ticket {i} through {}", api.port);
    let ticket: Value = response.json().await.unwrap();
    ticket["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_apis_and_two_workers_lose_nothing_through_a_kill_and_a_rolling_restart() {
    let database_url = testkit::testing::fresh_database().await.unwrap();
    // The schema exists before four processes race to migrate it.
    let pool = agentdesk::db::connect(&database_url, 2).await.unwrap();
    agentdesk::db::migrate(&pool).await.unwrap();
    let llm = FakeLlm::start().await;
    // About a second of streamed text per ticket, then it closes: long enough to be caught
    // mid-run by the kill and the restarts.
    llm.set_reply(
        Reply::tool_call("close_ticket", json!({ "result": "finished" }))
            .with_text("working through the job one word at a time")
            .chunk_delay(Duration::from_millis(120)),
    );
    let client = reqwest::Client::new();

    let mut apis = [Process::new("api", "api-a"), Process::new("api", "api-b")];
    let mut workers = [Process::new("worker", "worker-a"), Process::new("worker", "worker-b")];
    for p in apis.iter_mut().chain(workers.iter_mut()) {
        p.start(&database_url, &llm);
    }
    for p in apis.iter().chain(workers.iter()) {
        p.wait_ready(&client).await;
    }
    // A worker serves its health, and nothing of the API.
    let api_on_worker = client
        .get(format!("{}/v1/tickets", workers[0].base()))
        .send()
        .await
        .unwrap();
    assert_eq!(api_on_worker.status(), 404);
    // And its metrics, for Prometheus to scrape each process.
    let metrics = client
        .get(format!("{}/metrics", workers[0].base()))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics.text().await.unwrap().contains("agentdesk_claims_total"));

    let stop = Arc::new(AtomicBool::new(false));
    let followers: Vec<_> = apis.iter().map(|a| follow_events(a.base(), stop.clone())).collect();
    eventually(
        "both event streams to be connected",
        Duration::from_secs(30),
        || async {
            followers
                .iter()
                .all(|(_, connected, _)| connected.load(Ordering::SeqCst))
                .then_some(())
        },
    )
    .await;

    let mut ids = vec![];
    let mut next = 0;
    for _ in 0..16 {
        ids.push(create(&client, &apis[next % 2], next).await);
        next += 1;
    }
    // Kill a worker while it has tickets in flight.
    assert!(llm.wait_for_requests(8, WAIT).await, "tickets reached the model");
    workers[0].kill();
    workers[0].start(&database_url, &llm);
    workers[0].wait_ready(&client).await;

    // Rolling restart: each process in turn, tickets arriving through the API that stays up.
    for step in 0..4 {
        let up = if step == 0 { 1 } else { 0 };
        for _ in 0..4 {
            ids.push(create(&client, &apis[up], next).await);
            next += 1;
        }
        let process = if step < 2 {
            &mut apis[step]
        } else {
            &mut workers[step - 2]
        };
        process.stop().await;
        process.start(&database_url, &llm);
        process.wait_ready(&client).await;
    }

    // Every ticket finishes, done, exactly once.
    let open = &Mutex::new(vec![]);
    let what = support::Describe(|| format!("every ticket to finish: {:?}", open.lock().unwrap()));
    eventually(what, WAIT, || async {
        let states: Vec<(String, String)> =
            sqlx::query_as("SELECT key, status::text FROM tickets WHERE status <> 'done' ORDER BY key")
                .fetch_all(&pool)
                .await
                .unwrap();
        let finished = states.is_empty();
        *open.lock().unwrap() = states;
        finished.then_some(())
    })
    .await;
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM tickets")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(total as usize, ids.len(), "one ticket per request");
    let done_per_ticket: Vec<(String, i64)> = sqlx::query_as(
        "SELECT t.id::text, count(e.*) FILTER (WHERE e.kind = 'ticket.done')
         FROM tickets t LEFT JOIN events e ON e.ticket_id = t.id GROUP BY t.id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    for (id, done) in &done_per_ticket {
        assert_eq!(*done, 1, "ticket {id} finished {done} times");
    }
    let requeued: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE kind = 'ticket.requeued'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        requeued > 0,
        "the kill caught tickets in flight, which another claim finished"
    );

    // Both streams saw every persisted event exactly once, and live text from the workers.
    let persisted: HashSet<(String, i64)> =
        sqlx::query_as::<_, (String, i64)>("SELECT ticket_id::text, seq FROM events")
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    // The last events may still be on their way to the streams.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let complete = followers.iter().all(|(seen, _, _)| {
            let seen = seen.lock().unwrap();
            seen.iter().filter(|e| e["seq"].is_i64()).count() >= persisted.len()
        });
        if complete || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for (i, (seen, _, task)) in followers.into_iter().enumerate() {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        let seen = seen.lock().unwrap();
        let mut counts: HashMap<(String, i64), usize> = HashMap::new();
        let mut deltas = 0;
        for event in seen.iter() {
            match event["seq"].as_i64() {
                Some(seq) => {
                    *counts
                        .entry((event["ticket_id"].as_str().unwrap().to_string(), seq))
                        .or_default() += 1
                }
                None if event["kind"] == "text.delta" => deltas += 1,
                None => {}
            }
        }
        let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "stream {i} saw events more than once: {twice:?}");
        let got: HashSet<(String, i64)> = counts.into_keys().collect();
        let missing: Vec<_> = persisted.difference(&got).collect();
        assert!(
            missing.is_empty(),
            "stream {i} missed {} events: {missing:?}",
            missing.len()
        );
        assert_eq!(got.len(), persisted.len(), "stream {i} saw only persisted events");
        assert!(
            deltas > 0,
            "stream {i} saw the live text of models streaming in other processes"
        );
    }

    for p in apis.iter_mut().chain(workers.iter_mut()) {
        p.stop().await;
    }
}

/// What an operator reads when no model provider is set: only a process that works tickets (and
/// so calls models) warns at start, naming OPENAI_BASE_URL for a local server; a ticket that then
/// fails says the same in its error and in one warn line of the worker; and a worker logs the
/// address of its health endpoints as an address.
#[tokio::test]
async fn without_a_provider_only_the_worker_warns_and_a_failing_ticket_says_what_to_set() {
    let database_url = testkit::testing::fresh_database().await.unwrap();
    let pool = agentdesk::db::connect(&database_url, 2).await.unwrap();
    agentdesk::db::migrate(&pool).await.unwrap();
    let client = reqwest::Client::new();
    let mut api = Process::new("api", "unconfigured-api");
    let mut worker = Process::new("worker", "unconfigured-worker");
    for p in [&mut api, &mut worker] {
        let _ = std::fs::remove_file(&p.log);
        p.start_with(&database_url, &[]);
    }
    api.wait_ready(&client).await;
    worker.wait_ready(&client).await;

    let id = create(&client, &api, 0).await;
    let ticket = support::wait_status_at(
        &client,
        &api.base(),
        &id,
        "failed",
        tokio::time::Instant::now() + Duration::from_secs(30),
    )
    .await;
    assert_eq!(ticket["error"]["kind"], "provider_unconfigured", "{ticket}");
    let message = ticket["error"]["message"].as_str().unwrap();
    for needle in ["OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"] {
        assert!(message.contains(needle), "{needle} missing in {message}");
    }
    api.stop().await;
    worker.stop().await;

    let api_log = std::fs::read_to_string(&api.log).unwrap();
    assert!(api_log.contains("agentdesk API listening"), "{api_log}");
    assert!(
        !api_log.contains("provider"),
        "an api process runs no models: {api_log}"
    );
    let worker_log = std::fs::read_to_string(&worker.log).unwrap();
    let warning = worker_log
        .lines()
        .find(|l| l.contains("no model provider configured"))
        .unwrap_or_else(|| panic!("no warning at start: {worker_log}"));
    assert!(
        warning.contains("WARN") && warning.contains("OPENAI_BASE_URL"),
        "{warning}"
    );
    let key = ticket["key"].as_str().unwrap();
    let failed: Vec<&str> = worker_log.lines().filter(|l| l.contains(key)).collect();
    assert_eq!(failed.len(), 1, "one line for the failed ticket: {worker_log}");
    for needle in [
        "WARN",
        "kind=provider_unconfigured",
        "OPENAI_BASE_URL",
        "the ticket fails",
    ] {
        assert!(failed[0].contains(needle), "{needle} missing in {}", failed[0]);
    }
    let listening = worker_log
        .lines()
        .find(|l| l.contains("worker listening"))
        .unwrap_or_else(|| panic!("no address: {worker_log}"));
    let addr = format!("addr=127.0.0.1:{}", worker.port);
    assert!(listening.split_whitespace().any(|w| w == addr), "{listening}");
}
