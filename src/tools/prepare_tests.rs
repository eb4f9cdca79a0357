//! Tool input preparation (`prepare`) with the built-in tools' real schemas, through the
//! registry that holds them (here, so that `prepare` itself needs no registry).

use super::prepare::*;
use crate::tools::builtin::{CLOSE_TICKET, HANDOVER_TICKET};
use crate::tools::ToolRegistry;
use serde_json::{json, Value};

fn close_schema() -> Value {
    ToolRegistry::builtin()
        .get(CLOSE_TICKET)
        .unwrap()
        .input_schema()
        .clone()
}

#[test]
fn prepare_accepts_a_good_call() {
    assert_eq!(
        prepare_tool_input(CLOSE_TICKET, &close_schema(), r#"{"result": {"ok": true}}"#),
        Ok(json!({"result": {"ok": true}}))
    );
}

#[test]
fn prepare_repairs_a_truncated_close_ticket_call() {
    assert_eq!(
        prepare_tool_input(CLOSE_TICKET, &close_schema(), r#"{"result": "The answer is 4"#),
        Ok(json!({"result": "The answer is 4"}))
    );
}

#[test]
fn prepare_reports_a_call_cut_before_its_value() {
    let err = prepare_tool_input(CLOSE_TICKET, &close_schema(), r#"{"resu"#).unwrap_err();
    assert!(err.contains("`close_ticket`"), "{err}");
    assert!(err.contains("Missing required fields: result."), "{err}");
    assert!(err.contains("Fields received: none."), "{err}");
    assert!(err.contains("were not valid JSON (6 chars"), "{err}");
}

#[test]
fn prepare_coerces_before_validating() {
    let schema = json!({
        "type": "object",
        "properties": {"count": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["count"],
        "additionalProperties": false
    });
    let err = prepare_tool_input("t", &schema, r#"{"count": "3", "tags": "a", "extra": null"#).unwrap_err();
    assert!(
        err.contains("Additional properties are not allowed ('extra' was unexpected)"),
        "{err}"
    );
    assert!(
        err.contains("Fields received: count: 3, tags: [\"a\"], extra: null."),
        "{err}"
    );
    assert_eq!(
        prepare_tool_input("t", &schema, r#"{"count": "3", "tags": "a""#),
        Ok(json!({"count": 3, "tags": ["a"]}))
    );
}

#[test]
fn prepare_error_names_wrong_fields_and_summarises_values() {
    let schema = ToolRegistry::builtin()
        .get(HANDOVER_TICKET)
        .unwrap()
        .input_schema()
        .clone();
    let raw = json!({"to": "reviewer", "result": "r".repeat(20_000), "extra": 1}).to_string();
    let err = prepare_tool_input(HANDOVER_TICKET, &schema, &raw).unwrap_err();
    assert!(
        err.starts_with("Invalid arguments for tool `handover_ticket`."),
        "{err}"
    );
    assert!(err.contains("Missing required fields: task."), "{err}");
    assert!(err.contains("\"task\" is a required property"), "{err}");
    assert!(err.contains("extra"), "{err}");
    assert!(
        err.contains("Fields received: to: \"reviewer\", result: string(20000 chars…), extra: 1."),
        "{err}"
    );
    assert!(!err.contains("rrrrrrrrrr"), "{err}");
    assert!(!err.contains("were not valid JSON"), "{err}");
}

#[test]
fn prepare_rejects_non_object_arguments() {
    let err = prepare_tool_input(CLOSE_TICKET, &close_schema(), "[1, 2]").unwrap_err();
    assert!(err.contains("must be a JSON object, received: [1, 2]"), "{err}");
}

#[test]
fn prepare_reports_a_broken_tool_schema() {
    let err = prepare_tool_input("bad", &json!({"type": "nope"}), "{}").unwrap_err();
    assert!(err.starts_with("Tool `bad` cannot be called"), "{err}");
}
