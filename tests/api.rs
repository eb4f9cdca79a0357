//! The REST API against its contract: every endpoint's happy path, and bad input that is refused
//! with the right error and changes nothing.

mod support;

use std::collections::HashSet;

use reqwest::Method;
use serde_json::{json, Value};
use support::{assert_error, send, StatusCode, TestApp};

const GET: Method = Method::GET;
const POST: Method = Method::POST;
const PUT: Method = Method::PUT;
const PATCH: Method = Method::PATCH;
const DELETE: Method = Method::DELETE;

/// References that name no ticket, in every form a client might send.
const UNKNOWN_TICKETS: [&str; 4] = [
    "TICKET-999",
    "0193a0b2-0000-7000-8000-000000000000",
    "nonsense",
    "TICKET-x",
];

async fn event_kinds(app: &TestApp, ticket_id: &str) -> Vec<(i64, String, Value)> {
    sqlx::query_as::<_, (i64, String, Value)>(
        "SELECT seq, kind, data FROM events WHERE ticket_id = $1::uuid ORDER BY seq",
    )
    .bind(ticket_id)
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

async fn set_status(app: &TestApp, ticket_id: &str, status: &str) {
    sqlx::query("UPDATE tickets SET status = $2 WHERE id = $1::uuid")
        .bind(ticket_id)
        .bind(status)
        .execute(&app.pool)
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Creating tickets

#[tokio::test]
async fn creating_a_ticket_returns_201_with_every_contract_field_and_logs_ticket_created() {
    let app = TestApp::spawn().await;
    let t = app
        .create_ticket(json!({
            "task": "Summarise the report",
            "labels": ["researcher", "urgent", "researcher"],
            "priority": 5,
            "schema": {"type": "object", "required": ["summary"]},
            "metadata": {"source": "test"},
            "max_attempts": 7
        }))
        .await;
    assert!(uuid::Uuid::parse_str(t["id"].as_str().unwrap()).is_ok(), "{t}");
    assert!(t["key"].as_str().unwrap().starts_with("TICKET-"), "{t}");
    assert_eq!(t["task"], "Summarise the report");
    assert_eq!(
        t["labels"],
        json!(["researcher", "urgent"]),
        "duplicate labels are dropped"
    );
    assert_eq!(t["status"], "todo");
    assert_eq!(t["agent"], Value::Null);
    assert_eq!(t["reporter"], "user");
    assert_eq!(t["priority"], 5);
    assert_eq!(t["parent_id"], Value::Null);
    assert_eq!(t["parent_key"], Value::Null);
    assert_eq!(t["schema"], json!({"type": "object", "required": ["summary"]}));
    assert_eq!(t["result"], Value::Null);
    assert_eq!(t["error"], Value::Null);
    assert_eq!(t["attempts"], 0);
    assert_eq!(t["max_attempts"], 7);
    assert_eq!(t["metadata"], json!({"source": "test"}));
    for field in ["input_tokens", "output_tokens", "requests", "tool_calls"] {
        assert_eq!(t["usage"][field], 0, "usage.{field}");
    }
    for field in ["created_at", "updated_at"] {
        let at = t[field].as_str().unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{field} {at}");
    }
    assert_eq!(t["started_at"], Value::Null);
    assert_eq!(t["finished_at"], Value::Null);

    let events = event_kinds(&app, t["id"].as_str().unwrap()).await;
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].0, events[0].1.as_str()), (1, "ticket.created"));
    assert_eq!(events[0].2["ticket"]["id"], t["id"]);
    app.shutdown().await;
}

/// The statement that inserts a ticket writes its `ticket.created` too, the ticket as JSON built by
/// the database: it must be the ticket the API answered, field for field, on every path of a
/// create (alone, in a group, with a parent, with an idempotency key).
#[tokio::test]
async fn ticket_created_carries_the_ticket_exactly_as_the_create_answered_it() {
    let app = TestApp::spawn().await;
    let rich = json!({
        "task": {"zeta": 1, "alpha": [1.0, 1e2, -0.5, 12345678901234567890u64, "é ✓ \" \\ \u{1}"], "b": {"a": null}},
        "labels": ["x", "ü-label"],
        "priority": -3,
        "schema": {"type": "object", "properties": {"n": {"type": "number", "maximum": 1.5}}},
        "metadata": {"nested": {"list": [true, false, null]}, "n": 0},
        "max_attempts": 9,
        "deadline_secs": 3600
    });
    let parent = app.create_ticket(json!({"task": "parent"})).await;
    let mut bodies = vec![
        rich.clone(),
        json!({"task": "plain"}),
        json!({"task": 7, "deadline_secs": 1}),
    ];
    let mut with_parent = rich.clone();
    with_parent["parent"] = parent["key"].clone();
    bodies.push(with_parent);
    let mut created = vec![];
    for body in &bodies {
        created.push(app.create_ticket(body.clone()).await);
    }
    let (status, keyed) = send(
        app.request(Method::POST, "/v1/tickets")
            .header("idempotency-key", "created-event-check")
            .json(&rich),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{keyed}");
    created.push(keyed);
    // A burst: creates that arrive together share one statement.
    let burst = futures::future::join_all(
        (0..24).map(|i| app.create_ticket(json!({"task": format!("burst {i}"), "labels": ["b"]}))),
    );
    created.extend(burst.await);
    assert_eq!(created[3]["parent_key"], parent["key"]);
    for ticket in &created {
        let events = event_kinds(&app, ticket["id"].as_str().unwrap()).await;
        assert_eq!((events[0].0, events[0].1.as_str()), (1, "ticket.created"));
        assert_eq!(
            events[0].2,
            json!({"ticket": ticket}),
            "the event's ticket differs from the answer"
        );
    }
    app.shutdown().await;
}

/// `api_time` writes a time as the API does (`DateTime<Utc>` serialised), for each length of
/// fraction it can have.
#[tokio::test]
async fn the_database_writes_times_as_the_api_does() {
    let app = TestApp::spawn().await;
    for micros in [0, 120_000, 123_000, 123_400, 1, 999_999] {
        let at = chrono::DateTime::from_timestamp(1_795_000_000, micros * 1000).unwrap();
        let written: String = sqlx::query_scalar("SELECT api_time($1)::text")
            .bind(at)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        assert_eq!(written, serde_json::to_string(&at).unwrap(), "{micros} µs");
    }
    let null: Option<String> = sqlx::query_scalar("SELECT api_time(NULL)::text")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(null, None);
    app.shutdown().await;
}

#[tokio::test]
async fn a_ticket_gets_the_defaults_when_only_the_task_is_given_and_any_json_task_is_accepted() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    assert_eq!(t["labels"], json!([]));
    assert_eq!(t["priority"], 0);
    assert_eq!(t["max_attempts"], 3);
    assert_eq!(t["metadata"], json!({}));
    assert_eq!(t["schema"], Value::Null);
    for task in [
        json!({"steps": [1, 2]}),
        json!([1]),
        json!(42),
        json!(true),
        json!("ünïcødé ✓"),
    ] {
        let t = app.create_ticket(json!({ "task": task })).await;
        assert_eq!(t["task"], task);
    }
    let t = app
        .create_ticket(json!({"task": "x", "metadata": null, "schema": null}))
        .await;
    assert_eq!(t["metadata"], json!({}));
    assert_eq!(t["schema"], Value::Null);
    app.shutdown().await;
}

/// JSON (and the document's schemas) count `3.0` as an integer: it is taken as 3, while `3.5`
/// for an integer is still 422.
#[tokio::test]
async fn an_integer_written_with_a_zero_fraction_is_an_integer() {
    let app = TestApp::spawn().await;
    let t = app
        .create_ticket(json!({"task": "x", "priority": 3.0, "max_attempts": 2.0}))
        .await;
    assert_eq!(t["priority"], 3);
    assert_eq!(t["max_attempts"], 2);
    let answer = app.post("/v1/tickets", json!({"task": "x", "priority": 3.5})).await;
    assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    let answer = app.post("/v1/tickets", json!({"task": "x", "priority": 1e300})).await;
    assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    app.shutdown().await;
}

#[tokio::test]
async fn creating_a_ticket_from_malformed_json_is_400_and_creates_nothing() {
    let app = TestApp::spawn().await;
    let before = app.counts().await;
    for body in [
        "{",
        "{\"task\": \"x\",}",
        "not json",
        "",
        "   ",
        "{\"task\": \"x\"} trailing",
        "{'task': 'x'}",
    ] {
        let answer = app.post_raw("/v1/tickets", body.to_owned()).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    }
    assert_eq!(app.counts().await, before);
    app.shutdown().await;
}

#[tokio::test]
async fn creating_a_ticket_with_wrong_types_is_422_and_creates_nothing() {
    let app = TestApp::spawn().await;
    let before = app.counts().await;
    for body in [
        json!([1, 2]),
        json!("a string"),
        json!(42),
        json!({"task": "x", "labels": "researcher"}),
        json!({"task": "x", "labels": [1]}),
        json!({"task": "x", "priority": "high"}),
        json!({"task": "x", "priority": 1.5}),
        json!({"task": "x", "priority": 1e20}),
        json!({"task": "x", "max_attempts": "3"}),
        json!({"task": "x", "parent": 5}),
    ] {
        let answer = app.post("/v1/tickets", body.clone()).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_eq!(app.counts().await, before);
    app.shutdown().await;
}

#[tokio::test]
async fn creating_a_ticket_without_a_task_or_with_a_null_or_empty_task_is_422_and_creates_nothing() {
    let app = TestApp::spawn().await;
    let before = app.counts().await;
    for body in [
        json!({}),
        json!({"task": null}),
        json!({"task": ""}),
        json!({"task": "  \n "}),
        json!({"labels": ["a"]}),
    ] {
        let answer = app.post("/v1/tickets", body.clone()).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_eq!(app.counts().await, before);
    app.shutdown().await;
}

#[tokio::test]
async fn creating_a_ticket_with_bad_labels_is_422_and_creates_nothing() {
    let app = TestApp::spawn().await;
    let before = app.counts().await;
    let too_many: Vec<String> = (0..51).map(|i| format!("l{i}")).collect();
    for labels in [
        json!([""]),
        json!(["  "]),
        json!(["a\u{0}b"]),
        json!(["line\nbreak"]),
        json!(["x".repeat(101)]),
        json!(too_many),
        json!([null]),
    ] {
        let answer = app.post("/v1/tickets", json!({"task": "x", "labels": labels})).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_eq!(app.counts().await, before);
    app.shutdown().await;
}

#[tokio::test]
async fn creating_a_ticket_with_an_invalid_schema_is_422_and_creates_nothing() {
    let app = TestApp::spawn().await;
    let before = app.counts().await;
    for schema in [
        json!({"type": 12}),
        json!({"type": "strng"}),
        json!({"minLength": -1}),
        json!({"properties": 5}),
        json!({"required": "name"}),
        json!("a string"),
        json!(5),
        json!([{"type": "string"}]),
    ] {
        let answer = app.post("/v1/tickets", json!({"task": "x", "schema": schema})).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_eq!(app.counts().await, before);
    // Boolean schemas are valid JSON Schemas.
    let t = app.create_ticket(json!({"task": "x", "schema": true})).await;
    assert_eq!(t["schema"], true);
    app.shutdown().await;
}

#[tokio::test]
async fn creating_a_ticket_with_metadata_that_is_not_an_object_is_422_and_creates_nothing() {
    let app = TestApp::spawn().await;
    let before = app.counts().await;
    for metadata in [json!([1]), json!("x"), json!(5), json!(true)] {
        let answer = app
            .post("/v1/tickets", json!({"task": "x", "metadata": metadata}))
            .await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_eq!(app.counts().await, before);
    app.shutdown().await;
}

#[tokio::test]
async fn creating_a_ticket_with_max_attempts_outside_1_to_100_is_422_and_creates_nothing() {
    let app = TestApp::spawn().await;
    let before = app.counts().await;
    for max_attempts in [json!(0), json!(101), json!(-1), json!(1.5), json!(i64::MAX)] {
        let answer = app
            .post("/v1/tickets", json!({"task": "x", "max_attempts": max_attempts}))
            .await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_eq!(app.counts().await, before);
    for ok in [1, 100] {
        assert_eq!(
            app.create_ticket(json!({"task": "x", "max_attempts": ok})).await["max_attempts"],
            ok
        );
    }
    app.shutdown().await;
}

#[tokio::test]
async fn creating_a_ticket_with_an_unknown_parent_is_422_and_a_known_parent_by_id_or_key_links_it() {
    let app = TestApp::spawn().await;
    let before = app.counts().await;
    for parent in UNKNOWN_TICKETS.iter().chain(&["", "TICKET-99999999999999999999999"]) {
        let answer = app.post("/v1/tickets", json!({"task": "x", "parent": parent})).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_eq!(app.counts().await, before);

    let parent = app.create_ticket(json!({"task": "parent"})).await;
    for reference in [&parent["id"], &parent["key"]] {
        let child = app.create_ticket(json!({"task": "child", "parent": reference})).await;
        assert_eq!(child["parent_id"], parent["id"]);
        assert_eq!(child["parent_key"], parent["key"]);
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_body_over_1_mib_is_413_payload_too_large_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let key = t["key"].as_str().unwrap();
    let before = app.counts().await;
    let huge =
        serde_json::to_vec(&json!({"task": "a".repeat(1024 * 1024 + 10), "text": "b".repeat(1024 * 1024)})).unwrap();
    for (method, path) in [
        (reqwest::Method::POST, "/v1/tickets".to_owned()),
        (reqwest::Method::PATCH, format!("/v1/tickets/{key}")),
        (reqwest::Method::POST, format!("/v1/tickets/{key}/comments")),
        (reqwest::Method::PUT, "/v1/agents/big".to_owned()),
    ] {
        let answer = send(app.request(method.clone(), &path).body(huge.clone())).await;
        assert_error(&answer, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
        // Without a Content-Length the limit holds as well.
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = huge.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
        let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
        let answer = send(app.request(method, &path).body(body)).await;
        assert_error(&answer, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    }
    assert_eq!(app.counts().await, before);
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Idempotency

#[tokio::test]
async fn repeating_a_create_with_the_same_idempotency_key_and_body_returns_the_first_ticket_with_200() {
    let app = TestApp::spawn().await;
    let create = |body: Value, key: &str| {
        send(
            app.request(reqwest::Method::POST, "/v1/tickets")
                .header("idempotency-key", key)
                .json(&body),
        )
    };
    let (status, first) = create(json!({"task": "once", "labels": ["a"], "priority": 1}), "key-1").await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, again) = create(json!({"task": "once", "labels": ["a"], "priority": 1}), "key-1").await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["id"], first["id"]);
    // Key order does not make another body.
    let (status, reordered) = create(json!({"priority": 1, "labels": ["a"], "task": "once"}), "key-1").await;
    assert_eq!(status, StatusCode::OK, "{reordered}");
    assert_eq!(reordered["id"], first["id"]);
    let before = app.counts().await;
    assert_eq!(before.tickets, 1);

    let answer = create(json!({"task": "other"}), "key-1").await;
    assert_error(&answer, StatusCode::CONFLICT, "conflict");
    let answer = create(json!({"task": "x"}), &"k".repeat(256)).await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    assert_eq!(app.counts().await, before);

    // Another key is another ticket.
    let (status, other) = create(json!({"task": "once", "labels": ["a"], "priority": 1}), "key-2").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(other["id"], first["id"]);
    app.shutdown().await;
}

#[tokio::test]
async fn ten_concurrent_identical_idempotent_creates_make_exactly_one_ticket() {
    let app = TestApp::spawn().await;
    let requests = (0..10).map(|_| {
        send(
            app.request(reqwest::Method::POST, "/v1/tickets")
                .header("idempotency-key", "concurrent")
                .json(&json!({"task": "only once"})),
        )
    });
    let answers = futures::future::join_all(requests).await;
    let created = answers.iter().filter(|(s, _)| *s == StatusCode::CREATED).count();
    let repeated = answers.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    assert_eq!((created, repeated), (1, 9), "{answers:?}");
    let ids: HashSet<&Value> = answers.iter().map(|(_, t)| &t["id"]).collect();
    assert_eq!(ids.len(), 1, "{answers:?}");
    assert_eq!(app.counts().await.tickets, 1);
    assert_eq!(app.counts().await.events, 1);
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Reading and listing tickets

#[tokio::test]
async fn a_ticket_is_found_by_id_and_by_key_and_unknown_references_are_404_everywhere() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "find me"})).await;
    let key = t["key"].as_str().unwrap();
    for reference in [t["id"].as_str().unwrap().to_owned(), key.to_owned(), key.to_lowercase()] {
        let (status, found) = app.get(&format!("/v1/tickets/{reference}")).await;
        assert_eq!(status, StatusCode::OK, "{reference}");
        assert_eq!(found, t, "{reference}");
    }

    let before = app.counts().await;
    for reference in UNKNOWN_TICKETS
        .iter()
        .chain(&["TICKET-0", "TICKET--1", "%20", "TICKET-99999999999999999999999"])
    {
        let base = format!("/v1/tickets/{reference}");
        for answer in [
            app.get(&base).await,
            app.patch(&base, json!({"priority": 1})).await,
            app.post(&format!("{base}/cancel"), json!({})).await,
            app.post(&format!("{base}/retry"), json!({})).await,
            app.get(&format!("{base}/comments")).await,
            app.post(&format!("{base}/comments"), json!({"text": "hi"})).await,
            app.get(&format!("{base}/events")).await,
        ] {
            assert_error(&answer, StatusCode::NOT_FOUND, "not_found");
        }
    }
    assert_eq!(app.counts().await, before);
    app.shutdown().await;
}

#[tokio::test]
async fn listing_tickets_filters_by_status_label_parent_and_case_insensitive_query_and_orders_desc() {
    let app = TestApp::spawn().await;
    let a = app
        .create_ticket(json!({"task": "Write the Quarterly report", "labels": ["writer"]}))
        .await;
    let b = app
        .create_ticket(json!({"task": "review code", "labels": ["reviewer", "writer"]}))
        .await;
    let c = app
        .create_ticket(json!({"task": {"note": "QUARTERLY numbers"}, "parent": a["key"]}))
        .await;
    let d = app
        .create_ticket(json!({"task": "100% done_ish", "parent": a["id"]}))
        .await;
    let (status, _) = app
        .post(&format!("/v1/tickets/{}/cancel", b["key"].as_str().unwrap()), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);

    let keys = |items: &[Value]| {
        items
            .iter()
            .map(|t| t["key"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let k = |t: &Value| t["key"].as_str().unwrap().to_owned();

    assert_eq!(keys(&app.list_all("/v1/tickets").await), [k(&a), k(&b), k(&c), k(&d)]);
    assert_eq!(
        keys(&app.list_all("/v1/tickets?order=asc").await),
        [k(&a), k(&b), k(&c), k(&d)]
    );
    assert_eq!(
        keys(&app.list_all("/v1/tickets?order=desc").await),
        [k(&d), k(&c), k(&b), k(&a)]
    );
    assert_eq!(keys(&app.list_all("/v1/tickets?status=cancelled").await), [k(&b)]);
    assert_eq!(
        keys(&app.list_all("/v1/tickets?status=todo").await),
        [k(&a), k(&c), k(&d)]
    );
    assert_eq!(
        keys(&app.list_all("/v1/tickets?status=todo,cancelled").await),
        [k(&a), k(&b), k(&c), k(&d)]
    );
    assert_eq!(
        keys(&app.list_all("/v1/tickets?status=done,failed").await),
        Vec::<String>::new()
    );
    assert_eq!(keys(&app.list_all("/v1/tickets?label=writer").await), [k(&a), k(&b)]);
    assert_eq!(keys(&app.list_all("/v1/tickets?label=reviewer").await), [k(&b)]);
    assert_eq!(
        keys(&app.list_all("/v1/tickets?label=nobody").await),
        Vec::<String>::new()
    );
    assert_eq!(
        keys(&app.list_all(&format!("/v1/tickets?parent={}", k(&a))).await),
        [k(&c), k(&d)]
    );
    assert_eq!(
        keys(
            &app.list_all(&format!("/v1/tickets?parent={}", a["id"].as_str().unwrap()))
                .await
        ),
        [k(&c), k(&d)]
    );
    assert_eq!(
        keys(&app.list_all("/v1/tickets?parent=TICKET-999").await),
        Vec::<String>::new()
    );
    assert_eq!(keys(&app.list_all("/v1/tickets?q=quarterly").await), [k(&a), k(&c)]);
    assert_eq!(
        keys(&app.list_all("/v1/tickets?q=QUARTERLY&order=desc").await),
        [k(&c), k(&a)]
    );
    // `%` and `_` are matched literally, not as wildcards.
    assert_eq!(keys(&app.list_all("/v1/tickets?q=100%25").await), [k(&d)]);
    assert_eq!(keys(&app.list_all("/v1/tickets?q=e_i").await), [k(&d)]);
    assert_eq!(keys(&app.list_all("/v1/tickets?q=%25").await), [k(&d)]);
    assert_eq!(
        keys(&app.list_all("/v1/tickets?agent=researcher").await),
        Vec::<String>::new()
    );
    assert_eq!(
        keys(
            &app.list_all(&format!("/v1/tickets?status=todo&label=writer&parent={}", k(&a)))
                .await
        ),
        Vec::<String>::new()
    );
    app.shutdown().await;
}

#[tokio::test]
async fn walking_the_ticket_list_by_cursor_visits_every_ticket_once_in_order() {
    let app = TestApp::spawn().await;
    let mut created = vec![];
    for i in 0..23 {
        let labels = if i % 2 == 0 { json!(["even"]) } else { json!([]) };
        created.push(
            app.create_ticket(json!({"task": format!("ticket {i}"), "labels": labels}))
                .await["id"]
                .clone(),
        );
    }
    let ids = |items: Vec<Value>| items.into_iter().map(|t| t["id"].clone()).collect::<Vec<_>>();

    let (status, first) = app.get("/v1/tickets?limit=5").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["items"].as_array().unwrap().len(), 5);
    assert!(first["next_cursor"].is_string());

    for limit in [1, 5, 7, 22, 23, 200] {
        assert_eq!(
            ids(app.list_all(&format!("/v1/tickets?limit={limit}")).await),
            created,
            "limit {limit}"
        );
        let mut reversed = created.clone();
        reversed.reverse();
        assert_eq!(
            ids(app.list_all(&format!("/v1/tickets?limit={limit}&order=desc")).await),
            reversed,
            "limit {limit}"
        );
    }
    let even: Vec<Value> = created.iter().step_by(2).cloned().collect();
    assert_eq!(ids(app.list_all("/v1/tickets?limit=4&label=even").await), even);

    // The last page says there is no next one.
    let (_, last) = app.get("/v1/tickets?limit=23").await;
    assert_eq!(last["next_cursor"], Value::Null);
    app.shutdown().await;
}

#[tokio::test]
async fn bad_cursors_and_limits_are_400_on_every_list() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let key = t["key"].as_str().unwrap();
    let name_cursor = hex::encode("sdefault");
    let number_cursor = hex::encode("n1");
    let lists = [
        ("/v1/tickets".to_owned(), name_cursor.clone()),
        (format!("/v1/tickets/{key}/comments"), name_cursor),
        ("/v1/agents".to_owned(), number_cursor),
    ];
    for (list, wrong_kind_of_cursor) in &lists {
        for query in [
            "limit=0".to_owned(),
            "limit=201".to_owned(),
            "limit=-1".to_owned(),
            "limit=abc".to_owned(),
            "limit=1.5".to_owned(),
            "limit=99999999999999999999999".to_owned(),
            "cursor=zz".to_owned(),
            "cursor=garbage".to_owned(),
            "cursor=6e2d31".to_owned(),
            format!("cursor={}", hex::encode("x1")),
            format!("cursor={wrong_kind_of_cursor}"),
            "cursor=%00".to_owned(),
        ] {
            let answer = app.get(&format!("{list}?{query}")).await;
            assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
        }
        let (status, page) = app.get(&format!("{list}?limit=200")).await;
        assert_eq!(status, StatusCode::OK, "{list}: {page}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn an_unknown_status_order_or_malformed_parent_filter_is_400() {
    let app = TestApp::spawn().await;
    for query in [
        "status=doing",
        "status=todo,doing",
        "status=TODO",
        "status=todo,,",
        "order=sideways",
        "parent=nonsense",
    ] {
        let answer = app.get(&format!("/v1/tickets?{query}")).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    }
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Editing, cancelling, retrying

#[tokio::test]
async fn patching_a_todo_ticket_changes_the_given_fields_and_schema_null_removes_the_schema() {
    let app = TestApp::spawn().await;
    let t = app
        .create_ticket(json!({"task": "old", "labels": ["a"], "schema": {"type": "string"}}))
        .await;
    let path = format!("/v1/tickets/{}", t["key"].as_str().unwrap());

    let (status, p) = app
        .patch(
            &path,
            json!({"task": {"new": true}, "labels": ["b", "c"], "priority": 9, "metadata": {"m": 1}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{p}");
    assert_eq!(p["task"], json!({"new": true}));
    assert_eq!(p["labels"], json!(["b", "c"]));
    assert_eq!(p["priority"], 9);
    assert_eq!(p["metadata"], json!({"m": 1}));
    assert_eq!(p["schema"], json!({"type": "string"}), "a field not given is kept");
    assert_eq!(p["status"], "todo");

    let (status, p) = app.patch(&path, json!({"schema": {"type": "integer"}})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(p["schema"], json!({"type": "integer"}));
    let (status, p) = app.patch(&path, json!({"schema": null})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(p["schema"], Value::Null);
    assert_eq!(p["task"], json!({"new": true}));
    assert_eq!(app.get(&path).await.1, p);

    let kinds: Vec<String> = event_kinds(&app, t["id"].as_str().unwrap())
        .await
        .into_iter()
        .map(|e| e.1)
        .collect();
    assert_eq!(
        kinds,
        ["ticket.created", "ticket.updated", "ticket.updated", "ticket.updated"]
    );

    // A waiting ticket may be edited as well.
    set_status(&app, t["id"].as_str().unwrap(), "waiting").await;
    let (status, p) = app.patch(&path, json!({"priority": 1})).await;
    assert_eq!(status, StatusCode::OK, "{p}");
    assert_eq!(p["status"], "waiting");
    app.shutdown().await;
}

#[tokio::test]
async fn patching_with_invalid_fields_is_rejected_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "keep"})).await;
    let path = format!("/v1/tickets/{}", t["key"].as_str().unwrap());
    let before = app.counts().await;
    for body in [
        json!({"task": ""}),
        json!({"labels": [""]}),
        json!({"labels": "a"}),
        json!({"priority": "high"}),
        json!({"schema": {"type": 12}}),
        json!({"schema": 5}),
        json!({"metadata": []}),
        json!({"metadata": 1}),
        json!([1]),
        // Fields PATCH does not change are refused, not ignored.
        json!({"status": "done"}),
        json!({"max_attempts": 5}),
    ] {
        let answer = app.patch(&path, body.clone()).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    for raw in ["{", "nope", ""] {
        let answer = send(app.request(reqwest::Method::PATCH, &path).body(raw)).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    }
    assert_eq!(app.counts().await, before);
    assert_eq!(app.get(&path).await.1, t);
    app.shutdown().await;
}

#[tokio::test]
async fn patching_a_cancelled_or_running_or_finished_ticket_is_409_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let id = t["id"].as_str().unwrap();
    let path = format!("/v1/tickets/{id}");
    assert_eq!(app.post(&format!("{path}/cancel"), json!({})).await.0, StatusCode::OK);
    for status in ["cancelled", "in_progress", "done", "failed"] {
        set_status(&app, id, status).await;
        let before = app.counts().await;
        let answer = app.patch(&path, json!({"task": "changed"})).await;
        assert_error(&answer, StatusCode::CONFLICT, "conflict");
        assert_eq!(app.counts().await, before);
        assert_eq!(app.get(&path).await.1["task"], "x");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn cancelling_a_todo_ticket_cancels_it_once_and_retry_requeues_it() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let id = t["id"].as_str().unwrap();
    let path = format!("/v1/tickets/{}", t["key"].as_str().unwrap());

    let (status, cancelled) = app.post(&format!("{path}/cancel"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(app.get(&path).await.1, cancelled);

    // Cancelling again returns it unchanged, with no new event.
    let before = app.counts().await;
    let (status, again) = app.post(&format!("{path}/cancel"), Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again, cancelled);
    assert_eq!(app.counts().await, before);

    let (status, retried) = app.post(&format!("{path}/retry"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["status"], "todo");

    let before = app.counts().await;
    let answer = app.post(&format!("{path}/retry"), json!({})).await;
    assert_error(&answer, StatusCode::CONFLICT, "conflict");
    assert_eq!(app.counts().await, before);

    let events = event_kinds(&app, id).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(kinds, ["ticket.created", "ticket.cancelled", "ticket.requeued"]);
    assert_eq!(events.iter().map(|e| e.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(events[2].2, json!({"reason": "retry"}));
    app.shutdown().await;
}

#[tokio::test]
async fn cancelling_a_done_or_failed_ticket_is_409_and_retry_only_takes_failed_or_cancelled_ones() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let id = t["id"].as_str().unwrap();
    let path = format!("/v1/tickets/{id}");
    for status in ["done", "failed"] {
        set_status(&app, id, status).await;
        let before = app.counts().await;
        assert_error(
            &app.post(&format!("{path}/cancel"), json!({})).await,
            StatusCode::CONFLICT,
            "conflict",
        );
        assert_eq!(app.counts().await, before);
        assert_eq!(app.get(&path).await.1["status"], status);
    }
    for status in ["done", "waiting", "in_progress", "todo"] {
        set_status(&app, id, status).await;
        let before = app.counts().await;
        assert_error(
            &app.post(&format!("{path}/retry"), json!({})).await,
            StatusCode::CONFLICT,
            "conflict",
        );
        assert_eq!(app.counts().await, before);
    }
    set_status(&app, id, "failed").await;
    let (status, retried) = app.post(&format!("{path}/retry"), json!({})).await;
    assert_eq!((status, retried["status"].as_str()), (StatusCode::OK, Some("todo")));
    // A waiting ticket is cancelled at once.
    set_status(&app, id, "waiting").await;
    let (status, cancelled) = app.post(&format!("{path}/cancel"), json!({})).await;
    assert_eq!(
        (status, cancelled["status"].as_str()),
        (StatusCode::OK, Some("cancelled"))
    );
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Comments

#[tokio::test]
async fn comments_are_created_listed_in_order_and_paginated() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let path = format!("/v1/tickets/{}/comments", t["key"].as_str().unwrap());

    let (status, c) = app.post(&path, json!({"text": "first"})).await;
    assert_eq!(status, StatusCode::CREATED, "{c}");
    assert_eq!(c["ticket_id"], t["id"]);
    assert_eq!(c["seq"], 1);
    assert_eq!(c["author"], "user");
    assert_eq!(c["agent"], Value::Null);
    assert_eq!(c["content"], json!([{"type": "text", "text": "first"}]));
    assert!(c["id"].is_string() && c["created_at"].is_string(), "{c}");
    let (status, s) = app.post(&path, json!({"text": "a note", "author": "system"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!((s["seq"].as_i64(), s["author"].as_str()), (Some(2), Some("system")));
    for i in 3..=7 {
        app.comment(t["id"].as_str().unwrap(), &format!("comment {i}")).await;
    }

    let (status, page) = app.get(&path).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["items"].as_array().unwrap().len(), 7);
    assert_eq!(page["next_cursor"], Value::Null);
    assert_eq!(page["items"][0], c);
    for limit in [1, 2, 3, 7] {
        let seqs: Vec<i64> = app
            .list_all(&format!("{path}?limit={limit}"))
            .await
            .iter()
            .map(|c| c["seq"].as_i64().unwrap())
            .collect();
        assert_eq!(seqs, (1..=7).collect::<Vec<_>>(), "limit {limit}");
    }
    // A todo ticket stays todo and gets no requeue.
    let kinds: Vec<String> = event_kinds(&app, t["id"].as_str().unwrap())
        .await
        .into_iter()
        .map(|e| e.1)
        .collect();
    assert_eq!(kinds.iter().filter(|k| *k == "comment.created").count(), 7);
    assert!(!kinds.contains(&"ticket.requeued".to_owned()));
    app.shutdown().await;
}

#[tokio::test]
async fn an_empty_or_malformed_comment_is_rejected_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let path = format!("/v1/tickets/{}/comments", t["key"].as_str().unwrap());
    let before = app.counts().await;
    for body in [
        json!({"text": ""}),
        json!({"text": "  \n\t"}),
        json!({}),
        json!({"text": null}),
        json!({"text": 5}),
        json!({"text": ["a"]}),
        json!({"text": "hi", "author": "assistant"}),
        json!({"text": "hi", "author": "robot"}),
    ] {
        let answer = app.post(&path, body.clone()).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_error(
        &app.post_raw(&path, "{\"text\": ").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    assert_eq!(app.counts().await, before);
    app.shutdown().await;
}

#[tokio::test]
async fn a_comment_on_a_cancelled_ticket_reopens_it_to_todo_with_a_requeued_event_for_the_comment() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let id = t["id"].as_str().unwrap();
    app.post(&format!("/v1/tickets/{id}/cancel"), json!({})).await;
    app.comment(id, "please continue").await;
    assert_eq!(app.get(&format!("/v1/tickets/{id}")).await.1["status"], "todo");
    let events = event_kinds(&app, id).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ticket.created",
            "ticket.cancelled",
            "comment.created",
            "ticket.requeued"
        ]
    );
    assert_eq!(events[3].2, json!({"reason": "comment"}));

    for status in ["waiting", "done", "failed"] {
        set_status(&app, id, status).await;
        app.comment(id, "and again").await;
        assert_eq!(
            app.get(&format!("/v1/tickets/{id}")).await.1["status"],
            "todo",
            "after {status}"
        );
        let last = event_kinds(&app, id).await.pop().unwrap();
        assert_eq!(
            (last.1.as_str(), &last.2),
            ("ticket.requeued", &json!({"reason": "comment"}))
        );
    }
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Agents

#[tokio::test]
async fn an_agent_is_created_with_defaults_replaced_read_listed_and_deleted() {
    let app = TestApp::spawn().await;
    let (status, a) = app.put("/v1/agents/researcher", json!({"role": "You research."})).await;
    assert_eq!(status, StatusCode::CREATED, "{a}");
    assert_eq!(a["name"], "researcher");
    assert_eq!(a["role"], "You research.");
    assert_eq!(
        a["tools"],
        json!(["close_ticket", "handover_ticket", "read_tickets", "manage_tickets"])
    );
    assert_eq!(a["labels"], json!([]));
    assert!(a["model"].as_str().is_some_and(|m| !m.is_empty()), "{a}");
    assert_eq!(a["max_schema_retries"], 10);
    assert_eq!(a["max_request_retries"], 10);
    assert_eq!(a["request_retry_delay_ms"], 500);
    for field in [
        "context_window",
        "max_turns",
        "max_input_tokens",
        "max_output_tokens",
        "temperature",
        "max_tokens",
    ] {
        assert_eq!(a[field], Value::Null, "{field}");
    }

    let (status, replaced) = app
        .put(
            "/v1/agents/researcher",
            json!({"role": "New role", "provider": "anthropic", "model": "claude-x", "labels": ["research"],
                   "tools": ["close_ticket", "close_ticket"], "context_window": 100000, "max_turns": 5,
                   "temperature": 0.5, "max_tokens": 1000, "max_schema_retries": 0}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    assert_eq!(replaced["role"], "New role");
    assert_eq!(replaced["provider"], "anthropic");
    assert_eq!(replaced["model"], "claude-x");
    assert_eq!(replaced["labels"], json!(["research"]));
    assert_eq!(replaced["tools"], json!(["close_ticket"]));
    assert_eq!(replaced["context_window"], 100000);
    assert_eq!(replaced["max_schema_retries"], 0);
    assert_eq!(
        replaced["created_at"], a["created_at"],
        "replacing keeps the creation time"
    );

    let (status, got) = app.get("/v1/agents/researcher").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got, replaced);

    // The service creates `default` at start; the list is ordered by name.
    app.put("/v1/agents/alpha", json!({})).await;
    let names: Vec<String> = app
        .list_all("/v1/agents")
        .await
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["alpha", "default", "researcher"]);
    let paged: Vec<String> = app
        .list_all("/v1/agents?limit=1")
        .await
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paged, names);

    let (status, body) = app.delete("/v1/agents/researcher").await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    assert_error(
        &app.get("/v1/agents/researcher").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &app.delete("/v1/agents/researcher").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(&app.get("/v1/agents/nobody").await, StatusCode::NOT_FOUND, "not_found");
    app.shutdown().await;
}

#[tokio::test]
async fn an_invalid_agent_is_422_and_creates_nothing() {
    let app = TestApp::spawn().await;
    let before = app.counts().await;
    let long_name = "n".repeat(65);
    let cases = [
        ("bad%20name", json!({})),
        ("bad!name", json!({})),
        (long_name.as_str(), json!({})),
        ("%C3%A9t%C3%A9", json!({})),
        ("ok", json!({"tools": ["close_ticket", "rm_rf"]})),
        ("ok", json!({"tools": "close_ticket"})),
        ("ok", json!({"provider": "openia"})),
        ("ok", json!({"provider": ""})),
        ("ok", json!({"model": " "})),
        ("ok", json!({"labels": [""]})),
        ("ok", json!({"temperature": 3.0})),
        ("ok", json!({"temperature": -0.1})),
        ("ok", json!({"max_turns": 0})),
        ("ok", json!({"context_window": -5})),
        ("ok", json!({"max_schema_retries": -1})),
        ("ok", json!({"max_tokens": "many"})),
        ("ok", json!({"role": 5})),
        ("ok", json!([])),
    ];
    for (name, body) in cases {
        let answer = app.put(&format!("/v1/agents/{name}"), body.clone()).await;
        assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_error(
        &app.post_raw("/v1/agents/ok", "{").await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
    let answer = send(app.request(reqwest::Method::PUT, "/v1/agents/ok").body("{")).await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    assert_eq!(app.counts().await, before);
    assert_error(&app.get("/v1/agents/ok").await, StatusCode::NOT_FOUND, "not_found");
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Stats, health, documents, routing

#[tokio::test]
async fn stats_count_tickets_by_status_and_by_label() {
    let app = TestApp::spawn().await;
    let (status, empty) = app.get("/v1/stats").await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    for s in ["todo", "in_progress", "waiting", "done", "failed", "cancelled"] {
        assert_eq!(empty["by_status"][s], 0, "{s}");
    }
    for field in [
        "requests",
        "tool_calls",
        "input_tokens",
        "output_tokens",
        "success_rate",
        "avg_ticket_ms",
        "avg_work_ms",
    ] {
        assert!(empty[field].is_number(), "{field}: {empty}");
    }
    assert!(
        empty["by_label"].is_object() && empty["by_agent"].is_object(),
        "{empty}"
    );

    app.create_ticket(json!({"task": "a", "labels": ["x"]})).await;
    app.create_ticket(json!({"task": "b", "labels": ["x", "y"]})).await;
    let c = app.create_ticket(json!({"task": "c"})).await;
    app.post(&format!("/v1/tickets/{}/cancel", c["id"].as_str().unwrap()), json!({}))
        .await;

    let (_, stats) = app.get("/v1/stats").await;
    assert_eq!(stats["by_status"]["todo"], 2, "{stats}");
    assert_eq!(stats["by_status"]["cancelled"], 1);
    assert_eq!(stats["by_status"]["done"], 0);
    assert_eq!(stats["by_label"]["x"]["by_status"]["todo"], 2, "{stats}");
    assert_eq!(stats["by_label"]["y"]["by_status"]["todo"], 1);
    assert_eq!(stats["requests"], 0);
    app.shutdown().await;
}

#[tokio::test]
async fn health_readiness_openapi_and_docs_answer() {
    let app = TestApp::spawn().await;
    assert_eq!(app.get("/healthz").await, (StatusCode::OK, json!({"status": "ok"})));
    assert_eq!(app.get("/readyz").await, (StatusCode::OK, json!({"status": "ready"})));

    let response = app.client.get(app.endpoint("/openapi.json")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let doc: Value = response.json().await.expect("the OpenAPI document is JSON");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for path in [
        "/v1/tickets",
        "/v1/tickets/{ticket}",
        "/v1/events",
        "/v1/agents/{name}",
        "/v1/stats",
    ] {
        assert!(doc["paths"][path].is_object(), "{path}");
    }

    let response = app.client.get(app.endpoint("/docs")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html = response.text().await.unwrap();
    assert!(html.to_lowercase().contains("<html"), "{html}");
    app.shutdown().await;
}

#[tokio::test]
async fn an_unknown_route_is_a_json_404_and_a_wrong_method_a_json_405() {
    let app = TestApp::spawn().await;
    for path in ["/nope", "/v1/nope", "/v1/tickets/TICKET-1/nope", "/v2/tickets", "/v1"] {
        assert_error(&app.get(path).await, StatusCode::NOT_FOUND, "not_found");
    }
    assert_error(
        &app.delete("/v1/tickets").await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Authentication

#[tokio::test]
async fn with_api_tokens_set_v1_needs_a_right_bearer_token_while_health_and_docs_stay_open() {
    let app = TestApp::spawn_with(|c| c.api_tokens = vec!["secret-one".into(), "secret-two".into()]).await;
    let unauthenticated = reqwest::Client::new();
    let before = app.counts().await;
    let attempts = [
        None,
        Some("Bearer wrong"),
        Some("Bearer "),
        Some("Basic c2VjcmV0LW9uZQ=="),
        Some("secret-one"),
        Some("Bearer secret-one-and-more"),
    ];
    for auth in attempts {
        for (method, path) in [
            (reqwest::Method::GET, "/v1/tickets"),
            (reqwest::Method::POST, "/v1/tickets"),
            (reqwest::Method::GET, "/v1/tickets/TICKET-1"),
            (reqwest::Method::GET, "/v1/agents"),
            (reqwest::Method::PUT, "/v1/agents/x"),
            (reqwest::Method::GET, "/v1/stats"),
            (reqwest::Method::GET, "/v1/events"),
            (reqwest::Method::GET, "/v1/tickets/TICKET-1/events"),
        ] {
            let mut request = unauthenticated
                .request(method.clone(), app.endpoint(path))
                .json(&json!({"task": "x"}));
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            let response = request.send().await.unwrap();
            assert_eq!(
                response.status(),
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {auth:?}"
            );
            assert_eq!(response.headers()["www-authenticate"], "Bearer");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], "unauthorized");
        }
    }
    assert_eq!(app.counts().await, before);

    for path in ["/healthz", "/readyz", "/openapi.json", "/docs"] {
        let status = unauthenticated.get(app.endpoint(path)).send().await.unwrap().status();
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    for token in ["secret-one", "secret-two"] {
        let (status, t) = send(
            unauthenticated
                .post(app.endpoint("/v1/tickets"))
                .bearer_auth(token)
                .json(&json!({"task": "x"})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{t}");
        let (status, _) = send(unauthenticated.get(app.endpoint("/v1/tickets")).bearer_auth(token)).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(app.counts().await.tickets, 2);
    app.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Robustness

/// The status alone: the body is not read, since an odd path may well open an endless event stream.
async fn status(request: reqwest::RequestBuilder) -> StatusCode {
    request.send().await.expect("send the request").status()
}

async fn raw_status(app: &TestApp, path: &str, body: impl Into<reqwest::Body>) -> StatusCode {
    status(
        app.request(POST, path)
            .header("content-type", "application/json")
            .body(body),
    )
    .await
}

#[tokio::test]
async fn odd_inputs_never_produce_a_server_error() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let key = t["key"].as_str().unwrap().to_owned();

    let mut deep = json!("bottom");
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let too_deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
    let odd_values = [
        json!(1e308),
        json!(-1e308),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(0.000000001),
        deep.clone(),
        json!("\u{0}"),
        json!("nul \u{0} inside"),
        json!({"\u{0}": "key with NUL"}),
        json!("😀 ünïcødé \u{202e} rtl \u{feff}"),
        json!("\u{fffd}\u{10ffff}"),
        json!("x".repeat(100_000)),
        json!({}),
        json!([]),
    ];
    let mut answers: Vec<(String, StatusCode)> = vec![];
    let mut check = |what: String, status: StatusCode| answers.push((what, status));

    for value in &odd_values {
        let short = value.to_string().chars().take(60).collect::<String>();
        for body in [
            json!({"task": value}),
            json!({"task": "x", "labels": [value]}),
            json!({"task": "x", "priority": value}),
            json!({"task": "x", "schema": value}),
            json!({"task": "x", "schema": {"type": "object", "properties": {"a": value}}}),
            json!({"task": "x", "metadata": {"k": value}}),
            json!({"task": "x", "metadata": value}),
            json!({"task": "x", "parent": value}),
            json!({"task": "x", "max_attempts": value}),
        ] {
            check(
                format!("POST /v1/tickets {short}"),
                status(app.request(POST, "/v1/tickets").json(&body)).await,
            );
        }
        for body in [
            json!({"task": value}),
            json!({"labels": [value]}),
            json!({"metadata": value}),
            json!({"schema": value}),
        ] {
            check(
                format!("PATCH {short}"),
                status(app.request(PATCH, &format!("/v1/tickets/{key}")).json(&body)).await,
            );
        }
        check(
            format!("comment {short}"),
            status(
                app.request(POST, &format!("/v1/tickets/{key}/comments"))
                    .json(&json!({"text": value})),
            )
            .await,
        );
        for body in [
            json!({"role": value}),
            json!({"model": value}),
            json!({"labels": [value]}),
            json!({"temperature": value}),
            json!({"context_window": value}),
            json!({"max_input_tokens": value}),
            json!({"tools": [value]}),
        ] {
            check(
                format!("PUT agent {short}"),
                status(app.request(PUT, "/v1/agents/odd").json(&body)).await,
            );
        }
    }
    check(
        "deep JSON".into(),
        raw_status(&app, "/v1/tickets", too_deep.clone()).await,
    );
    check(
        "deep JSON comment".into(),
        raw_status(&app, &format!("/v1/tickets/{key}/comments"), too_deep).await,
    );
    check(
        "invalid UTF-8".into(),
        raw_status(&app, "/v1/tickets", vec![b'{', b'"', 0xff, 0xfe, b'"', b'}']).await,
    );
    check(
        "invalid UTF-8 task".into(),
        raw_status(&app, "/v1/tickets", b"{\"task\": \"\xc3\x28\"}".to_vec()).await,
    );
    check(
        "lone surrogate".into(),
        raw_status(&app, "/v1/tickets", r#"{"task": "\ud800"}"#).await,
    );

    let long = "a".repeat(10_000);
    let segments = [
        "%00",
        "a%00b",
        "TICKET-1%00",
        "%FF",
        "%C3%28",
        "..",
        "%2e%2e",
        "%2F",
        "TICKET-%F0%9F%98%80",
        "😀",
        &long,
        "TICKET-00000000000000000000001",
        "TICKET-9223372036854775807",
        "TICKET-9223372036854775808",
        " TICKET-1",
    ];
    for segment in segments {
        let short = segment.chars().take(40).collect::<String>();
        for path in [
            format!("/v1/tickets/{segment}"),
            format!("/v1/tickets/{segment}/comments"),
            format!("/v1/tickets/{segment}/events"),
            format!("/v1/agents/{segment}"),
        ] {
            check(format!("GET {short}"), status(app.request(GET, &path)).await);
        }
        check(
            format!("PATCH {short}"),
            status(
                app.request(PATCH, &format!("/v1/tickets/{segment}"))
                    .json(&json!({"priority": 1})),
            )
            .await,
        );
        check(
            format!("cancel {short}"),
            status(app.request(POST, &format!("/v1/tickets/{segment}/cancel"))).await,
        );
        check(
            format!("retry {short}"),
            status(app.request(POST, &format!("/v1/tickets/{segment}/retry"))).await,
        );
        check(
            format!("comment {short}"),
            status(
                app.request(POST, &format!("/v1/tickets/{segment}/comments"))
                    .json(&json!({"text": "x"})),
            )
            .await,
        );
        check(
            format!("PUT agent {short}"),
            status(app.request(PUT, &format!("/v1/agents/{segment}")).json(&json!({}))).await,
        );
        check(
            format!("DELETE agent {short}"),
            status(app.request(DELETE, &format!("/v1/agents/{segment}"))).await,
        );
    }
    let queries = [
        "q=%00",
        "q=a%00b",
        "label=%00",
        "agent=%00",
        "parent=%00",
        "status=%00",
        "order=%00",
        "limit=%00",
        "cursor=%00",
        "q=%FF",
        "label=%C3%28",
        "q=%25%25%5C",
        "q=\\",
        "limit=1e3",
        "limit=18446744073709551616",
        "cursor=6e39393939393939393939393939393939393939",
        "status=todo&status=done",
        "q=",
        "label=",
        "parent=",
    ];
    for query in queries {
        check(
            format!("list ?{query}"),
            status(app.request(GET, &format!("/v1/tickets?{query}"))).await,
        );
        check(
            format!("comments ?{query}"),
            status(app.request(GET, &format!("/v1/tickets/{key}/comments?{query}"))).await,
        );
        check(
            format!("agents ?{query}"),
            status(app.request(GET, &format!("/v1/agents?{query}"))).await,
        );
    }
    for after in ["%00", "-1", "99999999999999999999999", "1-2-3", "%FF", "abc", "1.5"] {
        check(
            format!("ticket events after {after}"),
            status(app.request(GET, &format!("/v1/tickets/{key}/events?after={after}"))).await,
        );
        check(
            format!("events after {after}"),
            status(app.request(GET, &format!("/v1/events?after={after}"))).await,
        );
    }
    for idempotency_key in ["\u{7f}", "é", &"k".repeat(10_000)] {
        let request = app
            .request(reqwest::Method::POST, "/v1/tickets")
            .json(&json!({"task": "x"}));
        let status = match reqwest::header::HeaderValue::from_bytes(idempotency_key.as_bytes()) {
            Ok(v) => status(request.header("idempotency-key", v)).await,
            Err(_) => continue,
        };
        check(
            format!(
                "idempotency key {:?}",
                idempotency_key.chars().take(10).collect::<String>()
            ),
            status,
        );
    }

    let errors: Vec<&(String, StatusCode)> = answers.iter().filter(|(_, s)| s.is_server_error()).collect();
    assert!(errors.is_empty(), "server errors for: {errors:#?}");
    // The service is still healthy and its data consistent.
    assert_eq!(app.get("/readyz").await.0, StatusCode::OK);
    assert_eq!(
        status(app.request(GET, &format!("/v1/tickets/{key}"))).await,
        StatusCode::OK
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_nul_character_is_422_in_a_body_400_in_a_query_and_404_in_a_path_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "x"})).await;
    let key = t["key"].as_str().unwrap();
    let before = app.counts().await;
    for (path, body) in [
        ("/v1/tickets".to_owned(), json!({"task": "a\u{0}b"})),
        ("/v1/tickets".to_owned(), json!({"task": "x", "metadata": {"\u{0}": 1}})),
        (format!("/v1/tickets/{key}/comments"), json!({"text": "\u{0}"})),
    ] {
        assert_error(
            &app.post(&path, body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        );
    }
    let answer = app
        .patch(&format!("/v1/tickets/{key}"), json!({"task": ["\u{0}"]}))
        .await;
    assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    let answer = app.put("/v1/agents/nul", json!({"role": "\u{0}"})).await;
    assert_error(&answer, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    for query in ["q=%00", "label=a%00", "agent=%00"] {
        assert_error(
            &app.get(&format!("/v1/tickets?{query}")).await,
            StatusCode::BAD_REQUEST,
            "bad_request",
        );
    }
    for path in ["/v1/agents/%00", "/v1/tickets/%00", "/v1/tickets/TICKET-1%00"] {
        assert_error(&app.get(path).await, StatusCode::NOT_FOUND, "not_found");
    }
    assert_error(&app.delete("/v1/agents/a%00").await, StatusCode::NOT_FOUND, "not_found");
    assert_eq!(app.counts().await, before);
    assert_eq!(app.get(&format!("/v1/tickets/{key}")).await.1, t);
    app.shutdown().await;
}

#[tokio::test]
async fn concurrent_creates_share_commits_yet_each_gets_its_own_ticket_and_event() {
    let app = std::sync::Arc::new(TestApp::spawn().await);
    let creates = (0..60).map(|i| {
        let app = app.clone();
        tokio::spawn(async move {
            let body = json!({ "task": format!("task {i}"), "labels": [format!("l{i}")], "priority": i % 3 });
            (i, app.create_ticket(body).await)
        })
    });
    let mut keys = HashSet::new();
    for create in futures::future::join_all(creates).await {
        let (i, ticket) = create.unwrap();
        assert_eq!(
            ticket["task"],
            format!("task {i}"),
            "each create answers with its own ticket"
        );
        assert_eq!(ticket["labels"], json!([format!("l{i}")]));
        assert_eq!(ticket["priority"], i % 3);
        assert!(
            keys.insert(ticket["key"].as_str().unwrap().to_owned()),
            "keys are distinct"
        );
        let events = event_kinds(&app, ticket["id"].as_str().unwrap()).await;
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].0, events[0].1.as_str()), (1, "ticket.created"));
        assert_eq!(events[0].2["ticket"]["task"], format!("task {i}"));
    }
}

#[tokio::test]
async fn the_api_listens_with_a_deep_accept_queue_for_bursts_of_reconnecting_clients() {
    let app = TestApp::spawn().await;
    let port = app.url.rsplit(':').next().unwrap().trim_end_matches('/').to_owned();
    let out = std::process::Command::new("ss")
        .args(["-Hltn", &format!("sport = :{port}")])
        .output()
        .expect("ss (iproute2) lists listening sockets");
    let listing = String::from_utf8_lossy(&out.stdout);
    // For a listening socket, Send-Q is its accept queue's length.
    let backlog: u32 = listing
        .split_whitespace()
        .nth(2)
        .and_then(|q| q.parse().ok())
        .unwrap_or_else(|| panic!("a listening socket on port {port}: {listing:?}"));
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        backlog,
        agentdesk::app::ACCEPT_BACKLOG.min(somaxconn),
        "the kernel caps it at somaxconn"
    );
    app.shutdown().await;
}

/// A `todo` ticket whose labels no agent takes waits for ever: the answers that create and show
/// it say so in `AgentDesk-Warning`, and stop saying so once an agent takes its labels (the
/// ticket's JSON stays what its `ticket.created` carries).
#[tokio::test]
async fn a_ticket_no_agent_takes_is_answered_with_a_warning_until_one_does() {
    let app = TestApp::spawn().await;
    // Only a labelled agent: the `default` one (no labels) would take unlabelled tickets.
    app.delete("/v1/agents/default").await;
    let (status, _) = app
        .put(
            "/v1/agents/researcher",
            json!({"role": "r", "model": "m", "labels": ["research"]}),
        )
        .await;
    assert!(status.is_success());
    let warning = |response: &reqwest::Response| {
        response
            .headers()
            .get("agentdesk-warning")
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let create = |body: Value| app.request(POST, "/v1/tickets").json(&body).send();

    let taken = create(json!({"task": "t", "labels": ["research"]})).await.unwrap();
    assert_eq!(taken.status(), StatusCode::CREATED);
    assert_eq!(warning(&taken), None);
    let by_name = create(json!({"task": "t", "labels": ["researcher"]})).await.unwrap();
    assert_eq!(warning(&by_name), None, "a label naming an agent routes to it");

    let stray = create(json!({"task": "t", "labels": ["urgent"]})).await.unwrap();
    assert_eq!(stray.status(), StatusCode::CREATED);
    let message = warning(&stray).expect("a warning for a ticket no agent takes");
    assert!(message.contains("no agent takes tickets labelled urgent"), "{message}");
    let stray: Value = stray.json().await.unwrap();
    let key = stray["key"].as_str().unwrap();
    let unlabelled = create(json!({"task": "t"})).await.unwrap();
    assert!(
        warning(&unlabelled).unwrap().contains("unlabelled"),
        "only a labelled agent exists"
    );

    let shown = app.request(GET, &format!("/v1/tickets/{key}")).send().await.unwrap();
    assert!(warning(&shown).is_some());
    assert_eq!(
        shown.json::<Value>().await.unwrap(),
        stray,
        "the ticket's JSON is unchanged"
    );

    let (status, _) = app
        .put(
            "/v1/agents/oncall",
            json!({"role": "r", "model": "m", "labels": ["urgent"]}),
        )
        .await;
    assert!(status.is_success());
    let shown = app.request(GET, &format!("/v1/tickets/{key}")).send().await.unwrap();
    assert_eq!(warning(&shown), None, "an agent takes it now");

    // Only a todo ticket is warned of.
    app.post(&format!("/v1/tickets/{key}/cancel"), json!({})).await;
    let (status, _) = app.delete("/v1/agents/oncall").await;
    assert!(status.is_success());
    let shown = app.request(GET, &format!("/v1/tickets/{key}")).send().await.unwrap();
    assert_eq!(warning(&shown), None);
    app.shutdown().await;
}

/// An agent forced to call a tool on every turn that holds a tool creating tickets is accepted,
/// with a warning: small models then create tickets nobody asked for.
#[tokio::test]
async fn an_agent_on_required_with_ticket_creating_tools_is_warned_of() {
    let app = TestApp::spawn().await;
    let put = |body: Value| app.request(PUT, "/v1/agents/small").json(&body).send();
    let forced = put(json!({"role": "r", "model": "m", "tool_choice": "required"}))
        .await
        .unwrap();
    assert_eq!(forced.status(), StatusCode::CREATED);
    let warning = forced.headers()["agentdesk-warning"].to_str().unwrap().to_owned();
    assert!(warning.contains("manage_tickets and handover_ticket"), "{warning}");
    let narrow = put(json!({"role": "r", "model": "m", "tool_choice": "required", "tools": ["close_ticket"]}))
        .await
        .unwrap();
    assert_eq!(narrow.status(), StatusCode::OK);
    assert!(narrow.headers().get("agentdesk-warning").is_none());
    let free = put(json!({"role": "r", "model": "m"})).await.unwrap();
    assert!(
        free.headers().get("agentdesk-warning").is_none(),
        "auto may call no tool"
    );
    app.shutdown().await;
}
