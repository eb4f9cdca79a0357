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

/// The request a web page can send to a desk on the laptop it is shown on, without a preflight:
/// a `text/plain` POST from its own origin, through a host name of its own that resolves to
/// 127.0.0.1 (DNS rebinding). Each of the three rules refuses it alone, and nothing is written.
#[tokio::test]
async fn a_web_page_cannot_use_a_desk_without_tokens() {
    let app = TestApp::spawn().await;
    let port = app.url.rsplit(':').next().unwrap().to_owned();
    let local = format!("127.0.0.1:{port}");
    let before = app.counts().await;
    let post = |host: &str, origin: Option<&str>, content_type: &str| {
        let mut request = app
            .client
            .post(app.endpoint("/v1/tickets"))
            .header("host", host)
            .header("content-type", content_type)
            .body(r#"{"task": "run my tools"}"#);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        send(request)
    };
    let evil = "http://evil.example.com";
    for (host, origin, content_type, status) in [
        // The attack as a browser sends it, then each rule alone.
        ("evil.example.com", Some(evil), "text/plain", StatusCode::FORBIDDEN),
        ("evil.example.com:8080", None, "application/json", StatusCode::FORBIDDEN),
        (local.as_str(), Some(evil), "application/json", StatusCode::FORBIDDEN),
        (local.as_str(), Some("null"), "application/json", StatusCode::FORBIDDEN),
        (
            local.as_str(),
            None,
            "text/plain;charset=UTF-8",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            local.as_str(),
            None,
            "application/x-www-form-urlencoded",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            local.as_str(),
            None,
            "multipart/form-data; boundary=x",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
    ] {
        let (answer_status, body) = post(host, origin, content_type).await;
        assert_eq!(
            answer_status, status,
            "Host {host}, Origin {origin:?}, {content_type}: {body}"
        );
        let code = if status == StatusCode::FORBIDDEN {
            "forbidden"
        } else {
            "unsupported_media_type"
        };
        assert_eq!(body["error"]["code"], code, "{body}");
    }
    assert_eq!(app.counts().await, before, "a refused request writes nothing");

    // A read from another page passes (the browser keeps the answer from it); a foreign Host does not.
    let get = |host: &str| {
        send(
            app.client
                .get(app.endpoint("/v1/tickets"))
                .header("host", host)
                .header("origin", evil),
        )
    };
    assert_eq!(get(&local).await.0, StatusCode::OK);
    let (status, body) = get("evil.example.com").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("AGENTDESK_ALLOWED_HOSTS") && message.contains("evil.example.com"),
        "{message}"
    );

    // The board's own pages, programs (no Origin, JSON declared or not) and localhost pass.
    let own = format!("http://{local}");
    for (host, origin, content_type) in [
        (local.as_str(), Some(own.as_str()), "application/json"),
        (local.as_str(), None, "application/json; charset=utf-8"),
        ("localhost", None, "application/json"),
        (&*format!("[::1]:{port}"), None, "application/json"),
    ] {
        let (status, body) = post(host, origin, content_type).await;
        assert_eq!(status, StatusCode::CREATED, "Host {host}, Origin {origin:?}: {body}");
    }
    let (status, _) = send(app.client.post(app.endpoint("/v1/tickets")).body(r#"{"task": "x"}"#)).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "a body without a declared type is read as JSON"
    );

    // `/mcp` checks the Origin of every request, as the MCP transport asks.
    let (status, _) = send(
        app.client
            .get(app.endpoint("/mcp"))
            .header("accept", "text/event-stream")
            .header("origin", evil),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}}});
    let (status, _) = send(
        app.client
            .post(app.endpoint("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("origin", evil)
            .json(&initialize),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// `AGENTDESK_ALLOWED_HOSTS` and `AGENTDESK_PUBLIC_URL` name more hosts for a desk without tokens;
/// with tokens, any host may be used (the bearer header is what a page cannot send), and bodies
/// are still JSON only.
#[tokio::test]
async fn allowed_hosts_the_public_url_and_tokens_open_other_host_names() {
    let app = TestApp::spawn_with(|c| {
        c.allowed_hosts = vec!["desk.lan".into(), ".corp.example".into()];
        c.public_url = Some("https://desk.example.com".into());
    })
    .await;
    let get = |host: &'static str| send(app.client.get(app.endpoint("/v1/tickets")).header("host", host));
    for host in ["desk.lan:8080", "a.corp.example", "desk.example.com", "DESK.LAN"] {
        assert_eq!(get(host).await.0, StatusCode::OK, "{host}");
    }
    for host in ["other.lan", "corp.example.evil.com"] {
        assert_eq!(get(host).await.0, StatusCode::FORBIDDEN, "{host}");
    }
    let (status, _) = send(
        app.client
            .post(app.endpoint("/v1/tickets"))
            .header("origin", "https://desk.example.com")
            .json(&json!({"task": "from the public page"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);

    let guarded = TestApp::spawn_with(|c| c.api_tokens = vec!["secret".into()]).await;
    let post = |content_type: &'static str| {
        send(
            guarded
                .request(reqwest::Method::POST, "/v1/tickets")
                .header("host", "desk.example.net")
                .header("origin", "https://elsewhere.example.net")
                .header("content-type", content_type)
                .body(r#"{"task": "x"}"#),
        )
    };
    assert_eq!(post("application/json").await.0, StatusCode::CREATED);
    assert_eq!(post("text/plain").await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
}
