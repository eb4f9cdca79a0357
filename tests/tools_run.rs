//! The built-in tools run against a real Postgres: finishers validate without writing and apply in
//! the caller's fenced transaction; reads are capped; writes of a worker that lost its claim fail.

use std::time::Duration;

use agentdesk::db;
use agentdesk::db::claims::Claim;
use agentdesk::db::tickets::NewTicket;
use agentdesk::domain::ProjectId;
use agentdesk::domain::{Agent, Author, ContentBlock, EventData, NewEvent, Status, Ticket, TicketRef};
use agentdesk::tools::{apply_finisher, run_builtin, Finisher, ToolContext, ToolErrorKind, ToolOutcome};
use agentdesk::transitions;
use serde_json::{json, Value};
use sqlx::PgPool;

const AGENT: &str = "alice";

async fn pool() -> PgPool {
    let url = testkit::testing::fresh_database().await.expect("a fresh test database");
    let pool = db::connect(&url, 4).await.expect("connect");
    db::migrate(&pool).await.expect("migrate");
    let now = chrono::Utc::now();
    let agent = Agent {
        name: AGENT.into(),
        role: "You work tickets.".into(),
        provider: None,
        model: "test-model".into(),
        labels: vec![],
        tools: vec![],
        context_window: None,
        max_turns: None,
        max_input_tokens: None,
        max_output_tokens: None,
        max_schema_retries: 10,
        max_request_retries: 10,
        request_retry_delay_ms: 500,
        temperature: None,
        max_tokens: None,
        thinking_budget: None,
        tool_choice: "auto".into(),
        max_concurrent: None,
        budget_usd_per_day: None,
        created_at: now,
        updated_at: now,
        approval_timeout_secs: None,
        on_timeout: None,
        question_timeout_secs: None,
        on_question_timeout: None,
        version: 1,
    };
    db::agents::upsert(&pool, ProjectId::DEFAULT, &agent)
        .await
        .expect("agent");
    pool
}

fn new_ticket(task: &str, labels: &[&str], schema: Option<Value>) -> NewTicket {
    NewTicket {
        project: ProjectId::DEFAULT,
        task: json!(task),
        labels: labels.iter().map(|l| l.to_string()).collect(),
        priority: 0,
        schema,
        parent_id: None,
        metadata: json!({}),
        max_attempts: 3,
        reporter: "user".into(),
        idempotency: None,
        trace_context: None,
        deadline_secs: None,
    }
}

async fn create(pool: &PgPool, new: NewTicket) -> Ticket {
    let mut tx = pool.begin().await.expect("begin");
    let ticket = transitions::create_ticket(&mut tx, new).await.expect("create");
    tx.commit().await.expect("commit");
    ticket
}

/// Claims one ticket as worker w1 would.
async fn claim_one(pool: &PgPool) -> Vec<Claim> {
    db::claims::register_worker(pool, "w1", Duration::from_secs(60))
        .await
        .expect("a process lease");
    transitions::claims::claim_batch(&mut pool.acquire().await.unwrap(), 1, "w1")
        .await
        .expect("claim")
}

/// A ticket for `alice`, claimed by worker w1.
async fn claimed(pool: &PgPool, schema: Option<Value>) -> Claim {
    create(pool, new_ticket("the main task", &[AGENT], schema)).await;
    let mut claims = claim_one(pool).await;
    assert_eq!(claims.len(), 1);
    let claim = claims.remove(0);
    // The claim carries the agent's definition, so the first step need not read it again.
    let definition = claim.definition.as_ref().expect("the claim read the agent");
    assert_eq!(
        (definition.name.as_str(), definition.role.as_str()),
        (AGENT, "You work tickets.")
    );
    claim
}

#[tokio::test]
async fn a_first_claim_hands_over_the_transcript_only_when_the_task_is_all_of_it() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    let transcript = claim.transcript.as_ref().expect("the claim wrote the whole transcript");
    let stored = db::comments::all(&pool, claim.ticket.id).await.expect("comments");
    assert_eq!(
        serde_json::to_value(transcript).unwrap(),
        serde_json::to_value(&stored).unwrap()
    );
    assert_eq!(stored.len(), 1, "just the task");

    // Somebody commented before any worker took the ticket: the first step reads the transcript.
    let commented = create(&pool, new_ticket("another task", &[AGENT], None)).await;
    let mut tx = pool.begin().await.expect("begin");
    db::comments::insert(
        &mut tx,
        commented.id,
        Author::User,
        None,
        &[ContentBlock::text("a note")],
    )
    .await
    .expect("comment");
    tx.commit().await.expect("commit");
    let claims = claim_one(&pool).await;
    assert_eq!(claims[0].ticket.id, commented.id);
    assert!(claims[0].transcript.is_none());
}

fn ctx<'a>(pool: &'a PgPool, claim: &'a Claim) -> ToolContext<'a> {
    ToolContext {
        pool,
        fence: claim.fence(),
        ticket: &claim.ticket,
        agent: AGENT,
        call_id: "call_1",
        cancel: Default::default(),
    }
}

async fn ticket(pool: &PgPool, key: &str) -> Ticket {
    db::tickets::find(pool, ProjectId::DEFAULT, &TicketRef::parse(key).expect("a ticket key"))
        .await
        .expect("find")
        .expect("ticket exists")
}

async fn ticket_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tickets")
        .fetch_one(pool)
        .await
        .expect("count")
}

async fn event_kinds(pool: &PgPool, ticket: &Ticket) -> Vec<(String, Value)> {
    sqlx::query_as("SELECT kind, data FROM events WHERE ticket_id = $1 ORDER BY seq")
        .bind(ticket.id)
        .fetch_all(pool)
        .await
        .expect("events")
}

/// Applies a finisher the way the agent loop does: in a fenced transaction.
async fn apply(pool: &PgPool, claim: &Claim, finisher: &Finisher) -> String {
    let mut tx = db::claims::fence(pool, claim.fence())
        .await
        .expect("fence")
        .expect("claim held");
    let (out, result) = apply_finisher(&mut tx, claim.fence(), &claim.ticket, AGENT, finisher)
        .await
        .expect("apply");
    db::claims::finish(&mut tx, claim.fence(), &db::claims::Finish::Done(result), AGENT, vec![])
        .await
        .expect("finish");
    tx.commit().await.expect("commit");
    out
}

fn failed_kind(outcome: &ToolOutcome) -> &'static str {
    match outcome {
        ToolOutcome::Failed { kind, .. } => kind.as_str(),
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn output(outcome: ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Output(text) => text,
        other => panic!("expected output, got {other:?}"),
    }
}

#[tokio::test]
async fn close_without_schema_accepts_any_result_and_apply_marks_done() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    let result = json!({"answer": 42});
    let outcome = run_builtin(&ctx(&pool, &claim), "close_ticket", &json!({ "result": result })).await;
    let finisher = Finisher::Close { result: result.clone() };
    assert_eq!(outcome, ToolOutcome::Finish(finisher.clone()));
    // Running the tool alone writes nothing.
    assert_eq!(ticket(&pool, &claim.ticket.key).await.status, Status::InProgress);

    let out = apply(&pool, &claim, &finisher).await;
    assert_eq!(out, format!("{} is done.", claim.ticket.key));
    let done = ticket(&pool, &claim.ticket.key).await;
    assert_eq!(done.status, Status::Done);
    assert_eq!(done.result, Some(result.clone()));
    let events = event_kinds(&pool, &done).await;
    let (kind, data) = events.last().expect("events");
    assert_eq!(kind, "ticket.done");
    assert_eq!(data, &json!({ "result": result }));
}

#[tokio::test]
async fn close_null_result_is_invalid_input() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    let outcome = run_builtin(&ctx(&pool, &claim), "close_ticket", &json!({"result": null})).await;
    assert_eq!(failed_kind(&outcome), "invalid_input");
    let outcome = run_builtin(&ctx(&pool, &claim), "close_ticket", &json!({})).await;
    assert_eq!(failed_kind(&outcome), "invalid_input");
}

#[tokio::test]
async fn close_with_schema_validates_the_result() {
    let pool = pool().await;
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let claim = claimed(&pool, Some(schema)).await;

    let bad = run_builtin(&ctx(&pool, &claim), "close_ticket", &json!({"result": {"n": "x"}})).await;
    assert_eq!(failed_kind(&bad), "result_invalid");
    let ToolOutcome::Failed { message, .. } = bad else {
        unreachable!()
    };
    assert!(message.contains("/n"), "{message}");
    assert!(
        message.contains("call close_ticket again") || message.contains("Call close_ticket again"),
        "{message}"
    );
    let still = ticket(&pool, &claim.ticket.key).await;
    assert_eq!(still.status, Status::InProgress);
    assert_eq!(still.result, None);

    let good = run_builtin(&ctx(&pool, &claim), "close_ticket", &json!({"result": {"n": 3}})).await;
    assert_eq!(
        good,
        ToolOutcome::Finish(Finisher::Close {
            result: json!({"n": 3})
        })
    );
}

#[tokio::test]
async fn handover_closes_the_parent_and_creates_a_child_with_a_single_pass_task() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    let key = claim.ticket.key.clone();
    let input = json!({
        "to": " writer ",
        "task": "Write up {parent_key}: {parent_result} {unknown}",
        "result": "found {parent_key} literally",
        "schema": {"type": "string"}
    });
    let outcome = run_builtin(&ctx(&pool, &claim), "handover_ticket", &input).await;
    let ToolOutcome::Finish(finisher) = outcome else {
        panic!("expected a finisher, got {outcome:?}")
    };
    assert_eq!(
        finisher,
        Finisher::Handover {
            to: "writer".into(),
            task: "Write up {parent_key}: {parent_result} {unknown}".into(),
            result: "found {parent_key} literally".into(),
            schema: Some(json!({"type": "string"})),
        }
    );
    assert_eq!(ticket_count(&pool).await, 1, "running the tool writes nothing");

    let out = apply(&pool, &claim, &finisher).await;
    let parent = ticket(&pool, &key).await;
    assert_eq!(parent.status, Status::Done);
    assert_eq!(parent.result, Some(json!("found {parent_key} literally")));

    let (children, _) = db::tickets::list(
        &pool,
        &db::tickets::ListFilter {
            parent_id: Some(parent.id),
            limit: 10,
            ..db::tickets::ListFilter::new(ProjectId::DEFAULT)
        },
    )
    .await
    .expect("list");
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_eq!(
        out,
        format!("{key} is done; handed over to {} (to: writer).", child.key)
    );
    assert_eq!(child.status, Status::Todo);
    assert_eq!(child.labels, vec!["writer".to_string()]);
    assert_eq!(child.parent_id, Some(parent.id));
    assert_eq!(child.parent_key.as_deref(), Some(key.as_str()));
    assert_eq!(child.reporter, AGENT);
    assert_eq!(child.schema, Some(json!({"type": "string"})));
    assert_eq!(child.max_attempts, 3);
    assert_eq!(
        child.task,
        json!(format!("Write up {key}: found {{parent_key}} literally {{unknown}}"))
    );
    let kinds: Vec<String> = event_kinds(&pool, child).await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, ["ticket.created"]);
    let (last, _) = event_kinds(&pool, &parent).await.pop().expect("events");
    assert_eq!(last, "ticket.done");
}

#[tokio::test]
async fn every_invalid_handover_changes_nothing() {
    let pool = pool().await;
    let claim = claimed(&pool, Some(json!({"type": "string", "minLength": 20}))).await;
    let cases = [
        (
            json!({"to": "  ", "task": "t", "result": "a long enough result here"}),
            "invalid_input",
        ),
        (
            json!({"task": "t", "result": "a long enough result here"}),
            "invalid_input",
        ),
        (
            json!({"to": "bad\u{7}label", "task": "t", "result": "a long enough result here"}),
            "invalid_input",
        ),
        (
            json!({"to": "w", "task": "", "result": "a long enough result here"}),
            "invalid_input",
        ),
        (
            json!({"to": "w", "task": 5, "result": "a long enough result here"}),
            "invalid_input",
        ),
        (json!({"to": "w", "task": "t"}), "invalid_input"),
        (json!({"to": "w", "task": "t", "result": ""}), "invalid_input"),
        (json!({"to": "w", "task": "t", "result": 42}), "invalid_input"),
        (json!({"to": "w", "task": "t", "result": ["a"]}), "invalid_input"),
        (
            json!({"to": "w", "task": "t", "result": "a long enough result here", "schema": {"type": "not_a_type"}}),
            "invalid_input",
        ),
        (json!({"to": "w", "task": "t", "result": "too short"}), "result_invalid"),
    ];
    for (input, kind) in cases {
        let outcome = run_builtin(&ctx(&pool, &claim), "handover_ticket", &input).await;
        assert_eq!(failed_kind(&outcome), kind, "{input}");
    }
    let numeric = run_builtin(
        &ctx(&pool, &claim),
        "handover_ticket",
        &json!({"to": "w", "task": "t", "result": 1}),
    )
    .await;
    let ToolOutcome::Failed { message, .. } = numeric else {
        unreachable!()
    };
    assert!(message.contains("close_ticket"), "{message}");
    assert_eq!(ticket_count(&pool).await, 1);
    let parent = ticket(&pool, &claim.ticket.key).await;
    assert_eq!(parent.status, Status::InProgress);
    assert_eq!(parent.result, None);
}

#[tokio::test]
async fn a_lost_claim_makes_writes_conflict_and_changes_nothing() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    let todo = create(&pool, new_ticket("editable", &["other"], None)).await;
    sqlx::query("UPDATE tickets SET generation = generation + 1 WHERE id = $1")
        .bind(claim.ticket.id)
        .execute(&pool)
        .await
        .expect("bump");

    let created = run_builtin(
        &ctx(&pool, &claim),
        "manage_tickets",
        &json!({"action": "create", "task": "a sub-task"}),
    )
    .await;
    assert_eq!(
        created,
        ToolOutcome::Failed {
            kind: ToolErrorKind::Conflict,
            message: "this ticket is no longer held by this worker".into()
        }
    );
    let edited = run_builtin(
        &ctx(&pool, &claim),
        "manage_tickets",
        &json!({"action": "edit", "key": todo.key, "task": "changed"}),
    )
    .await;
    assert_eq!(failed_kind(&edited), "conflict");
    assert_eq!(ticket_count(&pool).await, 2);
    assert_eq!(ticket(&pool, &todo.key).await.task, json!("editable"));
}

#[tokio::test]
async fn manage_create_makes_a_sub_ticket() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    let out = output(
        run_builtin(
            &ctx(&pool, &claim),
            "manage_tickets",
            &json!({"action": "create", "task": "look this up", "labels": ["research", "research"], "schema": {"type": "string"}}),
        )
        .await,
    );
    let key = out.strip_prefix("Created ").expect("created").to_string();
    let sub = ticket(&pool, &key).await;
    assert_eq!(sub.status, Status::Todo);
    assert_eq!(sub.task, json!("look this up"));
    assert_eq!(sub.labels, vec!["research".to_string()]);
    assert_eq!(sub.parent_id, Some(claim.ticket.id));
    assert_eq!(sub.reporter, AGENT);
    assert_eq!(sub.schema, Some(json!({"type": "string"})));

    for input in [
        json!({"action": "create"}),
        json!({"action": "create", "task": "  "}),
        json!({"action": "create", "task": "x", "labels": [""]}),
        json!({"action": "create", "task": "x", "schema": {"type": 7}}),
    ] {
        let outcome = run_builtin(&ctx(&pool, &claim), "manage_tickets", &input).await;
        assert_eq!(failed_kind(&outcome), "invalid_input", "{input}");
    }
    assert_eq!(ticket_count(&pool).await, 2);
}

#[tokio::test]
async fn manage_edit_changes_only_todo_or_waiting_tickets_and_never_a_status() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    let todo = create(&pool, new_ticket("draft", &["other"], None)).await;

    let out = output(
        run_builtin(
            &ctx(&pool, &claim),
            "manage_tickets",
            &json!({"action": "edit", "key": todo.key, "task": "final", "labels": ["x", "y"]}),
        )
        .await,
    );
    assert!(out.starts_with(&format!("Updated {}.", todo.key)), "{out}");
    let edited = ticket(&pool, &todo.key).await;
    assert_eq!(edited.task, json!("final"));
    assert_eq!(edited.labels, vec!["x".to_string(), "y".to_string()]);
    assert_eq!(edited.status, Status::Todo);
    let (last, data) = event_kinds(&pool, &edited).await.pop().expect("events");
    assert_eq!(last, "ticket.updated");
    assert_eq!(data["ticket"]["task"], json!("final"));

    // The agent's own ticket is in progress: editing it is a conflict.
    let own = run_builtin(
        &ctx(&pool, &claim),
        "manage_tickets",
        &json!({"action": "edit", "key": claim.ticket.key, "task": "other"}),
    )
    .await;
    let ToolOutcome::Failed { kind, message } = own else {
        panic!("expected a conflict")
    };
    assert_eq!(kind, "conflict");
    assert!(
        message.contains("is in_progress: only todo or waiting tickets can be edited"),
        "{message}"
    );
    assert_eq!(ticket(&pool, &claim.ticket.key).await.task, json!("the main task"));

    let nothing = run_builtin(
        &ctx(&pool, &claim),
        "manage_tickets",
        &json!({"action": "edit", "key": todo.key}),
    )
    .await;
    assert_eq!(failed_kind(&nothing), "invalid_input");
    let missing = run_builtin(
        &ctx(&pool, &claim),
        "manage_tickets",
        &json!({"action": "edit", "key": "TICKET-999", "task": "x"}),
    )
    .await;
    assert_eq!(failed_kind(&missing), "not_found");
}

#[tokio::test]
async fn read_tickets_refuses_to_write() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    for action in ["create", "edit"] {
        let outcome = run_builtin(
            &ctx(&pool, &claim),
            "read_tickets",
            &json!({"action": action, "task": "x", "key": claim.ticket.key}),
        )
        .await;
        let ToolOutcome::Failed { kind, message } = outcome else {
            panic!("expected a failure")
        };
        assert_eq!(kind, "invalid_input");
        assert!(message.contains("manage_tickets"), "{message}");
    }
    assert_eq!(ticket_count(&pool).await, 1);
}

#[tokio::test]
async fn get_describes_one_ticket_with_its_whole_task() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    let long = "word ".repeat(1000);
    let other = create(&pool, new_ticket(&long, &["a", "b"], Some(json!({"type": "string"})))).await;
    for tool in ["read_tickets", "manage_tickets"] {
        let out = output(run_builtin(&ctx(&pool, &claim), tool, &json!({"action": "get", "key": other.key})).await);
        assert!(out.starts_with(&format!("{} [todo]\n", other.key)), "{out}");
        assert!(out.contains("labels: a, b"), "{out}");
        assert!(out.contains("reporter: user"), "{out}");
        assert!(out.contains("schema: {\"type\":\"string\"}"), "{out}");
        assert!(
            out.contains(&long),
            "the task is shown whole (the loop stubs outputs that are too large)"
        );
    }
    let by_id = output(
        run_builtin(
            &ctx(&pool, &claim),
            "read_tickets",
            &json!({"action": "get", "key": claim.ticket.id.to_string()}),
        )
        .await,
    );
    assert!(
        by_id.starts_with(&format!("{} [in_progress]", claim.ticket.key)),
        "{by_id}"
    );
    assert!(by_id.contains("agent: alice"), "{by_id}");

    for (input, kind) in [
        (json!({"action": "get"}), "invalid_input"),
        (json!({"action": "get", "key": "TICKET-404"}), "not_found"),
        (json!({"action": "get", "key": "nonsense"}), "not_found"),
    ] {
        let outcome = run_builtin(&ctx(&pool, &claim), "read_tickets", &input).await;
        assert_eq!(failed_kind(&outcome), kind, "{input}");
    }
}

#[tokio::test]
async fn list_and_search_are_capped_at_fifty_lines() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    for i in 0..55 {
        let label = if i % 2 == 0 { "even" } else { "odd" };
        create(
            &pool,
            new_ticket(&format!("Item number {i}\nsecond line"), &[label], None),
        )
        .await;
    }
    let all = output(run_builtin(&ctx(&pool, &claim), "read_tickets", &json!({"action": "list"})).await);
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines.len(), 50, "{all}");
    assert_eq!(lines[49], "(7 more not shown)");
    assert_eq!(
        lines[0],
        format!("{} [in_progress] labels=alice: the main task", claim.ticket.key)
    );
    assert!(
        lines[1].ends_with("labels=even: Item number 0 second line"),
        "{}",
        lines[1]
    );

    let odd = output(
        run_builtin(
            &ctx(&pool, &claim),
            "manage_tickets",
            &json!({"action": "list", "label": "odd", "status": "todo"}),
        )
        .await,
    );
    assert_eq!(odd.lines().count(), 27, "{odd}");
    assert!(odd.lines().all(|l| l.contains("[todo] labels=odd:")), "{odd}");

    let found = output(
        run_builtin(
            &ctx(&pool, &claim),
            "read_tickets",
            &json!({"action": "search", "query": "NUMBER 5"}),
        )
        .await,
    );
    let keys: Vec<&str> = found.lines().collect();
    assert_eq!(keys.len(), 6, "5 and 50..=54: {found}");

    let none = output(
        run_builtin(
            &ctx(&pool, &claim),
            "read_tickets",
            &json!({"action": "search", "query": "zebra"}),
        )
        .await,
    );
    assert_eq!(none, "No tickets match text \"zebra\".");
    let none = output(
        run_builtin(
            &ctx(&pool, &claim),
            "read_tickets",
            &json!({"action": "list", "status": "failed"}),
        )
        .await,
    );
    assert_eq!(none, "No tickets match status failed.");

    let bad_status = run_builtin(
        &ctx(&pool, &claim),
        "read_tickets",
        &json!({"action": "list", "status": "doing"}),
    )
    .await;
    let ToolOutcome::Failed { kind, message } = bad_status else {
        panic!("expected a failure")
    };
    assert_eq!(kind, "invalid_input");
    assert!(
        message.contains("todo, in_progress, waiting, done, failed, cancelled"),
        "{message}"
    );
    let no_query = run_builtin(&ctx(&pool, &claim), "read_tickets", &json!({"action": "search"})).await;
    assert_eq!(failed_kind(&no_query), "invalid_input");
}

#[tokio::test]
async fn unknown_tools_fail() {
    let pool = pool().await;
    let claim = claimed(&pool, None).await;
    let outcome = run_builtin(&ctx(&pool, &claim), "delete_everything", &json!({})).await;
    assert_eq!(failed_kind(&outcome), "unknown_tool");
}

#[tokio::test]
async fn a_grouped_append_writes_only_for_the_claims_that_still_hold() {
    let pool = pool().await;
    let held = claimed(&pool, None).await;
    let lost = claimed(&pool, None).await;
    let started = || NewEvent::new(Some(AGENT), EventData::RequestStarted { model: "m".into() });
    let retried = NewEvent::new(
        Some(AGENT),
        EventData::RequestRetried {
            attempt: 1,
            max_attempts: 3,
            kind: "overloaded".into(),
            message: "busy".into(),
            delay_ms: 10,
        },
    );
    let stale = db::claims::Fence {
        generation: lost.generation - 1,
        ..lost.fence()
    };
    let appended = db::events::append_fenced_many(
        &mut pool.acquire().await.unwrap(),
        &[(held.fence(), &[started(), retried][..]), (stale, &[started()][..])],
    )
    .await
    .expect("append");
    assert_eq!(appended, vec![held.ticket.id]);
    let seqs: Vec<(i64, String)> = sqlx::query_as("SELECT seq, kind FROM events WHERE ticket_id = $1 ORDER BY seq")
        .bind(held.ticket.id)
        .fetch_all(&pool)
        .await
        .expect("events");
    let kinds: Vec<&str> = seqs.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ticket.created",
            "ticket.started",
            "comment.created",
            "request.started",
            "request.retried"
        ]
    );
    assert!(
        seqs.iter().enumerate().all(|(i, (seq, _))| *seq == i as i64 + 1),
        "gapless: {seqs:?}"
    );
    let lost_kinds: Vec<String> = event_kinds(&pool, &lost.ticket)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert!(
        !lost_kinds.contains(&"request.started".to_string()),
        "a stale claim writes nothing"
    );
}

/// A step's write as the loop makes it: one comment (carried by its `comment.created`), usage,
/// and the outcome if any.
fn step_write(
    claim: &Claim,
    fence: db::claims::Fence,
    text: &str,
    outcome: Option<db::claims::Finish>,
) -> db::steps::StepWrite {
    let comment = db::steps::new_comment(claim.ticket.id, Author::User, None, vec![ContentBlock::text(text)]);
    let events = vec![
        NewEvent::new(
            Some(AGENT),
            EventData::ToolFinished {
                tool_name: "read_tickets".into(),
                call_id: "call_1".into(),
                output: text.into(),
            },
        ),
        NewEvent::new(
            Some(AGENT),
            EventData::CommentCreated {
                comment: comment.clone(),
            },
        ),
    ];
    db::steps::StepWrite {
        fence,
        agent: AGENT.into(),
        step: db::steps::StepResult {
            usage: agentdesk::domain::TicketUsage {
                requests: 1,
                output_tokens: 5,
                ..Default::default()
            },
            comments: vec![comment],
            events,
            carries: vec![None, Some(0)],
            outcome,
        },
    }
}

#[tokio::test]
async fn a_grouped_step_store_writes_only_for_the_claims_that_still_hold() {
    let pool = pool().await;
    let finishing = claimed(&pool, None).await;
    let going_on = claimed(&pool, None).await;
    let lost = claimed(&pool, None).await;
    let stale = db::claims::Fence {
        generation: lost.generation - 1,
        ..lost.fence()
    };
    let done = db::claims::Finish::Done(json!({ "answer": 42 }));
    let writes = vec![
        step_write(&finishing, finishing.fence(), "closing", Some(done)),
        step_write(&going_on, going_on.fence(), "more to do", None),
        step_write(&lost, stale, "from a lost claim", None),
    ];
    let mut conn = pool.acquire().await.expect("connection");
    let mut held = db::steps::store_steps(&mut conn, &writes).await.expect("store");
    held.sort();
    let mut expected = vec![finishing.ticket.id, going_on.ticket.id];
    expected.sort();
    assert_eq!(held, expected);

    let finished = ticket(&pool, &finishing.ticket.key).await;
    assert_eq!(finished.status, Status::Done);
    assert_eq!(finished.result, Some(json!({ "answer": 42 })));
    assert_eq!((finished.usage.requests, finished.usage.output_tokens), (1, 5));
    assert_eq!(ticket(&pool, &going_on.ticket.key).await.status, Status::InProgress);

    for (claim, last) in [(&finishing, Some("ticket.done")), (&going_on, None)] {
        // Gapless seqs, in id order too (the global stream's order), and the comment's seq
        // spliced into the event that carries it.
        let rows: Vec<(i64, i64, String, Value)> =
            sqlx::query_as("SELECT id, seq, kind, data FROM events WHERE ticket_id = $1 ORDER BY seq")
                .bind(claim.ticket.id)
                .fetch_all(&pool)
                .await
                .expect("events");
        assert!(rows.iter().enumerate().all(|(i, r)| r.1 == i as i64 + 1), "{rows:?}");
        assert!(rows.windows(2).all(|w| w[0].0 < w[1].0), "ids follow seqs: {rows:?}");
        let kinds: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
        let mut expected = vec![
            "ticket.created",
            "ticket.started",
            "comment.created",
            "tool.finished",
            "comment.created",
        ];
        expected.extend(last);
        assert_eq!(kinds, expected);
        assert_eq!(
            rows[4].3["comment"]["seq"],
            json!(2),
            "after the task, the step's comment is the second"
        );
        let comments = db::comments::all(&pool, claim.ticket.id).await.expect("comments");
        assert_eq!(comments.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2]);
    }
    // The lost claim wrote nothing: its log and transcript are as the claim left them.
    assert_eq!(event_kinds(&pool, &lost.ticket).await.len(), 3);
    assert_eq!(
        db::comments::all(&pool, lost.ticket.id).await.expect("comments").len(),
        1
    );
    assert_eq!(ticket(&pool, &lost.ticket.key).await.usage.requests, 0);
}

#[tokio::test]
async fn a_step_group_that_fails_stores_each_step_alone() {
    let pool = pool().await;
    let good = claimed(&pool, None).await;
    let bad = claimed(&pool, None).await;
    let writer = agentdesk::db::steps::StepWriter::start(pool.clone(), 2);
    // Postgres's jsonb cannot hold a NUL character: this step fails whatever group it is in.
    let (good_write, bad_write) = (
        step_write(&good, good.fence(), "fine", None),
        step_write(&bad, bad.fence(), "nul \u{0} inside", None),
    );
    // The test runtime has one thread: both stores queue before a writer runs, so they form one
    // group, whose statement fails.
    let (stored, failed) = tokio::join!(writer.store(good_write), writer.store(bad_write));
    assert!(stored.expect("the good step is stored"));
    assert!(failed.is_err(), "the bad step fails on its own");
    assert_eq!(
        db::comments::all(&pool, good.ticket.id).await.expect("comments").len(),
        2
    );
    assert_eq!(
        db::comments::all(&pool, bad.ticket.id).await.expect("comments").len(),
        1
    );
}
