//! Safe defaults: a loopback address without tokens, no open API on the network unless asked
//! for, read-only tokens, and settings that cannot make a loop spin.

mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentdesk::app::Mode;
use agentdesk::config::Config;
use serde_json::json;
use sqlx::Connection;
use support::{send, StatusCode, TestApp};

fn config(vars: &[(&str, &str)]) -> Result<Config, String> {
    Config::from_lookup(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
}

#[test]
fn without_tokens_the_default_address_is_loopback_and_with_tokens_all_interfaces() {
    let open = config(&[]).unwrap();
    assert_eq!(open.addr, "127.0.0.1:8080".parse::<SocketAddr>().unwrap());
    assert!(open.check_exposure().is_ok());
    let guarded = config(&[("AGENTDESK_API_TOKENS", "t1")]).unwrap();
    assert_eq!(guarded.addr, "0.0.0.0:8080".parse::<SocketAddr>().unwrap());
    assert!(guarded.check_exposure().is_ok());
}

#[test]
fn an_open_api_on_the_network_is_refused_unless_allowed() {
    let exposed = config(&[("AGENTDESK_ADDR", "0.0.0.0:8080")]).unwrap();
    let message = exposed.check_exposure().unwrap_err();
    assert!(!message.contains('\n'), "one line: {message}");
    assert!(message.contains("AGENTDESK_API_TOKENS") && message.contains("AGENTDESK_ALLOW_NO_AUTH=true"));
    let allowed = config(&[("AGENTDESK_ADDR", "0.0.0.0:8080"), ("AGENTDESK_ALLOW_NO_AUTH", "true")]).unwrap();
    assert!(allowed.check_exposure().is_ok());
    let only_read = config(&[("AGENTDESK_ADDR", "[::]:8080"), ("AGENTDESK_API_TOKENS", "read:x")]).unwrap();
    assert!(only_read.check_exposure().is_ok());
    let loopback6 = config(&[("AGENTDESK_ADDR", "[::1]:8080")]).unwrap();
    assert!(loopback6.check_exposure().is_ok());
}

#[test]
fn the_binary_refuses_to_serve_an_open_api_on_the_network_in_one_line() {
    let output = Command::new(env!("CARGO_BIN_EXE_agentdesk"))
        .arg("api")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AGENTDESK_ADDR", "0.0.0.0:0")
        // Never reached: the check comes before the database.
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .output()
        .expect("run the agentdesk binary");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("AGENTDESK_API_TOKENS") && lines[0].contains("AGENTDESK_ALLOW_NO_AUTH=true"));
}

#[test]
fn zero_and_tiny_durations_and_sizes_are_refused_naming_the_variable() {
    for (name, value) in [
        ("AGENTDESK_LEASE_SECS", "0"),
        ("AGENTDESK_LEASE_SECS", "0.001"),
        ("AGENTDESK_STREAM_IDLE_SECS", "1e-9"),
        ("AGENTDESK_SSE_PING_SECS", "0.0001"),
        ("AGENTDESK_SHUTDOWN_GRACE_SECS", "0"),
        ("AGENTDESK_LEASE_SECS", "NaN"),
        ("AGENTDESK_LEASE_SECS", "inf"),
        ("AGENTDESK_DB_MAX_CONNECTIONS", "0"),
        ("AGENTDESK_RUNTIME_THREADS", "0"),
        ("AGENTDESK_RUNTIME_THREADS", "-2"),
        ("AGENTDESK_RUNTIME_THREADS", "100000"),
        ("AGENTDESK_CLAIMERS", "0"),
        ("AGENTDESK_CLAIMERS", "1000"),
        ("AGENTDESK_ALLOW_NO_AUTH", "maybe"),
        ("AGENTDESK_REQUEST_TIMEOUT_SECS", "0"),
        ("AGENTDESK_REQUEST_TIMEOUT_SECS", "0.01"),
        ("AGENTDESK_WEBHOOK_CONCURRENCY", "0"),
        ("AGENTDESK_WEBHOOK_TIMEOUT_SECS", "-1"),
    ] {
        let err = config(&[(name, value)])
            .err()
            .unwrap_or_else(|| panic!("{name}={value} accepted"));
        assert!(err.contains(name), "{err}");
    }
    assert_eq!(
        config(&[("AGENTDESK_LEASE_SECS", "0.5")]).unwrap().lease,
        Duration::from_millis(500)
    );
}

#[tokio::test]
async fn a_read_token_may_get_and_stream_but_anything_else_is_forbidden() {
    let app = TestApp::spawn_with(|c| c.api_tokens = vec!["full".into(), "read:viewer".into()]).await;
    let client = reqwest::Client::new();
    let (status, ticket) = send(
        client
            .post(app.endpoint("/v1/tickets"))
            .bearer_auth("full")
            .json(&json!({"task": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let key = ticket["key"].as_str().unwrap();

    let (status, _) = send(
        client
            .get(app.endpoint(&format!("/v1/tickets/{key}")))
            .bearer_auth("viewer"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let stream = client
        .get(app.endpoint(&format!("/v1/tickets/{key}/events")))
        .bearer_auth("viewer")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    drop(stream);

    let before = app.counts().await;
    for (method, path) in [
        (reqwest::Method::POST, "/v1/tickets".to_owned()),
        (reqwest::Method::PATCH, format!("/v1/tickets/{key}")),
        (reqwest::Method::POST, format!("/v1/tickets/{key}/cancel")),
        (reqwest::Method::POST, format!("/v1/tickets/{key}/comments")),
        (reqwest::Method::PUT, "/v1/agents/x".to_owned()),
        (reqwest::Method::DELETE, "/v1/agents/x".to_owned()),
    ] {
        let request = client
            .request(method.clone(), app.endpoint(&path))
            .bearer_auth("viewer")
            .json(&json!({"task": "y", "text": "y", "model": "m"}));
        let (status, body) = send(request).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}");
        assert_eq!(body["error"]["code"], "forbidden");
    }
    assert_eq!(app.counts().await, before, "a forbidden request changes nothing");
    // The scope prefix is not part of the token.
    let (status, _) = send(client.get(app.endpoint("/v1/tickets")).bearer_auth("read:viewer")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A request held up (here by a lock on the tickets table) is answered 503 `timeout` once
/// `AGENTDESK_REQUEST_TIMEOUT_SECS` has passed, and the service answers normally once the hold
/// is gone; event streams are not cut off.
#[tokio::test]
async fn a_request_that_takes_too_long_is_answered_503_but_streams_stay_open() {
    // No workers: the ticket stays queued until it is cancelled.
    let app = TestApp::spawn_mode(Mode::Api, |c| c.request_timeout = Duration::from_millis(700)).await;
    let ticket = app.create_ticket(json!({"task": "before the lock"})).await;
    let mut stream = app.sse("/v1/events", None).await;
    assert!(stream.wait_ready(Duration::from_secs(5)).await);

    let mut locker = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
    sqlx::query("begin").execute(&mut locker).await.unwrap();
    sqlx::query("lock table tickets in access exclusive mode")
        .execute(&mut locker)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let answer = app.get("/v1/tickets").await;
    let took = started.elapsed();
    support::assert_error(&answer, StatusCode::SERVICE_UNAVAILABLE, "timeout");
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(5),
        "{took:?}"
    );
    sqlx::query("rollback").execute(&mut locker).await.unwrap();

    let (status, page) = app.get("/v1/tickets").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["items"][0]["id"], ticket["id"]);
    // The stream outlived the limit and still carries events.
    let (status, _) = app
        .post(
            &format!("/v1/tickets/{}/cancel", ticket["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let seen = stream
        .collect_until(|e| e.kind() == "ticket.cancelled", Duration::from_secs(10))
        .await;
    assert!(seen.iter().any(|e| e.kind() == "ticket.cancelled"), "{seen:?}");
    app.shutdown().await;
}

/// Headers are bounded: over 32 KiB of them is 431 `headers_too_large`, too many of them is 431
/// from the connection layer, and neither disturbs the next request.
#[tokio::test]
async fn oversized_headers_are_refused_with_431() {
    let app = TestApp::spawn_mode(Mode::Api, |_| {}).await;
    let big = "x".repeat(40 * 1024);
    let answer = send(app.request(reqwest::Method::GET, "/v1/tickets").header("x-big", big)).await;
    support::assert_error(
        &answer,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers_too_large",
    );
    let mut many = app.request(reqwest::Method::GET, "/v1/tickets");
    for i in 0..150 {
        many = many.header(format!("x-h{i}"), "1");
    }
    let status = many.send().await.map(|r| r.status());
    assert!(
        matches!(status, Ok(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)) || status.is_err(),
        "{status:?}"
    );
    let (status, _) = app.get("/v1/tickets").await;
    assert_eq!(status, StatusCode::OK);
    app.shutdown().await;
}
