//! `ticket.created` is built by the database, in the statement that inserts the ticket (a measured
//! hot path), from the field list kept next to the event's type. Here the SQL and the Rust side
//! must agree: the stored data deserialises into the typed event, and it is what the Rust side
//! builds from the ticket the insert returned.

use agentdesk::db;
use agentdesk::db::tickets::NewTicket;
use agentdesk::domain::{EventData, Ticket};
use serde_json::{json, Value};
use sqlx::PgPool;

async fn pool() -> PgPool {
    let url = testkit::testing::fresh_database().await.expect("a fresh test database");
    let pool = db::connect(&url, 2).await.expect("connect");
    db::migrate(&pool).await.expect("migrate");
    pool
}

fn new_ticket(task: Value, parent_id: Option<uuid::Uuid>, deadline_secs: Option<i32>) -> NewTicket {
    NewTicket {
        project: agentdesk::domain::ProjectId::DEFAULT,
        task,
        labels: vec!["x".into(), "ü-label".into()],
        priority: -3,
        schema: Some(json!({"type": "object", "properties": {"n": {"type": "number", "maximum": 1.5}}})),
        parent_id,
        metadata: json!({"nested": {"list": [true, false, null]}, "n": 0}),
        max_attempts: 9,
        reporter: "user".into(),
        idempotency: None,
        trace_context: None,
        deadline_secs,
    }
}

/// The stored `ticket.created` of `ticket`, as the typed event.
async fn stored_event(pool: &PgPool, ticket: &Ticket) -> EventData {
    let (kind, data): (String, String) =
        sqlx::query_as("SELECT kind, data::text FROM events WHERE ticket_id = $1 AND seq = 1")
            .bind(ticket.id)
            .fetch_one(pool)
            .await
            .expect("the ticket's first event");
    let data: Value = serde_json::from_str(&data).expect("the event's data is JSON");
    serde_json::from_value(json!({"kind": kind, "data": data})).expect("the data is a typed event's")
}

/// The stored event, deserialised and written again, equals the event the Rust side builds from
/// the inserted ticket.
fn assert_agree(stored: &EventData, ticket: &Ticket) {
    let built = EventData::TicketCreated { ticket: ticket.clone() };
    let as_value = |event: &EventData| serde_json::from_str::<Value>(&event.data_json()).unwrap();
    assert_eq!(stored.kind(), built.kind());
    assert_eq!(
        as_value(stored),
        as_value(&built),
        "the SQL and the typed event disagree"
    );
}

#[tokio::test]
async fn the_sql_built_ticket_created_is_the_typed_event() {
    let pool = pool().await;
    let mut conn = pool.acquire().await.unwrap();
    let parent = db::tickets::insert(&mut conn, new_ticket(json!("parent"), None, None))
        .await
        .expect("insert");
    let task = json!({"zeta": 1, "alpha": [1.0, 1e2, -0.5, "é ✓ \" \\ \u{1}"], "b": {"a": null}});
    let child = db::tickets::insert(&mut conn, new_ticket(task, Some(parent.id), Some(3600)))
        .await
        .expect("insert");
    let many = db::tickets::insert_many(
        &mut conn,
        &[
            new_ticket(json!("one"), None, None),
            new_ticket(json!(7), Some(child.id), Some(1)),
        ],
    )
    .await
    .expect("insert many");
    for ticket in [&parent, &child].into_iter().chain(&many) {
        let stored = stored_event(&pool, ticket).await;
        assert_agree(&stored, ticket);
    }
}
