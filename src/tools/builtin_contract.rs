//! The built-in tools' definitions against the contract: the generated input schemas and the
//! descriptions are exactly the hand-written definitions the tools were first offered with, so
//! models see the same tools.

use serde_json::{json, Value};

use super::builtin::{ALL_BUILTIN_TOOLS, CLOSE_TICKET, HANDOVER_TICKET, MANAGE_TICKETS, READ_TICKETS};
use crate::schema::validate_against;
use crate::tools::ToolRegistry;

/// A definition as it was written by hand.
struct ToolDefinition {
    name: &'static str,
    description: String,
    input_schema: Value,
}

fn close_ticket() -> ToolDefinition {
    ToolDefinition {
        name: CLOSE_TICKET,
        description: "Finish the current ticket and record its result. This is the ONLY way to \
            finish a ticket: a plain text reply does not close it, and the ticket stays open until \
            you call this tool. Call it exactly once, when the task is fully done, with the complete \
            final result (not a summary of it). If the ticket defines a result schema, `result` \
            must satisfy that schema. After this call you cannot change the result."
            .to_string(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "result": {
                    "description": "The ticket's result: any JSON value (text, number, object, array...). \
                        When the ticket has a result schema, this value must satisfy it."
                }
            },
            "required": ["result"],
            "additionalProperties": false
        }),
    }
}

fn handover_ticket() -> ToolDefinition {
    ToolDefinition {
        name: HANDOVER_TICKET,
        description: "Finish the current ticket with a result AND hand the follow-up work to \
            another agent: this closes your ticket (like close_ticket) and creates a new ticket \
            for the agent or label named in `to`. Use it only when the next step belongs to \
            someone else; use close_ticket when no follow-up is needed. The follow-up `task` may \
            contain the placeholders {parent_key} (this ticket's key) and {parent_result} (the \
            `result` you give here), which are substituted when the new ticket is created."
            .to_string(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "to": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Name of the agent or label that takes the follow-up ticket."
                },
                "task": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The follow-up ticket's task, written so the receiver can act on it \
                        without other context. May contain {parent_key} and {parent_result}."
                },
                "result": {
                    "type": "string",
                    "minLength": 1,
                    "description": "This ticket's result (non-empty text). It closes the current ticket."
                },
                "schema": {
                    "type": "object",
                    "description": "Optional JSON Schema (draft 2020-12) that the follow-up ticket's \
                        result must satisfy. Omit it when the result is free-form."
                }
            },
            "required": ["to", "task", "result"],
            "additionalProperties": false
        }),
    }
}

fn read_tickets() -> ToolDefinition {
    ToolDefinition {
        name: READ_TICKETS,
        description: "Read-only view of other tickets. Use action \"get\" with `key` to read one \
            ticket (task, status, result, comments); \"list\" to list tickets, optionally filtered \
            by `status` and/or `label`; \"search\" with `query` for a text search. This tool never \
            changes anything."
            .to_string(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "action": {
                    "type": "string",
                    "enum": ["get", "list", "search"],
                    "description": "\"get\" one ticket by key, \"list\" tickets, or \"search\" them by text."
                },
                "key": { "type": "string", "description": "Ticket key; required for \"get\"." },
                "status": { "type": "string", "description": "Only tickets with this status (\"list\" and \"search\")." },
                "label": { "type": "string", "description": "Only tickets with this label (\"list\" and \"search\")." },
                "query": { "type": "string", "description": "Text to search for; required for \"search\"." }
            },
            "required": ["action"],
            "additionalProperties": false
        }),
    }
}

fn manage_tickets() -> ToolDefinition {
    ToolDefinition {
        name: MANAGE_TICKETS,
        description: "View, create and edit tickets. Reading works like read_tickets (actions \
            \"get\", \"list\", \"search\"). Use \"create\" to open a sub-ticket of the current \
            ticket (`task` required; optional `labels` route it to agents, optional `schema` \
            constrains its result). Use \"edit\" with `key` to change a ticket's `task`, \
            `labels` or `schema`. This tool never changes a ticket's status: to finish your own \
            ticket call close_ticket (or handover_ticket)."
            .to_string(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "action": {
                    "type": "string",
                    "enum": ["get", "list", "search", "create", "edit"],
                    "description": "\"get\", \"list\" or \"search\" tickets, \"create\" a sub-ticket, or \"edit\" a ticket."
                },
                "key": { "type": "string", "description": "Ticket key; required for \"get\" and \"edit\"." },
                "status": { "type": "string", "description": "Only tickets with this status (\"list\" and \"search\")." },
                "label": { "type": "string", "description": "Only tickets with this label (\"list\" and \"search\")." },
                "query": { "type": "string", "description": "Text to search for; required for \"search\"." },
                "task": { "type": "string", "description": "The ticket's task; required for \"create\", optional for \"edit\"." },
                "labels": {
                    "type": "array",
                    "items": { "type": "string" },
                    "description": "Labels of the ticket (\"create\" and \"edit\"); they decide which agents pick it up."
                },
                "schema": {
                    "type": "object",
                    "description": "Optional JSON Schema (draft 2020-12) the ticket's result must satisfy (\"create\" and \"edit\")."
                }
            },
            "required": ["action"],
            "additionalProperties": false
        }),
    }
}

fn hand_written() -> [ToolDefinition; 4] {
    [close_ticket(), handover_ticket(), read_tickets(), manage_tickets()]
}

fn schema(name: &str) -> &'static Value {
    ToolRegistry::builtin()
        .get(name)
        .expect("a built-in tool")
        .input_schema()
}

#[test]
fn the_definitions_are_the_hand_written_ones() {
    for expected in hand_written() {
        let tool = ToolRegistry::builtin().get(expected.name).expect("a built-in tool");
        assert_eq!(tool.name(), expected.name);
        assert_eq!(tool.description(), expected.description, "{}", expected.name);
        // Same keywords and values, and the same text: a request body does not change.
        assert_eq!(tool.input_schema(), &expected.input_schema, "{}", expected.name);
        assert_eq!(
            tool.input_schema().to_string(),
            expected.input_schema.to_string(),
            "{}",
            expected.name
        );
    }
}

#[test]
fn the_definitions_agree_field_by_field() {
    // Spelled out, so that a difference says where it is.
    for expected in hand_written() {
        let (generated, written) = (schema(expected.name), &expected.input_schema);
        let name = expected.name;
        assert_eq!(generated["type"], "object", "{name}");
        assert_eq!(generated["additionalProperties"], false, "{name}");
        assert_eq!(generated["required"], written["required"], "{name}");
        let properties = generated["properties"].as_object().expect("properties");
        let written_properties = written["properties"].as_object().expect("properties");
        let keys: Vec<&String> = properties.keys().collect();
        assert_eq!(keys, written_properties.keys().collect::<Vec<_>>(), "{name}");
        for (key, property) in properties {
            for keyword in ["type", "enum", "items", "minLength", "description"] {
                assert_eq!(
                    property.get(keyword),
                    written_properties[key].get(keyword),
                    "{name}.{key}: {keyword}"
                );
            }
        }
    }
}

#[test]
fn every_schema_compiles() {
    for name in ALL_BUILTIN_TOOLS {
        crate::schema::compile_schema(schema(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

fn required(name: &str) -> Vec<String> {
    serde_json::from_value(schema(name)["required"].clone()).unwrap()
}

fn properties(name: &str) -> Vec<String> {
    schema(name)["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

#[test]
fn parameters_match_the_contract() {
    assert_eq!(properties(CLOSE_TICKET), ["result"]);
    assert_eq!(required(CLOSE_TICKET), ["result"]);
    assert_eq!(properties(HANDOVER_TICKET), ["to", "task", "result", "schema"]);
    assert_eq!(required(HANDOVER_TICKET), ["to", "task", "result"]);
    assert_eq!(properties(READ_TICKETS), ["action", "key", "status", "label", "query"]);
    assert_eq!(required(READ_TICKETS), ["action"]);
    assert_eq!(
        properties(MANAGE_TICKETS),
        ["action", "key", "status", "label", "query", "task", "labels", "schema"]
    );
    assert_eq!(required(MANAGE_TICKETS), ["action"]);
}

#[test]
fn close_ticket_result_accepts_any_json() {
    let schema = schema(CLOSE_TICKET);
    for result in [json!(null), json!(1), json!("x"), json!([1]), json!({"a": 1})] {
        assert!(validate_against(schema, &json!({ "result": result })).is_ok());
    }
    assert!(validate_against(schema, &json!({})).is_err());
}

#[test]
fn handover_rejects_empty_result_and_unknown_fields() {
    let schema = schema(HANDOVER_TICKET);
    let ok = json!({"to": "reviewer", "task": "Review {parent_key}", "result": "done"});
    assert!(validate_against(schema, &ok).is_ok());
    let empty = json!({"to": "reviewer", "task": "t", "result": ""});
    assert!(validate_against(schema, &empty).is_err());
    let extra = json!({"to": "r", "task": "t", "result": "x", "status": "done"});
    assert!(validate_against(schema, &extra).is_err());
}

#[test]
fn actions_are_restricted() {
    let read = schema(READ_TICKETS);
    assert!(validate_against(read, &json!({"action": "list"})).is_ok());
    assert!(validate_against(read, &json!({"action": "create"})).is_err());
    let manage = schema(MANAGE_TICKETS);
    let create = json!({"action": "create", "task": "t", "labels": ["a"], "schema": {"type": "string"}});
    assert!(validate_against(manage, &create).is_ok());
    assert!(validate_against(manage, &json!({"action": "close"})).is_err());
}

#[test]
fn descriptions_steer_the_model() {
    let description = |name| ToolRegistry::builtin().get(name).unwrap().description().to_owned();
    assert!(description(CLOSE_TICKET).contains("ONLY way"));
    let handover = description(HANDOVER_TICKET);
    assert!(handover.contains("{parent_key}") && handover.contains("{parent_result}"));
    assert!(description(MANAGE_TICKETS).contains("never changes a ticket's status"));
}

#[test]
fn only_reads_and_finishers_write_nothing() {
    let writes_nothing = |name| ToolRegistry::builtin().get(name).unwrap().writes_nothing();
    assert!(writes_nothing(CLOSE_TICKET));
    assert!(writes_nothing(HANDOVER_TICKET));
    assert!(writes_nothing(READ_TICKETS));
    assert!(!writes_nothing(MANAGE_TICKETS));
}
