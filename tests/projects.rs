//! Projects: keys and names of their own, scoped tokens, and isolation walked over every route of
//! the OpenAPI document, `/mcp` and `/a2a`, with a token of another project.

mod support;

use std::time::Duration;

use reqwest::Method;
use rmcp::model::ProtocolVersion;
use serde_json::{json, Value};
use support::mcp_client::{call, connect};
use support::{send, StatusCode, TestApp};

const DESK: &str = "desk-token-for-projects";

async fn desk() -> TestApp {
    TestApp::spawn_with(|c| c.api_tokens = vec![DESK.into()]).await
}

/// A request as `token`, in `project` when given (the `AgentDesk-Project` header).
fn as_token(app: &TestApp, token: &str, project: Option<&str>, method: Method, path: &str) -> reqwest::RequestBuilder {
    let builder = app.client.request(method, app.endpoint(path)).bearer_auth(token);
    match project {
        Some(p) => builder.header("AgentDesk-Project", p),
        None => builder,
    }
}

async fn create_project(app: &TestApp, name: &str, prefix: &str) -> Value {
    let (status, body) = app
        .post("/v1/projects", json!({"name": name, "key_prefix": prefix}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

async fn create_token(app: &TestApp, project: &str, scopes: &[&str]) -> String {
    let (status, body) = app
        .post(
            &format!("/v1/projects/{project}/tokens"),
            json!({"name": "t", "scopes": scopes}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["token"].as_str().expect("the token").to_owned()
}

#[tokio::test]
async fn a_project_has_its_own_keys_names_and_tickets() {
    let app = desk().await;
    let ops = create_project(&app, "ops", "OPS").await;
    assert_eq!(ops["weight"], 1);
    assert_eq!(ops["key_prefix"], "OPS");
    let (status, _) = app
        .post("/v1/projects", json!({"name": "ops", "key_prefix": "OPX"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = app
        .post("/v1/projects", json!({"name": "ops2", "key_prefix": "OPS"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = app
        .post("/v1/projects", json!({"name": "Bad Name", "key_prefix": "B"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = app
        .post(
            "/v1/projects",
            json!({"name": "neg", "key_prefix": "NEG", "quotas": {"cost_usd_per_month": -1}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "a negative quota is refused");
    let (status, _) = app.patch("/v1/projects/ops", json!([null, null])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "a body is an object");
    for nested in [json!({"quotas": [null, null]}), json!({"rate_limit": [1, 2]})] {
        let (status, _) = app.patch("/v1/projects/ops", nested.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{nested} is no object");
    }
    let (_, unchanged) = app.get("/v1/projects/ops").await;
    assert_eq!(unchanged, ops, "a refused change changes nothing");

    let (status, first) =
        send(as_token(&app, DESK, Some("ops"), Method::POST, "/v1/tickets").json(&json!({"task": "a"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["key"], "OPS-1");
    let (_, second) =
        send(as_token(&app, DESK, Some("ops"), Method::POST, "/v1/tickets").json(&json!({"task": "b"}))).await;
    assert_eq!(second["key"], "OPS-2");
    let default = app.create_ticket(json!({"task": "c"})).await;
    assert_eq!(default["key"], "TICKET-1", "default keeps its keys");

    // Each project lists its own; a key of another project is not found, by key or by id.
    let (_, listed) = send(as_token(&app, DESK, Some("ops"), Method::GET, "/v1/tickets")).await;
    let keys: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["OPS-1", "OPS-2"]);
    let (status, _) = app.get("/v1/tickets/OPS-1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app.get(&format!("/v1/tickets/{}", first["id"].as_str().unwrap())).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, found) = send(as_token(&app, DESK, Some("ops"), Method::GET, "/v1/tickets/ops-1")).await;
    assert_eq!((status, &found["id"]), (StatusCode::OK, &first["id"]));

    // An Idempotency-Key is a project's own: the same key in another project makes its own ticket.
    let keyed = |project: Option<&'static str>| {
        as_token(&app, DESK, project, Method::POST, "/v1/tickets")
            .header("Idempotency-Key", "same-key")
            .json(&json!({"task": "keyed"}))
    };
    let (status, in_ops) = send(keyed(Some("ops"))).await;
    assert_eq!(status, StatusCode::CREATED, "{in_ops}");
    let (status, in_default) = send(keyed(None)).await;
    assert_eq!(status, StatusCode::CREATED, "{in_default}");
    assert_ne!(in_ops["id"], in_default["id"]);
    let (status, repeat) = send(keyed(Some("ops"))).await;
    assert_eq!((status, &repeat["id"]), (StatusCode::OK, &in_ops["id"]));

    // Two projects may each have an agent of the same name.
    let agent = json!({"model": "m", "role": "r"});
    let (status, _) = send(as_token(&app, DESK, Some("ops"), Method::PUT, "/v1/agents/researcher").json(&agent)).await;
    assert!(status.is_success());
    let (status, _) = app.put("/v1/agents/researcher", agent.clone()).await;
    assert!(status.is_success());
    let (_, mine) = send(as_token(&app, DESK, Some("ops"), Method::GET, "/v1/agents")).await;
    assert_eq!(mine["items"].as_array().unwrap().len(), 1);

    // An unknown project is 404; a project with tickets is not deleted; default never is.
    let (status, _) = send(as_token(&app, DESK, Some("nope"), Method::GET, "/v1/tickets")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app.delete("/v1/projects/ops").await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = app.delete("/v1/projects/default").await;
    assert_eq!(status, StatusCode::CONFLICT);
    create_project(&app, "empty", "EMPTY").await;
    let (status, _) = app.delete("/v1/projects/empty").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = app.get("/v1/projects/empty").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    app.shutdown().await;
}

#[tokio::test]
async fn project_tokens_have_scopes_expiry_and_revocation() {
    let app = desk().await;
    create_project(&app, "ops", "OPS").await;
    let reader = create_token(&app, "ops", &["read"]).await;
    assert!(reader.starts_with("adk_") && reader.len() >= 4 + 43, "{reader}");
    let writer = create_token(&app, "ops", &["write"]).await;
    let admin = create_token(&app, "ops", &["admin"]).await;

    let (status, _) = send(as_token(&app, &reader, None, Method::GET, "/v1/tickets")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) =
        send(as_token(&app, &reader, None, Method::POST, "/v1/tickets").json(&json!({"task": "x"}))).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    let (status, ticket) =
        send(as_token(&app, &writer, None, Method::POST, "/v1/tickets").json(&json!({"task": "x"}))).await;
    assert_eq!((status, ticket["key"].as_str()), (StatusCode::CREATED, Some("OPS-1")));
    let (status, _) =
        send(as_token(&app, &writer, None, Method::PUT, "/v1/agents/a").json(&json!({"model": "m"}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "agents need admin");
    let (status, _) =
        send(as_token(&app, &admin, None, Method::PUT, "/v1/agents/a").json(&json!({"model": "m"}))).await;
    assert!(status.is_success());
    // Naming another project is refused; managing projects is for desk tokens.
    let (status, _) = send(as_token(&app, &admin, Some("default"), Method::GET, "/v1/tickets")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) =
        send(as_token(&app, &admin, None, Method::POST, "/v1/projects").json(&json!({"name": "x", "key_prefix": "X"})))
            .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The list never shows a secret; a revoked token is refused at once here.
    let (_, tokens) = send(as_token(&app, &admin, None, Method::GET, "/v1/projects/ops/tokens")).await;
    let items = tokens["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert!(!tokens.to_string().contains("adk_"), "{tokens}");
    let stored: Vec<Vec<u8>> = sqlx::query_scalar("SELECT token_hash FROM project_tokens")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert!(stored.iter().all(|h| h.len() == 32), "only hashes are kept");
    let reader_id = items.iter().find(|t| t["scopes"] == json!(["read"])).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = app.delete(&format!("/v1/projects/ops/tokens/{reader_id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = send(as_token(&app, &reader, None, Method::GET, "/v1/tickets")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = send(as_token(&app, "adk_not-a-token", None, Method::GET, "/v1/tickets")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // An expired token is refused.
    let (_, expired) = app
        .post(
            "/v1/projects/ops/tokens",
            json!({"name": "old", "scopes": ["read"], "expires_at": "2020-01-01T00:00:00Z"}),
        )
        .await;
    let (status, _) = send(as_token(
        &app,
        expired["token"].as_str().unwrap(),
        None,
        Method::GET,
        "/v1/tickets",
    ))
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // `last_used_at` is written in batches, without a write per request.
    support::eventually("last_used_at to be written", Duration::from_secs(15), || async {
        let used: Option<chrono::DateTime<chrono::Utc>> =
            sqlx::query_scalar("SELECT max(last_used_at) FROM project_tokens")
                .fetch_one(&app.pool)
                .await
                .unwrap();
        used.map(|_| ())
    })
    .await;
    app.shutdown().await;
}

#[tokio::test]
async fn quotas_refuse_creates_before_writing_and_rate_limits_answer_429() {
    let app = desk().await;
    let (status, _) = app
        .post(
            "/v1/projects",
            json!({"name": "small", "key_prefix": "SM", "quotas": {"tickets_per_day": 2},
                   "rate_limit": {"requests_per_s": 0.01, "burst": 6}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let create = || as_token(&app, DESK, Some("small"), Method::POST, "/v1/tickets").json(&json!({"task": "t"}));
    for _ in 0..2 {
        let (status, _) = send(create()).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let response = create().send().await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry_after));
    assert!(response.headers().contains_key("ratelimit-remaining"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "quota_exceeded");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM tickets")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(count, 2, "nothing was written");
    let (_, usage) = send(as_token(&app, DESK, None, Method::GET, "/v1/projects/small/usage")).await;
    assert_eq!(usage["day"]["tickets"], 2);
    assert_eq!(usage["quotas"]["tickets_per_day"], 2);

    // Six requests in a burst were allowed (three creates above and three now); the seventh is 429.
    for _ in 0..3 {
        let (status, _) = send(as_token(&app, DESK, Some("small"), Method::GET, "/v1/tickets")).await;
        assert_eq!(status, StatusCode::OK);
    }
    let limited = as_token(&app, DESK, Some("small"), Method::GET, "/v1/tickets")
        .send()
        .await
        .unwrap();
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        limited.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert_eq!(limited.headers()["ratelimit-limit"], "6");
    // The default project is not limited.
    let (status, _) = app.get("/v1/tickets").await;
    assert_eq!(status, StatusCode::OK);
    app.shutdown().await;
}

/// A request body that passes validation for each writing route, so that only the project can
/// refuse it.
fn body_for(method: &Method, path: &str) -> Option<Value> {
    let body = match (method.as_str(), path) {
        ("POST", p) if p.ends_with("/comments") => json!({"text": "from another project"}),
        ("POST", p) if p.contains("/approvals/") => json!({"approve": true}),
        ("POST", p) if p.ends_with("/approvals") => json!({"approve_all": true}),
        ("POST", p) if p.contains("/questions/") => json!({"answer": "from another project"}),
        ("POST", p) if p.ends_with("/rollback") => json!({"version": 1}),
        ("POST", p) if p.ends_with("/tokens") => json!({"name": "x", "scopes": ["read"]}),
        ("PATCH", "/v1/tickets/{ticket}") => json!({"priority": 5}),
        ("PATCH", "/v1/schedules/{schedule}") => json!({"enabled": false}),
        ("PATCH", "/v1/webhooks/{id}") => json!({"description": "changed"}),
        ("PATCH", "/v1/projects/{project}") => json!({"weight": 5}),
        ("POST", _) => json!({}),
        _ => return None,
    };
    Some(body)
}

#[tokio::test]
async fn a_token_of_another_project_sees_nothing_on_any_route() {
    let app = desk().await;
    create_project(&app, "alpha", "ALPHA").await;
    create_project(&app, "beta", "BETA").await;
    let intruder = create_token(&app, "beta", &["admin", "write", "approve"]).await;
    let alpha = |method: Method, path: &str| as_token(&app, DESK, Some("alpha"), method, path);

    // Alpha's objects, one of each kind the routes name.
    let (_, ticket) = send(alpha(Method::POST, "/v1/tickets").json(&json!({"task": "secret work"}))).await;
    let (key, id) = (
        ticket["key"].as_str().unwrap().to_owned(),
        ticket["id"].as_str().unwrap().to_owned(),
    );
    let (status, _) =
        send(alpha(Method::PUT, "/v1/agents/researcher").json(&json!({"model": "m", "role": "secret role"}))).await;
    assert!(status.is_success());
    let (status, schedule) = send(alpha(Method::POST, "/v1/schedules").json(&json!({
        "name": "nightly", "cron": "0 3 * * *", "ticket": {"task": "secret nightly"}})))
    .await;
    assert_eq!(status, StatusCode::CREATED, "{schedule}");
    let (status, webhook) =
        send(alpha(Method::POST, "/v1/webhooks").json(&json!({"url": "https://example.com/secret-hook"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{webhook}");
    let (status, experiment) = send(alpha(Method::POST, "/v1/experiments").json(&json!({
        "name": "secret experiment", "tickets": [key], "arms": [{"name": "a", "agent": "researcher"}]})))
    .await;
    assert_eq!(status, StatusCode::CREATED, "{experiment}");
    let secrets = [key.as_str(), id.as_str(), "secret", "researcher", "nightly"];

    // Every route of the document, with alpha's references in its parameters.
    let (_, document) = app.get("/openapi.json").await;
    let mut walked = 0;
    for (template, operations) in document["paths"].as_object().unwrap() {
        if !template.contains('{') || template.starts_with("/v1/prices") {
            continue;
        }
        for references in [&key, &id] {
            let path = template
                .replace("{ticket}", references)
                .replace("{name}", "researcher")
                .replace("{schedule}", "nightly")
                .replace(
                    "{id}",
                    if template.starts_with("/v1/experiments") {
                        experiment["id"].as_str().unwrap()
                    } else {
                        webhook["id"].as_str().unwrap()
                    },
                )
                .replace("{project}", "alpha")
                .replace("{call_id}", "call_1")
                .replace("{version}", "1")
                .replace("{model}", "m");
            for method in operations.as_object().unwrap().keys() {
                let method: Method = method.to_uppercase().parse().unwrap();
                if method == Method::PUT {
                    // A PUT by name makes the intruder's own object: checked below.
                    continue;
                }
                let mut request = as_token(&app, &intruder, None, method.clone(), &path);
                if let Some(body) = body_for(&method, template) {
                    request = request.json(&body);
                }
                let response = request.send().await.unwrap();
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {text}");
                walked += 1;
            }
        }
    }
    assert!(walked > 30, "walked {walked} operations");
    // An experiment cannot name another project's ticket.
    let steal = json!({"name": "x", "tickets": [key], "arms": [{"name": "a", "agent": "researcher"}]});
    let request = as_token(&app, &intruder, None, Method::POST, "/v1/experiments").json(&steal);
    assert_eq!(send(request).await.0, StatusCode::NOT_FOUND);

    // Lists, stats and streams show the intruder none of alpha's.
    for list in [
        "/v1/tickets",
        "/v1/experiments",
        "/v1/agents",
        "/v1/schedules",
        "/v1/webhooks",
        "/v1/projects",
        "/v1/stats",
    ] {
        let (status, body) = send(as_token(&app, &intruder, None, Method::GET, list)).await;
        assert_eq!(status, StatusCode::OK, "{list}");
        let text = body.to_string();
        for secret in secrets {
            assert!(!text.contains(secret), "{list} shows {secret}: {text}");
        }
    }
    let mut firehose = support::SseClient::open(as_token(&app, &intruder, None, Method::GET, "/v1/events?after=0"))
        .await
        .unwrap();
    let seen = firehose.collect_for(Duration::from_millis(1500)).await;
    assert!(
        seen.iter().all(|e| e.ticket_id() != id),
        "the firehose shows alpha's events"
    );

    // A PUT by name makes the intruder's own agent; alpha's stays as it was.
    let (status, _) =
        send(as_token(&app, &intruder, None, Method::PUT, "/v1/agents/researcher").json(&json!({"model": "other"})))
            .await;
    assert!(status.is_success());
    let (_, agent) = send(alpha(Method::GET, "/v1/agents/researcher")).await;
    assert_eq!(agent["role"], "secret role");
    let (_, ticket_now) = send(alpha(Method::GET, &format!("/v1/tickets/{key}"))).await;
    assert_eq!(ticket_now["priority"], 0, "alpha's ticket is unchanged");
    let (_, comments) = send(alpha(Method::GET, &format!("/v1/tickets/{key}/comments"))).await;
    assert_eq!(comments["items"].as_array().map(Vec::len), Some(0));

    // /mcp acts in the token's project.
    let client = connect(&app, Some(&intruder), ProtocolVersion::V_2025_11_25)
        .await
        .expect("connect to /mcp");
    let got = call(&client, "get_ticket", json!({"ticket": key})).await;
    assert_eq!(got.is_error, Some(true), "{got:?}");
    let listed = call(&client, "list_tickets", json!({})).await;
    assert!(!format!("{listed:?}").contains(&key), "{listed:?}");
    let _ = client.cancel().await;

    // A2A acts in the token's project.
    let (status, _) = send(as_token(
        &app,
        &intruder,
        None,
        Method::GET,
        &format!("/a2a/tasks/{id}"),
    ))
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, tasks) = send(as_token(&app, &intruder, None, Method::GET, "/a2a/tasks")).await;
    assert!(!tasks.to_string().contains(&id), "{tasks}");
    // The agent card's `tenant` in the path names the project, as the header does.
    let (status, tasks) = send(as_token(&app, &intruder, None, Method::GET, "/a2a/alpha/tasks")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{tasks}");
    assert!(!tasks.to_string().contains(&id), "{tasks}");
    let (status, tasks) = send(as_token(&app, DESK, None, Method::GET, "/a2a/alpha/tasks")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        tasks.to_string().contains(&id),
        "a desk token reads alpha's tasks under its tenant: {tasks}"
    );
    let (_, card) = app.get("/.well-known/agent-card.json?project=alpha").await;
    assert_eq!(card["supportedInterfaces"][0]["tenant"], "alpha");
    assert_eq!(card["skills"][0]["id"], "researcher");
    app.shutdown().await;
}

/// `count` tickets of a project, inserted as a client's would be (oldest first).
async fn post_tickets(pool: &sqlx::PgPool, project: i64, count: i64) {
    sqlx::query(
        "INSERT INTO tickets (id, project_id, number, task, labels, priority, metadata, max_attempts, reporter,
                              last_event_seq, created_at)
         SELECT gen_random_uuid(), $1, agentdesk_ticket_number($1), '\"t\"', '{}', 0, '{}', 3, 'user', 1,
                clock_timestamp() + make_interval(secs => g / 1000.0)
         FROM generate_series(1, $2) AS g",
    )
    .bind(project)
    .bind(count)
    .execute(pool)
    .await
    .expect("insert tickets");
}

async fn claim(pool: &sqlx::PgPool, limit: i64) -> Vec<String> {
    agentdesk::db::claims::register_worker(pool, "w", Duration::from_secs(60))
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let claimed = agentdesk::db::claims::claim_tickets(&mut tx, limit, "w")
        .await
        .expect("claim");
    tx.commit().await.unwrap();
    claimed.into_iter().map(|c| c.claim.ticket.key).collect()
}

#[tokio::test]
async fn a_small_projects_new_ticket_is_claimed_before_a_big_backlog() {
    let url = testkit::testing::fresh_database().await.expect("a fresh test database");
    let pool = agentdesk::db::connect(&url, 4).await.expect("connect");
    agentdesk::db::migrate(&pool).await.expect("migrate");
    sqlx::query("INSERT INTO projects (id, name, key_prefix) VALUES (2, 'beta', 'BETA')")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("CREATE SEQUENCE ticket_number_seq_2")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO agents (project_id, name, role, model, tools) VALUES (1, 'w', '', 'm', '{}'), (2, 'w', '', 'm', '{}')")
        .execute(&pool)
        .await
        .unwrap();

    // `default` posts a backlog and holds ten workers with it; then beta posts one ticket.
    post_tickets(&pool, 1, 100).await;
    let first = claim(&pool, 10).await;
    assert!(first.iter().all(|k| k.starts_with("TICKET-")), "{first:?}");
    post_tickets(&pool, 2, 1).await;
    // Beta runs nothing, below its share: its ticket goes first, although ninety are older.
    assert_eq!(claim(&pool, 1).await, ["BETA-1"]);
    // Then the backlog goes on in its own order.
    assert_eq!(claim(&pool, 2).await, ["TICKET-11", "TICKET-12"]);
}

#[tokio::test]
async fn limits_and_revocation_hold_across_two_api_processes() {
    let first = desk().await;
    let database_url = first.database_url.clone();
    let second = TestApp::spawn_with(|c| {
        c.api_tokens = vec![DESK.into()];
        c.database_url = Some(database_url);
    })
    .await;
    let (status, _) = first
        .post(
            "/v1/projects",
            json!({"name": "shared", "key_prefix": "SH", "rate_limit": {"requests_per_s": 0.001, "burst": 10}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);

    // One bucket for both processes: of twenty requests sent to them in turn, ten pass.
    let mut passed = 0;
    for i in 0..20 {
        let app = if i % 2 == 0 { &first } else { &second };
        let (status, _) = send(as_token(app, DESK, Some("shared"), Method::GET, "/v1/tickets")).await;
        match status {
            StatusCode::OK => passed += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(passed, 10);

    // A token revoked through one process is refused by the other within 2 s.
    let token = create_token(&first, "default", &["read"]).await;
    let (status, _) = send(as_token(&second, &token, None, Method::GET, "/v1/tickets")).await;
    assert_eq!(status, StatusCode::OK, "the second process knows the token");
    let (_, tokens) = first.get("/v1/projects/default/tokens").await;
    let id = tokens["items"][0]["id"].as_str().unwrap().to_owned();
    let (status, _) = first.delete(&format!("/v1/projects/default/tokens/{id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // Refused by the other process within 2 s of the revocation.
    support::eventually("the revoked token to be refused", Duration::from_secs(2), || async {
        let (status, _) = send(as_token(&second, &token, None, Method::GET, "/v1/tickets")).await;
        (status == StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
    second.shutdown().await;
    first.shutdown().await;
}

/// Runs a request as the desk token in `project`, answering its status and JSON body.
async fn in_project(
    app: &TestApp,
    project: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let request = as_token(app, DESK, Some(project), method, path);
    send(match body {
        Some(body) => request.json(&body),
        None => request,
    })
    .await
}

#[tokio::test]
async fn a_reached_money_quota_pauses_the_project_once_and_a_raise_resumes_it() {
    let llm = testkit::fake_llm::FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |c| c.api_tokens = vec![DESK.into()]).await;
    llm.set_reply(testkit::fake_llm::Reply::tool_call(
        "close_ticket",
        json!({"result": "ok"}),
    ));
    let (status, _) = app
        .post(
            "/v1/projects",
            json!({"name": "thrift", "key_prefix": "TH", "quotas": {"cost_usd_per_day": 10}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    // 15 tokens at $100 per million: each request costs $0.0015.
    app.put("/v1/prices/house-model", json!({"input": 100, "output": 100}))
        .await;
    let agent = json!({"model": "house-model", "max_tokens": 100});
    let (status, _) = in_project(&app, "thrift", Method::PUT, "/v1/agents/worker", Some(agent)).await;
    assert!(status.is_success());
    let create = |task: &str| in_project(&app, "thrift", Method::POST, "/v1/tickets", Some(json!({"task": task})));
    let (_, first) = create("first").await;
    let first_key = first["key"].as_str().unwrap().to_owned();
    let wait = |key: String, status: &'static str| {
        let app = &app;
        async move {
            support::eventually(format!("{key} to become {status}"), Duration::from_secs(30), || async {
                let (_, t) = in_project(app, "thrift", Method::GET, &format!("/v1/tickets/{key}"), None).await;
                (t["status"] == status).then_some(t)
            })
            .await
        }
    };
    wait(first_key.clone(), "done").await;

    // The day's quota lowered below what the day spent: the next request does not go out.
    let (status, _) = app
        .patch("/v1/projects/thrift", json!({"quotas": {"cost_usd_per_day": 0.001}}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let sent = llm.request_count();
    let (_, second) = create("second").await;
    let second_key = second["key"].as_str().unwrap().to_owned();
    let waiting = wait(second_key.clone(), "waiting").await;
    assert_eq!(waiting["waiting_for"], "budget", "{waiting}");
    assert_eq!(llm.request_count(), sent, "nothing was sent");
    let exhausted = support::event_data(&app, second["id"].as_str().unwrap(), "budget.exhausted").await;
    assert_eq!(exhausted[0]["scope"], "project");
    assert_eq!(exhausted[0]["name"], "thrift");

    // Paused: a new ticket of the project is not claimed; another project's is.
    let (_, third) = create("third").await;
    assert!(
        claim(&app.pool, 10).await.is_empty(),
        "a paused project is not claimed from"
    );
    let notices: Vec<(Option<uuid::Uuid>, Value)> =
        sqlx::query_as("SELECT ticket_id, data FROM events WHERE kind = 'project.quota_reached'")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(notices.len(), 1, "announced once: {notices:?}");
    assert_eq!(notices[0].0, None, "an event of the project, with no ticket");
    assert_eq!(notices[0].1["quota"], "cost_usd_per_day");
    assert_eq!(notices[0].1["limit"], json!(0.001));
    // The project's firehose carries it, with no ticket and no seq.
    let mut firehose =
        support::SseClient::open(as_token(&app, DESK, Some("thrift"), Method::GET, "/v1/events?after=0"))
            .await
            .unwrap();
    let seen = firehose
        .collect_until(|e| e.kind() == "project.quota_reached", Duration::from_secs(10))
        .await;
    let reached = seen.last().expect("the firehose shows the quota");
    assert_eq!(reached.kind(), "project.quota_reached");
    assert_eq!(reached.data["ticket_id"], Value::Null);
    assert_eq!(reached.data["seq"], Value::Null);
    // Not another project's firehose.
    let mut other = support::SseClient::open(as_token(&app, DESK, None, Method::GET, "/v1/events?after=0"))
        .await
        .unwrap();
    let others = other.collect_for(Duration::from_millis(1000)).await;
    assert!(others.iter().all(|e| e.kind() != "project.quota_reached"));

    // Raised: both finish by themselves.
    let (status, _) = app
        .patch("/v1/projects/thrift", json!({"quotas": {"cost_usd_per_day": 10}}))
        .await;
    assert_eq!(status, StatusCode::OK);
    wait(second_key, "done").await;
    wait(third["key"].as_str().unwrap().to_owned(), "done").await;
    let (_, usage) = app.get("/v1/projects/thrift/usage").await;
    assert_eq!(usage["day"]["tickets"], 3);
    assert_eq!(usage["day"]["by_model"]["house-model"]["requests"], 3, "{usage}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_token_quota_stops_requests_once_reached_and_schedules_skip_past_the_ticket_quota() {
    let llm = testkit::fake_llm::FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |c| c.api_tokens = vec![DESK.into()]).await;
    llm.set_reply(testkit::fake_llm::Reply::tool_call(
        "close_ticket",
        json!({"result": "ok"}),
    ));
    // No price is needed for a token quota.
    let (status, _) = app
        .post(
            "/v1/projects",
            json!({"name": "words", "key_prefix": "WD", "quotas": {"tokens_per_day": 10, "tickets_per_day": 3}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let agent = json!({"model": "unpriced-model", "tools": ["close_ticket", "manage_tickets"]});
    let (status, _) = in_project(&app, "words", Method::PUT, "/v1/agents/worker", Some(agent)).await;
    assert!(status.is_success());
    let (_, first) = in_project(&app, "words", Method::POST, "/v1/tickets", Some(json!({"task": "one"}))).await;
    let first_key = first["key"].as_str().unwrap().to_owned();
    // Its one request used 15 tokens of 10: the quota is reached, announced once.
    let what = "the ticket done and the quota announced";
    support::eventually(what, Duration::from_secs(30), || async {
        let (_, t) = in_project(&app, "words", Method::GET, &format!("/v1/tickets/{first_key}"), None).await;
        let reached: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE kind = 'project.quota_reached'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
        (t["status"] == "done" && reached == 1).then_some(())
    })
    .await;
    let (quota,): (Value,) = sqlx::query_as("SELECT data FROM events WHERE kind = 'project.quota_reached'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(quota["quota"], "tokens_per_day");
    assert_eq!(quota["limit"], 10);
    assert_eq!(quota["used"], 15);
    // The project's next ticket stays `todo`: nothing claims it.
    let (_, second) = in_project(&app, "words", Method::POST, "/v1/tickets", Some(json!({"task": "two"}))).await;
    assert_eq!(second["status"], "todo");
    assert!(
        claim(&app.pool, 10).await.is_empty(),
        "a paused project is not claimed from"
    );

    // The third ticket of the day is the last: a schedule's fire after it is skipped for the quota.
    let (_, third) = in_project(
        &app,
        "words",
        Method::POST,
        "/v1/tickets",
        Some(json!({"task": "three"})),
    )
    .await;
    assert!(third["key"].is_string(), "{third}");
    let schedule = json!({"name": "every-minute", "cron": "* * * * *", "ticket": {"task": "tick"}});
    let (status, body) = in_project(&app, "words", Method::POST, "/v1/schedules", Some(schedule)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = in_project(
        &app,
        "words",
        Method::POST,
        "/v1/schedules/every-minute/run",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    sqlx::query("UPDATE schedules SET next_run_at = now() - interval '1 second'")
        .execute(&app.pool)
        .await
        .unwrap();
    // The schedulers are told, as a change through the API would tell them.
    sqlx::query("SELECT pg_notify('agentdesk_schedules', '')")
        .execute(&app.pool)
        .await
        .unwrap();
    let skipped: Value = support::eventually("the schedule to skip", Duration::from_secs(30), || async {
        sqlx::query_scalar("SELECT data FROM events WHERE kind = 'schedule.skipped' AND ticket_id IS NULL")
            .fetch_optional(&app.pool)
            .await
            .unwrap()
    })
    .await;
    assert_eq!(skipped["reason"], "quota");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM tickets WHERE key LIKE 'WD-%'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(count, 3, "no ticket beyond the quota");
    app.shutdown().await;
}

#[tokio::test]
async fn tools_mcp_servers_and_providers_are_each_projects_own() {
    let app = desk().await;
    create_project(&app, "alpha", "AL").await;
    create_project(&app, "beta", "BE").await;
    let tool = |url: &str| json!({"description": "d", "url": url, "input_schema": {"type": "object"}});
    for (project, url) in [
        ("alpha", "https://alpha.example.com/w"),
        ("beta", "https://beta.example.com/w"),
    ] {
        let (status, body) = in_project(&app, project, Method::PUT, "/v1/tools/weather", Some(tool(url))).await;
        assert_eq!(status, StatusCode::CREATED, "the same name in two projects: {body}");
    }
    let (_, got) = in_project(&app, "beta", Method::GET, "/v1/tools/weather", None).await;
    assert_eq!(got["url"], "https://beta.example.com/w");
    let (status, _) = in_project(
        &app,
        "alpha",
        Method::PUT,
        "/v1/tools/only-alpha",
        Some(tool("https://a.example.com")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = in_project(&app, "beta", Method::GET, "/v1/tools/only-alpha", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = in_project(&app, "beta", Method::GET, "/v1/tools", None).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    let (_, default_list) = app.get("/v1/tools").await;
    assert!(default_list["items"].as_array().unwrap().is_empty(), "{default_list}");

    // An agent names only its own project's tools and providers.
    let agent = json!({"model": "m", "tools": ["only-alpha"]});
    let (status, body) = in_project(&app, "beta", Method::PUT, "/v1/agents/a", Some(agent.clone())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, _) = in_project(&app, "alpha", Method::PUT, "/v1/agents/a", Some(agent)).await;
    assert!(status.is_success());
    let provider = json!({"kind": "openai", "base_url": "http://127.0.0.1:9/v1"});
    let (status, body) = in_project(&app, "alpha", Method::PUT, "/v1/providers/local", Some(provider)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let uses_local = json!({"model": "m", "provider": "local"});
    let (status, _) = in_project(&app, "beta", Method::PUT, "/v1/agents/b", Some(uses_local.clone())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = in_project(&app, "alpha", Method::PUT, "/v1/agents/b", Some(uses_local)).await;
    assert!(status.is_success());
    let (_, providers) = in_project(&app, "beta", Method::GET, "/v1/providers", None).await;
    assert!(
        providers["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["name"] != "local"),
        "{providers}"
    );
    // Deleting beta's `weather` leaves alpha's.
    let (status, _) = in_project(&app, "beta", Method::DELETE, "/v1/tools/weather", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = in_project(&app, "alpha", Method::GET, "/v1/tools/weather", None).await;
    assert_eq!(status, StatusCode::OK);
    // MCP servers: an unreachable one still makes its row, in its project only.
    let server = json!({"url": "http://127.0.0.1:9/mcp", "timeout_ms": 500});
    let (status, body) = in_project(&app, "alpha", Method::PUT, "/v1/mcp-servers/files", Some(server)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _) = in_project(&app, "beta", Method::GET, "/v1/mcp-servers/files", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, servers) = in_project(&app, "beta", Method::GET, "/v1/mcp-servers", None).await;
    assert!(servers["items"].as_array().unwrap().is_empty(), "{servers}");
    let mcp_agent = json!({"model": "m", "tools": ["mcp:files"]});
    let (status, _) = in_project(&app, "beta", Method::PUT, "/v1/agents/c", Some(mcp_agent.clone())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = in_project(&app, "alpha", Method::PUT, "/v1/agents/c", Some(mcp_agent)).await;
    assert!(status.is_success());
    app.shutdown().await;
}
