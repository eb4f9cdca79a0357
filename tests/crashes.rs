//! The real binary killed with SIGKILL at the moments that hold work outside Postgres: a webhook
//! delivery in flight, an HTTP tool call in flight, approvals pending, an approved call running,
//! a compaction waiting for its summary.
//! After a restart every ticket ends once, an approved call runs at most once, no approval is
//! lost, and a webhook event is delivered again with the same `webhook-id`, within about the lease.

#[path = "webhooks/receiver.rs"]
#[allow(dead_code)]
mod receiver;
mod support;

use std::process::Child;
use std::time::{Duration, Instant};

use receiver::{verify, Answer, Receiver};
use serde_json::{json, Value};
use support::tool_server::ToolServer;
use testkit::fake_llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(30);
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The lease the processes run with (`AGENTDESK_LEASE_SECS`).
const LEASE: Duration = Duration::from_secs(2);

/// One database, model server and port; processes started and killed on them in turn.
struct Desk {
    database_url: String,
    pool: sqlx::PgPool,
    llm: FakeLlm,
    port: u16,
    base: String,
    client: reqwest::Client,
}

impl Desk {
    async fn new() -> Desk {
        let database_url = testkit::testing::fresh_database().await.unwrap();
        let pool = agentdesk::db::connect(&database_url, 2).await.unwrap();
        let port = support::free_port();
        Desk {
            database_url,
            pool,
            llm: FakeLlm::start().await,
            port,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
        }
    }

    /// Starts a process (loopback allowed for the tool and webhook servers) and waits until ready.
    async fn start(&self, log: &str) -> Child {
        let env = [("AGENTDESK_ALLOW_PRIVATE_URLS", "true"), ("AGENTDESK_LEASE_SECS", "2")];
        let child = support::spawn_binary(&self.database_url, &self.llm.openai_base_url(), self.port, log, &env);
        support::wait_ready(&self.client, &self.base, Duration::from_secs(15)).await;
        child
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> (reqwest::StatusCode, Value) {
        support::send(self.client.request(method, format!("{}{path}", self.base)).json(&body)).await
    }

    /// Defines `tool` (an HTTP tool at `url`) and an agent `tooler` with it and `close_ticket`.
    async fn tooler(&self, tool: &str, url: String, requires_approval: bool) {
        let def = json!({"description": "a tool", "url": url, "method": "POST", "requires_approval": requires_approval,
                         "input_schema": {"type": "object"}});
        let (status, body) = self.send(reqwest::Method::PUT, &format!("/v1/tools/{tool}"), def).await;
        assert!(status.is_success(), "{body}");
        let agent = json!({"provider": "openai", "model": "m", "labels": ["tooler"], "tools": ["close_ticket", tool]});
        let (status, body) = self.send(reqwest::Method::PUT, "/v1/agents/tooler", agent).await;
        assert!(status.is_success(), "{body}");
    }

    async fn ticket(&self, labels: &[&str]) -> String {
        let t = support::create_ticket_at(&self.client, &self.base, json!({"task": "work", "labels": labels})).await;
        t["key"].as_str().unwrap().to_owned()
    }

    async fn wait_status(&self, key: &str, status: &str) -> Value {
        support::wait_status_at(
            &self.client,
            &self.base,
            key,
            status,
            tokio::time::Instant::now() + WAIT,
        )
        .await
    }

    /// The ticket's event kinds, from the database; checks its seqs have no gaps.
    async fn kinds(&self, key: &str) -> Vec<String> {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT e.seq, e.kind FROM events e JOIN tickets t ON t.id = e.ticket_id WHERE t.key = $1 ORDER BY e.seq",
        )
        .bind(key)
        .fetch_all(&self.pool)
        .await
        .unwrap();
        let seqs: Vec<i64> = rows.iter().map(|r| r.0).collect();
        assert_eq!(
            seqs,
            (1..=rows.len() as i64).collect::<Vec<_>>(),
            "{key}'s events have no gaps"
        );
        rows.into_iter().map(|r| r.1).collect()
    }

    /// The ticket ended once, as `done`.
    async fn ended_once(&self, key: &str) {
        let kinds = self.kinds(key).await;
        let ends = kinds
            .iter()
            .filter(|k| k.as_str() == "ticket.done" || k.as_str() == "ticket.failed")
            .count();
        assert_eq!(ends, 1, "{key}: {kinds:?}");
        assert_eq!(kinds.last().map(String::as_str), Some("ticket.done"), "{kinds:?}");
    }
}

fn kill(mut child: Child) {
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

/// Calls `tool` until the model has its result, then closes the ticket.
fn call_then_close(tool: &'static str) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    move |request| {
        let has_result = request["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if has_result {
            Reply::tool_call("close_ticket", json!({"result": "finished"}))
        } else {
            Reply::tool_call(tool, json!({"env": "prod"}))
        }
    }
}

async fn wait_requests(server: &ToolServer, n: usize) {
    let what = support::Describe(|| format!("{n} tool requests: {:?}", server.requests()));
    support::eventually(what, WAIT, || async { (server.requests().len() >= n).then_some(()) }).await
}

#[tokio::test]
async fn a_webhook_delivery_in_flight_at_a_kill_is_sent_again_with_its_id_within_about_the_lease() {
    let desk = Desk::new().await;
    // The first request never gets an answer; the next ones get 200.
    let receiver = Receiver::start(vec![Answer::Hang]).await;
    let first = desk.start("target/crash-webhook-first.log").await;
    let (status, _) = desk
        .send(
            reqwest::Method::POST,
            "/v1/webhooks",
            json!({"url": receiver.url, "secret": SECRET, "events": ["ticket.created"]}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED);
    desk.ticket(&["nobody"]).await;
    assert_eq!(receiver.wait_for(1, WAIT).await.len(), 1);
    let killed = Instant::now();
    kill(first);

    // The webhook timeout (15 s by default) is far longer than the lease: the dead process's
    // endpoint is taken over once its lease lapses, not once a send could have timed out.
    let second = desk.start("target/crash-webhook-second.log").await;
    let got = receiver.wait_for(2, WAIT).await;
    let resumed = killed.elapsed();
    assert_eq!(got.len(), 2);
    // Before, the endpoint waited for a lease of at least the timeout and 2 s more (17 s).
    assert!(
        resumed < LEASE + Duration::from_secs(8),
        "resumed {resumed:?} after the kill"
    );
    assert_eq!(got[1].id, got[0].id, "the same webhook-id");
    assert_eq!(got[1].body, got[0].body);
    assert!(verify(
        SECRET,
        &got[1].id,
        &got[1].timestamp,
        &got[1].body,
        &got[1].signature
    ));
    kill(second);
}

#[tokio::test]
async fn an_http_tool_call_in_flight_at_a_kill_ends_its_ticket_once() {
    let desk = Desk::new().await;
    let server = ToolServer::start().await;
    desk.llm.set_responder(call_then_close("slow"));
    let first = desk.start("target/crash-tool-first.log").await;
    // `/slow` answers after 3 s: the process is killed while it waits.
    desk.tooler("slow", server.url("/slow"), false).await;
    let key = desk.ticket(&["tooler"]).await;
    wait_requests(&server, 1).await;
    kill(first);

    let second = desk.start("target/crash-tool-second.log").await;
    let done = desk.wait_status(&key, "done").await;
    assert_eq!(done["attempts"], 2, "{done}");
    kill(second);
    desk.ended_once(&key).await;
    let kinds = desk.kinds(&key).await;
    assert!(kinds.contains(&"ticket.requeued".to_owned()), "{kinds:?}");
}

#[tokio::test]
async fn approvals_pending_at_a_kill_are_kept_and_the_approved_call_runs_once() {
    let desk = Desk::new().await;
    let server = ToolServer::start().await;
    desk.llm.set_responder(call_then_close("deploy"));
    let first = desk.start("target/crash-approvals-first.log").await;
    desk.tooler("deploy", server.url("/deploy"), true).await;
    let key = desk.ticket(&["tooler"]).await;
    let waiting = desk.wait_status(&key, "waiting").await;
    let call_id = waiting["pending_approvals"][0]["call_id"].as_str().unwrap().to_owned();
    kill(first);

    let second = desk.start("target/crash-approvals-second.log").await;
    let (status, got) = desk
        .send(reqwest::Method::GET, &format!("/v1/tickets/{key}"), Value::Null)
        .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(got["status"], "waiting", "{got}");
    assert_eq!(
        got["pending_approvals"][0]["call_id"],
        call_id.as_str(),
        "the approval survived: {got}"
    );
    let (status, body) = desk
        .send(
            reqwest::Method::POST,
            &format!("/v1/tickets/{key}/approvals/{call_id}"),
            json!({"approve": true}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    desk.wait_status(&key, "done").await;
    kill(second);
    assert_eq!(server.requests().len(), 1, "the approved call ran once");
    desk.ended_once(&key).await;
}

#[tokio::test]
async fn deadlines_of_approvals_and_questions_fire_after_a_kill_once() {
    let desk = Desk::new().await;
    let server = ToolServer::start().await;
    let deploy = call_then_close("deploy");
    desk.llm.set_responder(move |request| {
        if request["model"] == "m-ask" {
            Reply::tool_call("ask_human", json!({"question": "Anyone there?"}))
        } else {
            deploy(request)
        }
    });
    let first = desk.start("target/crash-deadlines-first.log").await;
    let def = json!({"url": server.url("/deploy"), "method": "POST", "requires_approval": true,
                     "approval_timeout_secs": 3, "on_timeout": "approve", "input_schema": {"type": "object"}});
    let (status, body) = desk.send(reqwest::Method::PUT, "/v1/tools/deploy", def).await;
    assert!(status.is_success(), "{body}");
    let agents = [
        (
            "tooler",
            json!({"provider": "openai", "model": "m", "labels": ["tooler"], "tools": ["close_ticket", "deploy"]}),
        ),
        (
            "asker",
            json!({"provider": "openai", "model": "m-ask", "labels": ["asker"], "tools": ["ask_human"],
                         "question_timeout_secs": 3, "on_question_timeout": "fail"}),
        ),
    ];
    for (name, agent) in agents {
        let (status, body) = desk
            .send(reqwest::Method::PUT, &format!("/v1/agents/{name}"), agent)
            .await;
        assert!(status.is_success(), "{body}");
    }
    let approval = desk.ticket(&["tooler"]).await;
    let question = desk.ticket(&["asker"]).await;
    desk.wait_status(&approval, "waiting").await;
    desk.wait_status(&question, "waiting").await;
    // Killed before either deadline: the next process fires them.
    kill(first);

    let second = desk.start("target/crash-deadlines-second.log").await;
    desk.wait_status(&approval, "done").await;
    let failed = desk.wait_status(&question, "failed").await;
    kill(second);
    assert_eq!(failed["error"]["kind"], "question_expired", "{failed}");
    assert_eq!(server.requests().len(), 1, "approved at its deadline, it ran once");
    desk.ended_once(&approval).await;
    let expired = |kinds: Vec<String>, kind: &str| kinds.iter().filter(|k| k.as_str() == kind).count();
    assert_eq!(expired(desk.kinds(&approval).await, "tool.approval_expired"), 1);
    assert_eq!(expired(desk.kinds(&question).await, "question.expired"), 1);
}

#[tokio::test]
async fn an_approved_call_running_at_a_kill_is_not_run_again() {
    let desk = Desk::new().await;
    let server = ToolServer::start().await;
    desk.llm.set_responder(call_then_close("deploy"));
    let first = desk.start("target/crash-approved-first.log").await;
    // `/slow` answers after 3 s: the process is killed while the approved call waits for it.
    desk.tooler("deploy", server.url("/slow"), true).await;
    let key = desk.ticket(&["tooler"]).await;
    let waiting = desk.wait_status(&key, "waiting").await;
    let call_id = waiting["pending_approvals"][0]["call_id"].as_str().unwrap().to_owned();
    let (status, body) = desk
        .send(
            reqwest::Method::POST,
            &format!("/v1/tickets/{key}/approvals/{call_id}"),
            json!({"approve": true}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    wait_requests(&server, 1).await;
    kill(first);

    let second = desk.start("target/crash-approved-second.log").await;
    // Done only once the model had the call's outcome: a second run of the call would have
    // reached the tool server (which records a request as it arrives) before that.
    desk.wait_status(&key, "done").await;
    kill(second);
    assert_eq!(server.requests().len(), 1, "an approved call runs at most once");
    desk.ended_once(&key).await;
}

/// What every summariser request ends with.
const SUMMARISER_KEY: &str = "Write the summary now.";

#[tokio::test]
async fn a_kill_during_a_compaction_leaves_the_transcript_whole_and_the_ticket_ends_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let desk = Desk::new().await;
    // The first summariser request outlives the process; the next one, after the restart, answers.
    let summarisers = Arc::new(AtomicUsize::new(0));
    let seen = summarisers.clone();
    desk.llm.set_responder(move |request| {
        if request.to_string().contains(SUMMARISER_KEY) {
            let reply = Reply::text("SUMMARY-MARKER: review INC-1 and close the ticket.");
            if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                return reply.first_byte_delay(Duration::from_secs(60));
            }
            return reply;
        }
        Reply::tool_call("close_ticket", json!({"result": "reviewed"}))
    });
    let first = desk.start("target/crash-compaction-first.log").await;
    let agent = json!({"provider": "openai", "model": "m", "labels": ["compact"], "tools": ["close_ticket"],
                       "context_window": 4096});
    let (status, body) = desk.send(reqwest::Method::PUT, "/v1/agents/compactor", agent).await;
    assert!(status.is_success(), "{body}");
    // A task far over the window: a blocking compaction runs before the first request.
    let task = "Incident INC-1: the checkout service returned 502s after the deploy; review it.\n".repeat(180);
    let ticket =
        support::create_ticket_at(&desk.client, &desk.base, json!({"task": task, "labels": ["compact"]})).await;
    let key = ticket["key"].as_str().unwrap().to_owned();
    assert!(desk.llm.wait_for_requests(1, WAIT).await, "the summariser was asked");
    kill(first);

    // Killed mid-compaction: nothing of it was stored but its start.
    let kinds = desk.kinds(&key).await;
    assert!(kinds.contains(&"compaction.started".to_owned()), "{kinds:?}");
    assert!(!kinds.contains(&"compaction.finished".to_owned()), "{kinds:?}");
    let summaries = |desk: &Desk| {
        let pool = desk.pool.clone();
        let key = key.clone();
        async move {
            let (n,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM comments c JOIN tickets t ON t.id = c.ticket_id \
                 WHERE t.key = $1 AND c.content::text LIKE '%SUMMARY-MARKER%'",
            )
            .bind(&key)
            .fetch_one(&pool)
            .await
            .unwrap();
            n
        }
    };
    assert_eq!(summaries(&desk).await, 0);

    let second = desk.start("target/crash-compaction-second.log").await;
    let done = desk.wait_status(&key, "done").await;
    kill(second);
    assert_eq!(done["attempts"], 2, "{done}");
    desk.ended_once(&key).await;
    let kinds = desk.kinds(&key).await;
    let finished = kinds.iter().filter(|k| k.as_str() == "compaction.finished").count();
    assert_eq!(finished, 1, "one compaction was stored: {kinds:?}");
    assert_eq!(summaries(&desk).await, 1, "one summary in the transcript");
    assert_eq!(summarisers.load(Ordering::SeqCst), 2);
}
