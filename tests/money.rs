//! Money: prices, what requests cost, and budgets that reserve before they spend, against a real
//! Postgres and a fake model server.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{assert_error, event_data, wait_status};
use support::{StatusCode, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};

const WAIT: Duration = Duration::from_secs(30);

async fn start() -> (TestApp, FakeLlm) {
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    (app, llm)
}

fn dollars(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not an amount: {v}"))
}

#[tokio::test]
async fn prices_are_set_listed_read_and_deleted_with_the_built_in_table_after_the_desks() {
    let app = TestApp::spawn().await;
    let (code, price) = app
        .put(
            "/v1/prices/gpt-4o-mini",
            json!({"input": 0.15, "output": 0.60, "cache_read": 0.075, "cache_creation": null,
                   "effective_from": "2026-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{price}");
    assert_eq!(price["input"], json!(0.15));
    assert_eq!(price["provider"], Value::Null);
    assert_eq!(price["source"], "desk");
    let (code, own) = app
        .put("/v1/prices/my-model-*?provider=local", json!({"input": 1, "output": 2}))
        .await;
    assert_eq!(code, StatusCode::OK, "{own}");
    assert_eq!(own["provider"], "local");

    let (_, list) = app.get("/v1/prices").await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items[0]["source"], "desk");
    assert_eq!(items[1]["source"], "desk");
    assert!(items[2..].iter().all(|p| p["source"] == "built_in"));
    assert!(items
        .iter()
        .any(|p| p["model"] == "claude-sonnet-4-5*" && p["provider"].is_null()));

    let (code, got) = app.get("/v1/prices/my-model-*?provider=local").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(got["output"], json!(2));
    let (code, _) = app.get("/v1/prices/my-model-*").await;
    assert_eq!(code, StatusCode::NOT_FOUND, "named by model and provider");
    let (code, built_in) = app.get("/v1/prices/gpt-4o").await;
    assert_eq!((code, &built_in["source"]), (StatusCode::OK, &json!("built_in")));

    assert_error(
        &app.put("/v1/prices/x", json!({"input": -1, "output": 1})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &app.put("/v1/prices/a*b", json!({"input": 1, "output": 1})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    let (code, _) = app.put("/v1/prices/x", json!({"input": 1})).await;
    assert!(code.is_client_error());

    let (code, _) = app.delete("/v1/prices/my-model-*?provider=local").await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (code, _) = app.delete("/v1/prices/my-model-*?provider=local").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    app.shutdown().await;
}

/// Every model the README names as an example has a built-in price.
#[test]
fn every_model_the_readme_names_has_a_built_in_price() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut names = std::collections::BTreeSet::new();
    for (start, _) in readme.match_indices(['`', '"']) {
        let rest = &readme[start + 1..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
            .unwrap_or(0);
        let name = &rest[..end];
        let next = rest[end..].chars().next();
        let model = name.starts_with("gpt-") || name.starts_with("claude-");
        if model && next != Some('*') && name.len() > "gpt-".len() {
            names.insert(name.to_owned());
        }
    }
    for required in ["gpt-4o-mini", "claude-sonnet-4-5"] {
        assert!(names.contains(required), "the README names {required}");
    }
    let now = chrono::Utc::now();
    for name in &names {
        let provider = if name.starts_with("claude-") {
            "anthropic"
        } else {
            "openai"
        };
        let found = agentdesk::domain::price::price_for(agentdesk::domain::price::BUILT_IN.iter(), name, provider, now);
        assert!(found.is_some(), "the README names {name}, which has no built-in price");
    }
}

#[tokio::test]
async fn a_requests_cost_comes_from_its_usage_and_the_price_in_force() {
    let (app, llm) = start().await;
    let (code, _) = app
        .put(
            "/v1/agents/default",
            json!({"model": "house-model", "provider": "openai"}),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    // An older price and one not yet in force: neither applies.
    for (input, from) in [(100, "2020-01-01T00:00:00Z"), (9, "2099-01-01T00:00:00Z")] {
        let body = json!({"input": input, "output": 1, "effective_from": from});
        assert_eq!(app.put("/v1/prices/house-model", body).await.0, StatusCode::OK);
    }
    let body = json!({"input": 1, "output": 2, "cache_read": 0.5, "effective_from": "2021-01-01T00:00:00Z"});
    assert_eq!(app.put("/v1/prices/house-model", body).await.0, StatusCode::OK);
    llm.push(
        Reply::tool_call("close_ticket", json!({"result": "ok"}))
            .usage(1000, 500)
            .cache_tokens(2000, 0),
    );
    let ticket = app.create_ticket(json!({"task": "price me"})).await;
    let key = ticket["key"].as_str().unwrap();
    let done = wait_status(&app, key, "done").await;
    // 1000 × $1 + 500 × $2 + 2000 × $0.50, per million tokens.
    assert_eq!(done["usage"]["cost_usd"], json!(0.003), "{done}");
    assert_eq!(done["usage"]["unpriced"], json!(false));
    let finished = event_data(&app, done["id"].as_str().unwrap(), "request.finished").await;
    assert_eq!(finished[0]["cost_usd"], json!(0.003));
    assert_eq!(finished[0]["unpriced"], json!(false));

    let (_, stats) = app.get("/v1/stats").await;
    assert_eq!(stats["cost_usd"], json!(0.003), "{stats}");
    assert_eq!(stats["by_agent"]["default"]["cost_usd"], json!(0.003));
    assert_eq!(stats["by_model"]["house-model"]["cost_usd"], json!(0.003));
    assert_eq!(stats["by_model"]["house-model"]["requests"], json!(1));
    let metrics = app
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(|l| l.starts_with("agentdesk_cost_usd_total{")
            && l.contains("agent=\"default\"")
            && l.contains("model=\"house-model\"")),
        "{metrics}"
    );

    // A model without a price has no cost: never 0.
    let (code, _) = app
        .put("/v1/agents/default", json!({"model": "nobody-prices-me"}))
        .await;
    assert_eq!(code, StatusCode::OK);
    llm.push(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let ticket = app.create_ticket(json!({"task": "free?"})).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["usage"]["cost_usd"], Value::Null, "{done}");
    assert_eq!(done["usage"]["unpriced"], json!(true));
    let finished = event_data(&app, done["id"].as_str().unwrap(), "request.finished").await;
    assert_eq!(
        (&finished[0]["cost_usd"], &finished[0]["unpriced"]),
        (&Value::Null, &json!(true))
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_ticket_budget_stops_a_request_that_does_not_fit_and_a_raise_resumes_it() {
    let (app, llm) = start().await;
    app.put("/v1/agents/default", json!({"model": "house-model", "max_tokens": 100}))
        .await;
    app.put("/v1/prices/house-model", json!({"input": 1000, "output": 1000}))
        .await;
    llm.set_reply(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let (code, ticket) = app
        .post("/v1/tickets", json!({"task": "frugal", "budget_usd": 0.01}))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{ticket}");
    assert_eq!(ticket["budget_usd"], json!(0.01));
    assert_eq!(ticket["waiting_for"], Value::Null);
    let key = ticket["key"].as_str().unwrap();
    let waiting = wait_status(&app, key, "waiting").await;
    assert_eq!(waiting["waiting_for"], "budget", "{waiting}");
    let exhausted = event_data(&app, ticket["id"].as_str().unwrap(), "budget.exhausted").await;
    assert_eq!(exhausted[0]["scope"], "ticket");
    assert_eq!(exhausted[0]["name"], key);
    assert_eq!(exhausted[0]["limit_usd"], json!(0.01));
    assert_eq!(llm.request_count(), 0, "nothing was sent");

    let (code, patched) = app.patch(&format!("/v1/tickets/{key}"), json!({"budget_usd": 5})).await;
    assert_eq!(code, StatusCode::OK, "{patched}");
    let done = wait_status(&app, key, "done").await;
    assert!(dollars(&done["usage"]["cost_usd"]) <= 5.0);
    // 15 tokens at $1000 per million: $0.015 of $5 crosses no threshold.
    let (_, small) = app.post("/v1/tickets", json!({"task": "tight", "budget_usd": 5})).await;
    let small_key = small["key"].as_str().unwrap();
    wait_status(&app, small_key, "done").await;
    assert!(event_data(&app, small["id"].as_str().unwrap(), "budget.threshold")
        .await
        .is_empty());
    let (code, bad) = app.post("/v1/tickets", json!({"task": "x", "budget_usd": -1})).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_model_without_a_price_waits_for_one_where_a_budget_applies() {
    let (app, llm) = start().await;
    app.put(
        "/v1/agents/default",
        json!({"model": "unpriced-model", "budget_usd_per_day": 10}),
    )
    .await;
    llm.set_reply(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let ticket = app.create_ticket(json!({"task": "what does it cost?"})).await;
    let key = ticket["key"].as_str().unwrap();
    let waiting = wait_status(&app, key, "waiting").await;
    assert_eq!(waiting["waiting_for"], "price", "{waiting}");
    let unpriced = event_data(&app, ticket["id"].as_str().unwrap(), "budget.unpriced").await;
    assert_eq!(unpriced, vec![json!({"model": "unpriced-model"})]);
    let (code, _) = app.put("/v1/prices/unpriced-*", json!({"input": 1, "output": 1})).await;
    assert_eq!(code, StatusCode::OK);
    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["usage"]["unpriced"], json!(false));
    // The threshold events of the agent's day: $10 is far away.
    assert!(event_data(&app, ticket["id"].as_str().unwrap(), "budget.threshold")
        .await
        .is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn thresholds_are_announced_once_each_on_the_ticket_that_crossed_them() {
    let (app, llm) = start().await;
    // The worst case of each request is its 5 output tokens: $0.005.
    app.put("/v1/agents/default", json!({"model": "house-model", "max_tokens": 5}))
        .await;
    app.put("/v1/prices/house-model", json!({"input": 0, "output": 1000}))
        .await;
    // Each reply costs 5 output tokens × $1000 per million = $0.005 of the $0.01 budget.
    llm.push(Reply::tool_call("read_tickets", json!({"action": "list"})).usage(10, 5));
    llm.push(Reply::tool_call("close_ticket", json!({"result": "ok"})).usage(10, 5));
    let (_, ticket) = app
        .post("/v1/tickets", json!({"task": "spend it", "budget_usd": 0.01}))
        .await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    assert_eq!(done["usage"]["cost_usd"], json!(0.01), "{done}");
    let percents: Vec<Value> = event_data(&app, ticket["id"].as_str().unwrap(), "budget.threshold")
        .await
        .into_iter()
        .map(|d| d["percent"].clone())
        .collect();
    assert_eq!(percents, vec![json!(50), json!(80), json!(100)]);
    app.shutdown().await;
}

/// Fifty tickets at once under one agent budget, worked by two worker processes: spending never
/// passes the budget, what did not fit waits for the budget, and a raise finishes them.
#[tokio::test]
async fn fifty_tickets_under_one_agent_budget_on_two_processes_never_overspend() {
    const TICKETS: usize = 50;
    let llm = FakeLlm::start().await;
    let api = TestApp::spawn_full(agentdesk::app::Mode::Api, agentdesk::llm::Providers::default(), |_| {}).await;
    api.put(
        "/v1/agents/default",
        json!({"model": "house-model", "provider": "openai", "max_tokens": 100, "budget_usd_per_day": 1}),
    )
    .await;
    // Each request costs 10 × $100 + 100 × $1000 per million = $0.101; its worst case (its
    // estimated input and 100 output tokens) somewhat more: the $1 budget runs out mid-way.
    api.put("/v1/prices/house-model", json!({"input": 100, "output": 1000}))
        .await;
    llm.set_reply(
        Reply::tool_call("close_ticket", json!({"result": "ok"}))
            .usage(10, 100)
            .chunk_delay(Duration::from_millis(20)),
    );
    let creates = (0..TICKETS).map(|i| api.create_ticket(json!({ "task": format!("spend {i}") })));
    let tickets: Vec<Value> = futures::future::join_all(creates).await;
    let mut workers = vec![];
    for _ in 0..2 {
        let database_url = api.database_url.clone();
        workers.push(
            TestApp::spawn_full(agentdesk::app::Mode::Worker, support::fake_providers(&llm), |c| {
                c.database_url = Some(database_url);
                c.workers = 25;
            })
            .await,
        );
    }
    let settled = |pool: sqlx::PgPool| async move {
        support::eventually("every ticket to end", WAIT, || async {
            let open: i64 = sqlx::query_scalar("SELECT count(*) FROM tickets WHERE status IN ('todo', 'in_progress')")
                .fetch_one(&pool)
                .await
                .unwrap();
            (open == 0).then_some(())
        })
        .await
    };
    settled(api.pool.clone()).await;
    let (spent, reserved, limit): (String, String, String) =
        sqlx::query_as("SELECT spent::text, reserved::text, limit_usd::text FROM budgets WHERE scope = 'agent'")
            .fetch_one(&api.pool)
            .await
            .unwrap();
    let (spent, reserved, limit): (f64, f64, f64) = (
        spent.parse().unwrap(),
        reserved.parse().unwrap(),
        limit.parse().unwrap(),
    );
    assert!(spent <= limit, "spent {spent} of {limit}");
    assert_eq!(reserved, 0.0, "every reservation settled");
    let mut done = 0;
    let mut waiting = 0;
    let mut total = 0.0;
    for t in &tickets {
        let (_, now) = api.get(&format!("/v1/tickets/{}", t["key"].as_str().unwrap())).await;
        match now["status"].as_str().unwrap() {
            "done" => {
                done += 1;
                total += dollars(&now["usage"]["cost_usd"]);
            }
            "waiting" => {
                waiting += 1;
                assert_eq!(now["waiting_for"], "budget", "{now}");
                let exhausted = event_data(&api, t["id"].as_str().unwrap(), "budget.exhausted").await;
                assert_eq!(exhausted.last().unwrap()["scope"], "agent");
                assert_eq!(exhausted.last().unwrap()["name"], "default");
            }
            other => panic!("{} is {other}", now["key"]),
        }
    }
    assert!(done > 0 && waiting > 0, "done {done}, waiting {waiting}");
    assert!(total <= 1.0 + 1e-9, "the tickets cost {total}");
    assert!(
        (total - spent).abs() < 1e-9,
        "the budget spent {spent}, the tickets cost {total}"
    );

    let (code, _) = api
        .put(
            "/v1/agents/default",
            json!({"model": "house-model", "provider": "openai", "max_tokens": 100, "budget_usd_per_day": 100}),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    for t in &tickets {
        wait_status(&api, t["key"].as_str().unwrap(), "done").await;
    }
    for worker in workers {
        worker.shutdown().await;
    }
    api.shutdown().await;
}

/// A day's spending stops the agent; when the UTC day rolls over, the tickets it stopped resume
/// by themselves against the new day's budget.
#[tokio::test]
async fn an_agents_new_day_resumes_what_its_daily_budget_stopped() {
    let (app, llm) = start().await;
    app.put(
        "/v1/agents/default",
        json!({"model": "house-model", "budget_usd_per_day": 1}),
    )
    .await;
    app.put("/v1/prices/house-model", json!({"input": 1, "output": 1}))
        .await;
    llm.set_reply(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    // Today's budget is spent already.
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    sqlx::query("INSERT INTO budgets (scope, name, period, limit_usd, spent) VALUES ('agent', 'default', $1, 1, 1)")
        .bind(&today)
        .execute(&app.pool)
        .await
        .unwrap();
    let ticket = app.create_ticket(json!({"task": "tomorrow"})).await;
    let key = ticket["key"].as_str().unwrap();
    let waiting = wait_status(&app, key, "waiting").await;
    assert_eq!(waiting["waiting_for"], "budget");
    // The clock moves on: what was today is yesterday, and the ticket was stopped then.
    sqlx::query("UPDATE budgets SET period = '2000-01-01' WHERE period = $1")
        .bind(&today)
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE tickets SET blocked_period = '2000-01-01' WHERE blocked_period = $1")
        .bind(&today)
        .execute(&app.pool)
        .await
        .unwrap();
    let done = wait_status(&app, key, "done").await;
    assert_eq!(done["waiting_for"], Value::Null);
    let requeued = event_data(&app, ticket["id"].as_str().unwrap(), "ticket.requeued").await;
    assert_eq!(requeued, vec![json!({"reason": "budget"})]);
    app.shutdown().await;
}

/// What a claim reserved and never settled (its worker died between the two) is given back once
/// the claim has ended.
#[tokio::test]
async fn a_reservation_of_an_ended_claim_is_given_back() {
    let app = TestApp::spawn().await;
    let ticket = app.create_ticket(json!({"task": "orphan"})).await;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO budgets (scope, name, period, limit_usd, reserved) VALUES ('agent', 'gone', 'x', 1, 0.75)
         RETURNING id",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO budget_reservations (ticket_id, generation, budget_id, amount) VALUES ($1::uuid, 7, $2, 0.5)",
    )
    .bind(ticket["id"].as_str().unwrap())
    .bind(id)
    .execute(&app.pool)
    .await
    .unwrap();
    // The ticket is not in progress under generation 7: the claim is over.
    assert_eq!(agentdesk::db::budgets::release_orphans(&app.pool).await.unwrap(), 1);
    let reserved: String = sqlx::query_scalar("SELECT reserved::text FROM budgets WHERE id = $1")
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(reserved.parse::<f64>().unwrap(), 0.25);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM budget_reservations")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    app.shutdown().await;
}

/// A ticket that waits for a person says so: a question (a text reply) is `human`.
#[tokio::test]
async fn a_ticket_waiting_for_a_reply_waits_for_a_human() {
    let (app, llm) = start().await;
    llm.push(Reply::text("Which year do you mean?"));
    let ticket = app.create_ticket(json!({"task": "When was it?"})).await;
    let waiting = wait_status(&app, ticket["key"].as_str().unwrap(), "waiting").await;
    assert_eq!(waiting["waiting_for"], "human", "{waiting}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_failed_request_that_used_tokens_costs_money_in_the_metric_too() {
    let (app, llm) = start().await;
    app.put("/v1/agents/default", json!({"model": "metered-failures"}))
        .await;
    app.put("/v1/prices/metered-failures", json!({"input": 1000, "output": 1000}))
        .await;
    // An empty reply that reported its tokens, then an answer.
    llm.push(Reply::text(" ").usage(500, 0));
    llm.push(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let ticket = app.create_ticket(json!({"task": "retry me"})).await;
    let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
    let total = dollars(&done["usage"]["cost_usd"]);
    let finished = event_data(&app, done["id"].as_str().unwrap(), "request.finished").await;
    let answered = dollars(&finished[0]["cost_usd"]);
    assert!(total > answered, "the failed request's tokens cost too: {done}");
    let metrics = app
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let metered: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("agentdesk_cost_usd_total{") && l.contains("model=\"metered-failures\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        (metered - total).abs() < 1e-9,
        "metric {metered} against the ticket's {total}"
    );
    app.shutdown().await;
}

/// A daily budget (or a project's money quota) set during the day counts what the day spent
/// before it was set.
#[tokio::test]
async fn a_budget_set_during_its_day_counts_the_days_earlier_spending() {
    let (app, llm) = start().await;
    app.put("/v1/agents/default", json!({"model": "house-model", "max_tokens": 100}))
        .await;
    app.put("/v1/prices/house-model", json!({"input": 1000, "output": 1000}))
        .await;
    llm.set_reply(Reply::tool_call("close_ticket", json!({"result": "ok"})));
    let mut costs = vec![];
    let mut run = async |task: &str| {
        let ticket = app.create_ticket(json!({"task": task})).await;
        let done = wait_status(&app, ticket["key"].as_str().unwrap(), "done").await;
        costs.push(dollars(&done["usage"]["cost_usd"]));
    };
    run("before any budget").await;
    app.put(
        "/v1/agents/default",
        json!({"model": "house-model", "max_tokens": 100, "budget_usd_per_day": 100}),
    )
    .await;
    run("under the agent's budget").await;
    let (code, project) = app
        .patch("/v1/projects/default", json!({"quotas": {"cost_usd_per_day": 100}}))
        .await;
    assert_eq!(code, StatusCode::OK, "{project}");
    run("under the project's quota too").await;
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let spent = |name: &'static str| {
        let (pool, today) = (app.pool.clone(), today.clone());
        async move {
            let text: String = sqlx::query_scalar("SELECT spent::text FROM budgets WHERE name = $1 AND period = $2")
                .bind(name)
                .bind(today)
                .fetch_one(&pool)
                .await
                .unwrap();
            text.parse::<f64>().unwrap()
        }
    };
    let total: f64 = costs.iter().sum();
    assert!(costs.iter().all(|c| *c > 0.0), "{costs:?}");
    assert!(
        (spent("default").await - total).abs() < 1e-9,
        "the agent's day counts all three"
    );
    assert!(
        (spent("1/cost_usd_per_day").await - total).abs() < 1e-9,
        "so does the project's"
    );
    app.shutdown().await;
}
