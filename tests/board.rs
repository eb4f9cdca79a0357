//! The board in a real browser: headless Chromium (Debian's `chromium` and `chromium-driver`)
//! against the service on a real port, with the fake model server streaming slowly behind it.
//! Screenshots land in `target/board-screenshots/`. Any error the page logs fails the test. The
//! API reference at `/docs` is opened here too, in a browser that can reach only this machine.

mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use support::{wait_status, TestApp};
use testkit::fake_llm::{FakeLlm, Reply};
use webdriver::{require_browser, Browser};

const WAIT: Duration = Duration::from_secs(30);

fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/board-screenshots")
        .join(name)
}

/// Answers by task: a quick close, a slow stream that then closes, and a stream too slow to finish.
fn scripted_model() -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    |request: &Value| {
        let text = request.to_string();
        if text.contains("slow stream") {
            Reply::tool_call("close_ticket", json!({ "result": "streamed to the end" }))
                .with_thinking("Let me count the words first.", "sig-1")
                .tokens_per_second(4, 24)
        } else if text.contains("which unit") {
            Reply::text("Celsius or Fahrenheit?")
        } else if text.contains("never ends") {
            Reply::text("unused").tokens_per_second(2, 400)
        } else {
            Reply::tool_call("close_ticket", json!({ "result": { "answer": 42 } }))
                .with_text("Six times seven is forty-two.")
                .chunk_delay(Duration::from_millis(300))
        }
    }
}

/// The page's current document has logged no errors.
async fn assert_no_page_errors(browser: &Browser) {
    let errors = browser.page_errors().await.expect("read the page's errors");
    assert!(errors.is_empty(), "the board logged errors: {errors:#?}");
}

/// Waits until `script` (a function body) returns a truthy value on the page; returns it.
async fn wait(browser: &Browser, what: &str, script: &str) -> Value {
    browser.wait_for(what, script, WAIT).await.unwrap()
}

/// Waits until the element `#id` (a button) is on the page and not hidden.
async fn shown(browser: &Browser, id: &str) {
    let script = format!("const b = document.getElementById('{id}'); return !!b && !b.hidden");
    wait(browser, &format!("the {id} button"), &script).await;
}

async fn show(browser: &Browser, hash: &str) {
    // A hash change keeps the document, so its error log covers the whole visit.
    browser
        .execute("location.hash = arguments[0]", vec![json!(hash)])
        .await
        .expect("navigate");
}

/// Fills the create form and submits it.
async fn create_through_the_form(browser: &Browser, task: &str, labels: &str) {
    browser.type_into("#new-task", task).await.unwrap();
    if !labels.is_empty() {
        browser.type_into("#new-labels", labels).await.unwrap();
    }
    browser.click("#new-submit").await.unwrap();
}

async fn wait_for_card(browser: &Browser, column: &str, key: &str) {
    let script = format!("return !!document.querySelector('[data-column=\"{column}\"] [data-key=\"{key}\"]')");
    wait(browser, &format!("{key} in the {column} column"), &script).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium and chromium-driver: cargo test --test board -- --ignored"]
async fn the_board_follows_tickets_live_streams_text_and_cancels_in_flight() {
    require_browser();
    let llm = FakeLlm::start().await;
    llm.set_responder(scripted_model());
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    let browser = Browser::start(1400, 900).await.expect("start Chromium");

    // The board, live: a ticket created through the form moves to done without a reload.
    browser.goto(&format!("{}/", app.url)).await.unwrap();
    wait(
        &browser,
        "the live stream",
        "return document.getElementById('live').dataset.state === 'open'",
    )
    .await;
    browser.execute("window.__sameDocument = true", vec![]).await.unwrap();
    create_through_the_form(&browser, "What is six times seven?", "default, maths").await;
    wait_for_card(&browser, "done", "TICKET-1").await;
    let ticket = app.get("/v1/tickets/TICKET-1").await.1;
    assert_eq!(ticket["status"], "done");
    assert!(
        ticket["labels"].as_array().unwrap().contains(&json!("maths")),
        "{ticket}"
    );
    let same = browser
        .execute("return window.__sameDocument === true", vec![])
        .await
        .unwrap();
    assert_eq!(same, json!(true), "the board reloaded instead of moving the card live");
    browser.screenshot(&screenshot_path("board.png")).await.unwrap();

    // A ticket page shows the model's text while it streams, then the transcript once done.
    // Labelled for nobody until the page follows it, so that it sees every delta.
    let streaming = app
        .create_ticket(json!({ "task": "Tell me in a slow stream", "labels": ["later"] }))
        .await;
    let key = streaming["key"].as_str().unwrap().to_owned();
    show(&browser, &format!("#/tickets/{key}")).await;
    // The page opens the ticket's stream after it has loaded the transcript, and the indicator
    // may still show the board's stream: a replayed event in the page's log is the sign that the
    // ticket's stream is open, so that no live delta goes by before it.
    wait(
        &browser,
        "the ticket's stream",
        "return !!document.getElementById('ticket-status') && document.getElementById('live').dataset.state === 'open' \
         && document.querySelectorAll('.event-log .events li').length > 0",
    )
    .await;
    let (status, _) = app
        .patch(&format!("/v1/tickets/{key}"), json!({ "labels": ["default"] }))
        .await;
    assert_eq!(status, 200);
    let partial = wait(
        &browser,
        "streamed text",
        "const t = document.getElementById('live-text'); return t && t.textContent",
    )
    .await;
    assert!(partial.as_str().unwrap().starts_with("the "), "{partial}");
    let now = app.get(&format!("/v1/tickets/{key}")).await.1;
    assert_eq!(now["status"], "in_progress", "the text arrived only at the end");
    let thinking = browser
        .execute("return document.getElementById('live-thinking')?.textContent", vec![])
        .await
        .unwrap();
    assert_eq!(thinking, json!("Let me count the words first."));
    browser
        .screenshot(&screenshot_path("ticket-streaming.png"))
        .await
        .unwrap();
    wait(
        &browser,
        "the ticket to be done",
        "return document.getElementById('ticket-status')?.textContent === 'done'",
    )
    .await;
    let transcript = browser
        .wait_for(
            "the transcript with the streamed text and the tool call",
            "const t = document.querySelector('.transcript').textContent; \
             return t.includes('close_ticket') && t.includes('the agent reads a ticket') && t",
            WAIT,
        )
        .await
        .unwrap();
    assert!(transcript.as_str().unwrap().contains("Tell me in a slow stream"));
    let result = browser
        .execute("return document.getElementById('ticket-result').textContent", vec![])
        .await
        .unwrap();
    assert_eq!(result, json!("streamed to the end"));
    let usage = browser
        .execute("return document.getElementById('ticket-usage').textContent", vec![])
        .await
        .unwrap();
    assert!(usage.as_str().unwrap().contains("1 request "), "{usage}");
    browser.screenshot(&screenshot_path("ticket-done.png")).await.unwrap();

    // Cancel a ticket while its model is still streaming.
    let endless = app.create_ticket(json!({ "task": "A story that never ends" })).await;
    let key = endless["key"].as_str().unwrap().to_owned();
    show(&browser, &format!("#/tickets/{key}")).await;
    wait(
        &browser,
        "the endless stream",
        "const t = document.getElementById('live-text'); return t && t.textContent.length > 0",
    )
    .await;
    shown(&browser, "cancel").await;
    browser.click("#cancel").await.unwrap();
    wait(
        &browser,
        "the ticket to show cancelled",
        "return document.getElementById('ticket-status')?.textContent === 'cancelled'",
    )
    .await;
    wait_status(&app, &key, "cancelled").await;
    shown(&browser, "retry").await;

    // Back on the board, every ticket stands in its column: one waiting for an answer, one no
    // agent takes, one in flight.
    show(&browser, "#/").await;
    wait_for_card(&browser, "cancelled", &key).await;
    wait_for_card(&browser, "done", "TICKET-2").await;
    let question = app
        .create_ticket(json!({ "task": "Boiling point of water, which unit?" }))
        .await;
    let unrouted = app
        .create_ticket(json!({ "task": "Translate the README", "labels": ["translator"] }))
        .await;
    let running = app.create_ticket(json!({ "task": "A summary that never ends" })).await;
    wait_for_card(&browser, "waiting", question["key"].as_str().unwrap()).await;
    wait_for_card(&browser, "todo", unrouted["key"].as_str().unwrap()).await;
    wait_for_card(&browser, "in_progress", running["key"].as_str().unwrap()).await;
    wait(
        &browser,
        "the stats strip to catch up",
        "return document.querySelector('[data-stat=\"in_progress\"] b')?.textContent === '1'",
    )
    .await;
    browser
        .screenshot(&screenshot_path("board-overview.png"))
        .await
        .unwrap();

    // The agents page: create one through its form.
    show(&browser, "#/agents").await;
    wait(
        &browser,
        "the default agent",
        "return !!document.querySelector('[data-agent=\"default\"]')",
    )
    .await;
    browser.click("#new-agent").await.unwrap();
    browser.type_into("#agent-name", "writer").await.unwrap();
    browser.type_into("#agent-role", "You write.").await.unwrap();
    browser.type_into("#agent-labels", "docs").await.unwrap();
    browser.click("#agent-save").await.unwrap();
    wait(
        &browser,
        "the new agent",
        "return !!document.querySelector('[data-agent=\"writer\"]')",
    )
    .await;
    let writer = app.get("/v1/agents/writer").await;
    assert_eq!(writer.0, 200, "{writer:?}");
    assert_eq!(writer.1["role"], "You write.");
    assert_eq!(writer.1["labels"], json!(["docs"]));
    // Edit it: the form comes filled in, and saving replaces the agent.
    browser.click("[data-agent=\"writer\"] button").await.unwrap();
    let role = wait(
        &browser,
        "the filled-in form",
        "const r = document.getElementById('agent-role'); return r && r.value",
    )
    .await;
    assert_eq!(role, json!("You write."));
    browser
        .execute("document.getElementById('agent-role').value = ''", vec![])
        .await
        .unwrap();
    browser.type_into("#agent-role", "You write the docs.").await.unwrap();
    browser.click("#agent-save").await.unwrap();
    wait(
        &browser,
        "the editor to close",
        "return !document.getElementById('agent-role')",
    )
    .await;
    let writer = app.get("/v1/agents/writer").await.1;
    assert_eq!(writer["role"], "You write the docs.");
    assert_eq!(writer["labels"], json!(["docs"]));
    browser.screenshot(&screenshot_path("agents.png")).await.unwrap();

    // Comment on the waiting ticket from its page: it goes back to the agent.
    let question_key = question["key"].as_str().unwrap().to_owned();
    show(&browser, &format!("#/tickets/{question_key}")).await;
    wait(
        &browser,
        "the waiting ticket's page",
        "return document.getElementById('ticket-status')?.textContent === 'waiting'",
    )
    .await;
    browser.type_into("#comment-text", "In Celsius, please.").await.unwrap();
    browser.click("#comment-send").await.unwrap();
    wait(
        &browser,
        "the comment in the transcript",
        "return document.querySelector('.transcript').textContent.includes('In Celsius, please.')",
    )
    .await;
    let comments = app.list_all(&format!("/v1/tickets/{question_key}/comments")).await;
    assert!(
        comments
            .iter()
            .any(|c| c["content"][0]["text"] == "In Celsius, please."),
        "{comments:?}"
    );

    // Retry the cancelled ticket from its page.
    show(&browser, &format!("#/tickets/{key}")).await;
    shown(&browser, "retry").await;
    browser.click("#retry").await.unwrap();
    wait(
        &browser,
        "the retried ticket to be queued or worked",
        "const s = document.getElementById('ticket-status')?.textContent; return s === 'todo' || s === 'in progress'",
    )
    .await;
    let retried = app.get(&format!("/v1/tickets/{key}")).await.1;
    assert!(
        ["todo", "in_progress"].contains(&retried["status"].as_str().unwrap()),
        "{retried}"
    );

    show(&browser, "#/").await;
    // A ticket no agent takes says so on its card and its page.
    let stray = app
        .create_ticket(json!({"task": "nobody's", "labels": ["nobody-takes-this"]}))
        .await;
    let stray_key = stray["key"].as_str().unwrap();
    wait(
        &browser,
        "the warning on the card of a ticket no agent takes",
        &format!("return !!document.querySelector('[data-key=\"{stray_key}\"] .unrouted')"),
    )
    .await;
    show(&browser, &format!("#/tickets/{stray_key}")).await;
    wait(
        &browser,
        "the warning on its page",
        "return !!document.getElementById('ticket-unrouted')",
    )
    .await;
    app.post(&format!("/v1/tickets/{stray_key}/cancel"), json!({})).await;
    show(&browser, "#/").await;

    // A thousand tickets: the columns load a page at a time and show more on demand.
    assert_no_page_errors(&browser).await;
    futures::stream::iter(0..1000)
        .for_each_concurrent(16, |i| {
            let app = &app;
            async move {
                app.create_ticket(json!({ "task": format!("Backlog item {i}"), "labels": ["backlog"] }))
                    .await;
            }
        })
        .await;
    let started = std::time::Instant::now();
    browser.goto(&format!("{}/", app.url)).await.unwrap();
    let cards = "return document.querySelectorAll('[data-column=\"todo\"] .card').length";
    browser
        .wait_for("the first page of the todo column", &format!("{cards} === 50"), WAIT)
        .await
        .unwrap();
    let loaded_in = started.elapsed();
    assert!(
        loaded_in < Duration::from_secs(10),
        "the board took {loaded_in:?} to show 1000 tickets"
    );
    browser.click("[data-column=\"todo\"] .more button").await.unwrap();
    browser
        .wait_for("the second page of the todo column", &format!("{cards} === 100"), WAIT)
        .await
        .unwrap();
    let count = browser
        .execute(
            "return document.querySelector('[data-column=\"todo\"] .count').textContent",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(count, json!("1001"), "the count of the todo column");

    // Dark mode.
    browser.color_scheme("dark").await.unwrap();
    show(&browser, "#/tickets/TICKET-2").await;
    wait(
        &browser,
        "the transcript",
        "return document.querySelectorAll('.comment').length >= 3",
    )
    .await;
    browser.screenshot(&screenshot_path("ticket-dark.png")).await.unwrap();
    show(&browser, "#/").await;
    wait_for_card(&browser, "done", "TICKET-1").await;
    browser.screenshot(&screenshot_path("board-dark.png")).await.unwrap();

    assert_no_page_errors(&browser).await;
    browser.close().await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium and chromium-driver: cargo test --test board -- --ignored"]
async fn with_tokens_the_board_asks_for_one_and_streams_with_it_in_a_header() {
    require_browser();
    let llm = FakeLlm::start().await;
    llm.set_responder(scripted_model());
    let app = TestApp::spawn_with_llm(&llm, |c| c.api_tokens = vec!["board-secret".into()]).await;
    let browser = Browser::start(1200, 800).await.expect("start Chromium");

    browser.goto(&format!("{}/", app.url)).await.unwrap();
    wait(
        &browser,
        "the token prompt",
        "return document.getElementById('token-dialog').open",
    )
    .await;
    browser.screenshot(&screenshot_path("token-prompt.png")).await.unwrap();
    // A wrong token is refused and the prompt stays.
    browser.type_into("#token-input", "wrong").await.unwrap();
    browser.click("#token-form button[type=submit]").await.unwrap();
    wait(
        &browser,
        "the refusal",
        "return document.getElementById('token-error').textContent.includes('refused')",
    )
    .await;
    browser
        .execute("document.getElementById('token-input').value = ''", vec![])
        .await
        .unwrap();
    browser.type_into("#token-input", "board-secret").await.unwrap();
    browser.click("#token-form button[type=submit]").await.unwrap();
    wait(
        &browser,
        "the live stream",
        "return document.getElementById('live').dataset.state === 'open'",
    )
    .await;

    create_through_the_form(&browser, "What is six times seven, with a token?", "").await;
    wait_for_card(&browser, "done", "TICKET-1").await;
    show(&browser, "#/tickets/TICKET-1").await;
    wait(
        &browser,
        "the ticket's events over the stream",
        "return [...document.querySelectorAll('.events strong')].some(e => e.textContent === 'ticket.done')",
    )
    .await;

    let stored = browser
        .execute("return localStorage.getItem('agentdesk.token')", vec![])
        .await
        .unwrap();
    assert_eq!(stored, json!("board-secret"));
    // The token travels in headers only: no URL the page fetched holds it.
    let urls = browser
        .execute(
            "return performance.getEntriesByType('resource').map(e => e.name)",
            vec![],
        )
        .await
        .unwrap();
    let urls: Vec<String> = serde_json::from_value(urls).unwrap();
    assert!(urls.iter().any(|u| u.contains("/v1/events")), "{urls:?}");
    assert!(urls.iter().all(|u| !u.contains("board-secret")), "{urls:?}");

    // A reload keeps the token: no prompt, the board loads.
    browser.goto(&format!("{}/", app.url)).await.unwrap();
    wait_for_card(&browser, "done", "TICKET-1").await;
    let prompt = browser
        .execute("return document.getElementById('token-dialog').open", vec![])
        .await
        .unwrap();
    assert_eq!(prompt, json!(false));

    // A second project: the desk token picks it in the switcher, and the board shows its tickets.
    let (status, _) = app
        .post("/v1/projects", json!({"name": "ops", "key_prefix": "OPS"}))
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED);
    let (status, _) = support::send(
        app.client
            .post(app.endpoint("/v1/tickets"))
            .bearer_auth("board-secret")
            .header("AgentDesk-Project", "ops")
            .json(&json!({"task": "an ops ticket nobody takes"})),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::CREATED);
    browser.goto(&format!("{}/", app.url)).await.unwrap();
    wait(
        &browser,
        "the project switcher",
        "const s = document.getElementById('project'); return !s.parentElement.hidden && s.options.length === 2",
    )
    .await;
    browser
        .execute(
            "const s = document.getElementById('project'); s.value = 'ops'; s.dispatchEvent(new Event('change'))",
            vec![],
        )
        .await
        .unwrap();
    wait_for_card(&browser, "todo", "OPS-1").await;
    let others = browser
        .execute("return !!document.querySelector('[data-key=\"TICKET-1\"]')", vec![])
        .await
        .unwrap();
    assert_eq!(others, json!(false), "the other project's tickets are not on its board");
    browser
        .screenshot(&screenshot_path("project-switcher.png"))
        .await
        .unwrap();

    // A project token shows its project's name instead of a switcher.
    let (_, created) = app
        .post("/v1/projects/ops/tokens", json!({"name": "board", "scopes": ["read"]}))
        .await;
    let project_token = created["token"].as_str().unwrap().to_owned();
    browser
        .execute(
            "localStorage.setItem('agentdesk.token', arguments[0]); localStorage.removeItem('agentdesk.project')",
            vec![json!(project_token)],
        )
        .await
        .unwrap();
    browser.goto(&format!("{}/", app.url)).await.unwrap();
    wait_for_card(&browser, "todo", "OPS-1").await;
    wait(
        &browser,
        "the project token's project",
        "const n = document.getElementById('project-name'); return !n.hidden && n.textContent === 'ops' && document.getElementById('project').parentElement.hidden",
    )
    .await;

    assert_no_page_errors(&browser).await;
    browser.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn the_board_is_served_from_the_binary_without_a_token() {
    let app = TestApp::spawn_with(|c| c.api_tokens = vec!["board-secret".into()]).await;
    let plain = reqwest::Client::new();
    let page = plain.get(app.endpoint("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    let html = page.text().await.unwrap();
    assert!(
        html.contains("/board/app.js") && !html.contains("http"),
        "no external assets: {html}"
    );
    for (asset, kind) in [
        ("app.js", "text/javascript"),
        ("style.css", "text/css"),
        ("icon.svg", "image/svg+xml"),
    ] {
        let answer = plain
            .get(app.endpoint(&format!("/board/{asset}")))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{asset}");
        assert!(
            answer.headers()["content-type"].to_str().unwrap().starts_with(kind),
            "{asset}"
        );
    }
    let missing = support::send(plain.get(app.endpoint("/board/nope.js"))).await;
    support::assert_error(&missing, support::StatusCode::NOT_FOUND, "not_found");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium and chromium-driver: cargo test --test board -- --ignored"]
async fn the_board_resumes_its_stream_with_last_event_id_after_the_service_restarts() {
    require_browser();
    let first = TestApp::spawn().await;
    let (url, database_url) = (first.url.clone(), first.database_url.clone());
    let browser = Browser::start(1200, 800).await.expect("start Chromium");
    browser.goto(&format!("{url}/")).await.unwrap();
    wait(
        &browser,
        "the live stream",
        "return document.getElementById('live').dataset.state === 'open'",
    )
    .await;
    first.create_ticket(json!({ "task": "Before the restart" })).await;
    wait_for_card(&browser, "todo", "TICKET-1").await;

    // The service goes away (its streams end) and comes back on the same address and database.
    first.shutdown().await;
    wait(
        &browser,
        "the page to notice",
        "return document.getElementById('live').dataset.state === 'reconnecting'",
    )
    .await;
    // Created while the page's server is down (through another process on the same database): a
    // stream opened without a cursor starts with new events, so only a resume from Last-Event-ID
    // delivers it.
    let elsewhere = TestApp::spawn_with(|c| c.database_url = Some(database_url.clone())).await;
    elsewhere
        .create_ticket(json!({ "task": "While the board's server was down" }))
        .await;
    elsewhere.shutdown().await;
    let addr = url.trim_start_matches("http://").parse().unwrap();
    let second = TestApp::spawn_with(|c| {
        c.addr = addr;
        c.database_url = Some(database_url);
    })
    .await;
    wait_for_card(&browser, "todo", "TICKET-2").await;
    let state = browser
        .execute("return document.getElementById('live').dataset.state", vec![])
        .await
        .unwrap();
    assert_eq!(state, json!("open"));

    // A label filter narrows the columns and the live stream alike.
    second
        .create_ticket(json!({ "task": "Paint it", "labels": ["blue"] }))
        .await;
    browser.type_into("#filter-label", "blue").await.unwrap();
    let todo = "return [...document.querySelectorAll('[data-column=\"todo\"] .card')].map(c => c.dataset.key).join()";
    browser
        .wait_for("only the blue ticket", &format!("{todo} === 'TICKET-3'"), WAIT)
        .await
        .unwrap();
    second.create_ticket(json!({ "task": "Not blue" })).await;
    second
        .create_ticket(json!({ "task": "Paint it again", "labels": ["blue"] }))
        .await;
    wait(
        &browser,
        "the next blue ticket, live",
        &format!("{todo} === 'TICKET-5,TICKET-3'"),
    )
    .await;

    assert_no_page_errors(&browser).await;
    browser.close().await;
    second.shutdown().await;
}

/// `/docs` renders the API reference from assets in the binary: with tokens set (the page and the
/// document it reads need none) and a browser that can reach nothing but this machine, the
/// operations show with their paths and summaries, every resource came from the desk, and the
/// page logged no error (a refused load or a content-security-policy violation included).
#[tokio::test]
#[ignore = "needs Debian's chromium and chromium-driver: cargo test --test board -- --ignored"]
async fn the_api_reference_renders_with_the_network_cut_off() {
    require_browser();
    let app = TestApp::spawn_with(|c| c.api_tokens = vec!["docs-secret".into()]).await;
    let browser = Browser::start_offline(1280, 900).await.expect("start Chromium");
    browser.goto(&app.endpoint("/docs")).await.unwrap();
    wait(
        &browser,
        "the operations listed",
        "const text = document.body.innerText; \
         return text.includes('/v1/tickets') && text.includes('Create a ticket') \
             && text.includes('List tickets') && text.includes('/a2a/message:send')",
    )
    .await;
    // Operations' parameters, request body schemas and responses are on the page too (the
    // viewer writes headings in capitals, hence the lower case).
    wait(
        &browser,
        "a request body schema and responses",
        "const text = document.body.innerText.toLowerCase(); \
         return text.includes('request body schema') && text.includes('responses') \
             && text.includes('idempotency-key') && text.includes('query parameters')",
    )
    .await;
    browser.screenshot(&screenshot_path("docs.png")).await.unwrap();
    let origin = app.endpoint("");
    let foreign = browser
        .execute(
            "return performance.getEntriesByType('resource').map(e => e.name) \
                 .filter(n => !n.startsWith(arguments[0]) && !n.startsWith('blob:') && !n.startsWith('data:'))",
            vec![json!(origin)],
        )
        .await
        .unwrap();
    assert_eq!(foreign, json!([]), "resources from elsewhere");
    let loaded = browser
        .execute(
            "return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        loaded.as_array().unwrap().contains(&json!("/openapi.json")),
        "the page reads /openapi.json: {loaded}"
    );
    let errors = browser.page_errors().await.expect("read the page's errors");
    assert!(errors.is_empty(), "/docs logged errors: {errors:#?}");
    browser.close().await;
    app.shutdown().await;
}

/// The served `/docs` page names no absolute URL: its script, style and icon come from the desk.
#[tokio::test]
async fn the_api_reference_page_references_nothing_outside_the_desk() {
    let app = TestApp::spawn_with(|c| c.api_tokens = vec!["docs-secret".into()]).await;
    let plain = reqwest::Client::new();
    let page = plain.get(app.endpoint("/docs")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    let html = page.text().await.unwrap();
    let absolute = regex::Regex::new(r#"(?i)(https?:)?//[^\s"'<>)]+"#).unwrap();
    let found: Vec<&str> = absolute.find_iter(&html).map(|m| m.as_str()).collect();
    assert!(found.is_empty(), "absolute URLs in /docs: {found:?}");
    let sources = regex::Regex::new(r#"(?i)\b(?:src|href|spec-url)="([^"]*)""#).unwrap();
    let referenced: Vec<&str> = sources
        .captures_iter(&html)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    assert!(referenced.contains(&"/openapi.json"), "{referenced:?}");
    for path in referenced {
        assert!(path.starts_with('/'), "{path}");
        let answer = plain.get(app.endpoint(path)).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{path} is served without a token");
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium and chromium-driver: cargo test --test board -- --ignored"]
async fn a_person_answers_the_question_on_the_board_and_approves_by_link_without_a_token() {
    require_browser();
    let llm = FakeLlm::start().await;
    let app = TestApp::spawn_with_llm(&llm, |c| {
        c.allow_private_urls = true;
        c.api_tokens = vec!["board-secret".into()];
    })
    .await;
    let server = support::tool_server::ToolServer::start().await;
    let deploy = json!({"url": server.url("/deploy/{env}"), "requires_approval": true, "approval_timeout_secs": 3600,
                        "input_schema": {"type": "object", "properties": {"env": {"type": "string"}}}});
    assert!(app.put("/v1/tools/deploy", deploy).await.0.is_success());
    let agent = json!({"provider": "openai", "model": "m", "tools": ["close_ticket", "deploy", "ask_human"],
                       "question_timeout_secs": 3600});
    assert!(app.put("/v1/agents/default", agent).await.0.is_success());
    llm.push(Reply::tool_calls(vec![
        ("deploy", json!({"env": "prod"})),
        (
            "ask_human",
            json!({"question": "Which region first?", "choices": ["eu", "us"]}),
        ),
    ]));
    llm.push(Reply::tool_call("close_ticket", json!({"result": "deployed"})));
    let ticket = app.create_ticket(json!({"task": "Deploy the release"})).await;
    let key = ticket["key"].as_str().unwrap().to_owned();
    let waiting = wait_status(&app, &key, "waiting").await;
    let approve_url = waiting["pending_approvals"][0]["approve_url"]
        .as_str()
        .unwrap()
        .to_owned();

    // The board shows the question and the call, each with its deadline; the question is answered there.
    let browser = Browser::start(1200, 900).await.expect("start Chromium");
    browser.goto(&format!("{}/", app.url)).await.unwrap();
    wait(
        &browser,
        "the token prompt",
        "return document.getElementById('token-dialog').open",
    )
    .await;
    browser.type_into("#token-input", "board-secret").await.unwrap();
    browser.click("#token-form button[type=submit]").await.unwrap();
    show(&browser, &format!("#/tickets/{key}")).await;
    wait(
        &browser,
        "the pending question",
        "const q = document.getElementById('pending-question'); \
         return !!q && q.textContent.includes('Which region first?') && !!q.querySelector('.deadline')",
    )
    .await;
    wait(
        &browser,
        "the call waiting for approval with its deadline",
        "const a = document.querySelector('.approval'); return !!a && a.textContent.includes('deploy') && !!a.querySelector('.deadline')",
    )
    .await;
    browser
        .screenshot(&screenshot_path("question-and-approval.png"))
        .await
        .unwrap();
    browser
        .execute(
            "[...document.querySelectorAll('#pending-question button')].find(b => b.textContent === 'eu').click()",
            vec![],
        )
        .await
        .unwrap();
    wait(
        &browser,
        "the question answered",
        "return !document.getElementById('pending-question')",
    )
    .await;
    assert_no_page_errors(&browser).await;

    // The approve link, opened with no token at all: a page, and a button that approves.
    browser.goto(&approve_url).await.unwrap();
    wait(
        &browser,
        "the approval page",
        "return document.body.textContent.includes('Deploy the release')",
    )
    .await;
    browser.click("form button[type=submit]").await.unwrap();
    wait(
        &browser,
        "the answer page",
        "return document.body.textContent.includes('was approved')",
    )
    .await;
    browser
        .screenshot(&screenshot_path("approved-by-link.png"))
        .await
        .unwrap();
    wait_status(&app, &key, "done").await;
    assert_eq!(server.requests().len(), 1, "the approved call ran once");
    let answered = support::event_data(&app, ticket["id"].as_str().unwrap(), "question.answered").await;
    assert_eq!(answered[0]["answer"], "eu");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium and chromium-driver: cargo test --test board -- --ignored"]
async fn an_experiment_is_shown_side_by_side() {
    require_browser();
    let llm = FakeLlm::start().await;
    llm.set_responder(|request: &Value| match request["model"].as_str() {
        Some("m-new") => Reply::tool_call("close_ticket", json!({"result": "the new summary"})),
        Some("judge") => Reply::tool_call(
            "close_ticket",
            json!({"result": {"winner": "tie", "scores": {"A": 7, "B": 7}}}),
        ),
        _ => Reply::tool_call("close_ticket", json!({"result": "the old summary"})),
    });
    let app = TestApp::spawn_with_llm(&llm, |_| {}).await;
    for (name, model) in [("writer", "m-old"), ("judge", "judge")] {
        let agent = json!({"provider": "openai", "model": model, "labels": [name], "tools": ["close_ticket"]});
        assert!(app.put(&format!("/v1/agents/{name}"), agent).await.0.is_success());
    }
    let t = app
        .create_ticket(json!({"task": "Summarise the outage", "labels": ["writer"]}))
        .await;
    let key = t["key"].as_str().unwrap().to_owned();
    wait_status(&app, &key, "done").await;
    let body = json!({"name": "old or new", "tickets": [key],
                      "arms": [{"name": "old", "agent": "writer"}, {"name": "new", "agent": "writer", "model": "m-new"}],
                      "judge": {"agent": "judge"}});
    let (_, experiment) = app.post("/v1/experiments", body).await;
    let id = experiment["id"].as_str().unwrap().to_owned();

    let browser = Browser::start(1200, 800).await.expect("start Chromium");
    browser.goto(&format!("{}/#/experiments", app.url)).await.unwrap();
    wait(
        &browser,
        "the experiment in the list",
        "return !!document.querySelector('[data-experiment]')",
    )
    .await;
    show(&browser, &format!("#/experiments/{id}")).await;
    wait(
        &browser,
        "the experiment done, each arm's figures and the results side by side",
        "return document.getElementById('experiment-status')?.textContent === 'done' \
         && document.querySelectorAll('#experiment-arms tbody tr').length === 2 \
         && document.body.textContent.includes('the new summary') \
         && document.body.textContent.includes('the old summary')",
    )
    .await;
    browser.screenshot(&screenshot_path("experiment.png")).await.unwrap();
    assert_no_page_errors(&browser).await;
    browser.close().await;
}
