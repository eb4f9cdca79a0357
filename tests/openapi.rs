//! The committed OpenAPI document is the one the code generates, so clients generated from the
//! file match the running service. `UPDATE_OPENAPI=1 cargo test --test openapi` rewrites it.

use std::path::PathBuf;

#[test]
fn the_committed_openapi_document_matches_the_generated_one() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("openapi")
        .join("openapi.json");
    let generated = agentdesk::http::openapi::document_json();
    if std::env::var("UPDATE_OPENAPI").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run UPDATE_OPENAPI=1 cargo test --test openapi",
            path.display()
        )
    });
    assert!(
        committed == generated,
        "{} is out of date; run UPDATE_OPENAPI=1 cargo test --test openapi and commit the result",
        path.display()
    );
}

#[test]
fn the_openapi_document_is_valid_json_of_version_3_1_with_every_endpoint() {
    let doc: serde_json::Value = serde_json::from_str(&agentdesk::http::openapi::document_json()).unwrap();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/v1/tickets",
        "/v1/tickets/{ticket}",
        "/v1/tickets/{ticket}/cancel",
        "/v1/tickets/{ticket}/retry",
        "/v1/tickets/{ticket}/comments",
        "/v1/tickets/{ticket}/events",
        "/v1/events",
        "/v1/agents",
        "/v1/agents/{name}",
        "/v1/stats",
        "/v1/webhooks",
        "/v1/webhooks/{id}",
        "/v1/webhooks/{id}/deliveries",
        "/v1/webhooks/{id}/test",
        "/healthz",
        "/readyz",
    ] {
        assert!(paths.contains_key(path), "the document lacks {path}");
    }
}
