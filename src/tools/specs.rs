//! Definitions of the built-in tools every agent gets. Names and parameters
//! are part of the public contract with models and must stay stable.

use serde_json::{json, Value};

pub const CLOSE_TICKET: &str = "close_ticket";
pub const HANDOVER_TICKET: &str = "handover_ticket";
pub const READ_TICKETS: &str = "read_tickets";
pub const MANAGE_TICKETS: &str = "manage_tickets";

pub const BUILTIN_TOOLS: [&str; 4] = [CLOSE_TICKET, HANDOVER_TICKET, READ_TICKETS, MANAGE_TICKETS];

/// A tool as offered to a model: name, usage description and the JSON Schema
/// (draft 2020-12) of its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    pub name: &'static str,
    pub description: String,
    pub input_schema: Value,
}

/// A built-in tool's definition, built once: every request offers the agent's tools and every call
/// is checked against its schema.
pub fn builtin(name: &str) -> Option<&'static ToolDefinition> {
    static ALL: std::sync::LazyLock<Vec<ToolDefinition>> =
        std::sync::LazyLock::new(|| BUILTIN_TOOLS.iter().filter_map(|name| definition(name)).collect());
    ALL.iter().find(|d| d.name == name)
}

/// Builds the definition of a built-in tool, or `None` when `name` is not one (see `builtin`).
fn definition(name: &str) -> Option<ToolDefinition> {
    match name {
        CLOSE_TICKET => Some(close_ticket()),
        HANDOVER_TICKET => Some(handover_ticket()),
        READ_TICKETS => Some(read_tickets()),
        MANAGE_TICKETS => Some(manage_tickets()),
        _ => None,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_has_a_definition_with_its_name() {
        for name in BUILTIN_TOOLS {
            let def = definition(name).expect("builtin tool must be defined");
            assert_eq!(def.name, name);
            assert!(!def.description.is_empty());
            assert_eq!(builtin(name), Some(&def), "the kept definition is the same");
        }
        assert!(definition("no_such_tool").is_none());
        assert!(builtin("no_such_tool").is_none());
    }

    #[test]
    fn schemas_are_closed_objects_that_compile() {
        for name in BUILTIN_TOOLS {
            let schema = definition(name).unwrap().input_schema;
            assert_eq!(schema["type"], "object", "{name}");
            assert_eq!(schema["additionalProperties"], false, "{name}");
            crate::tools::validate::compile_schema(&schema).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    fn required(name: &str) -> Vec<String> {
        let schema = definition(name).unwrap().input_schema;
        serde_json::from_value(schema["required"].clone()).unwrap()
    }

    fn properties(name: &str) -> Vec<String> {
        let schema = definition(name).unwrap().input_schema;
        schema["properties"].as_object().unwrap().keys().cloned().collect()
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
        let schema = definition(CLOSE_TICKET).unwrap().input_schema;
        for result in [json!(null), json!(1), json!("x"), json!([1]), json!({"a": 1})] {
            assert!(crate::tools::validate::validate_against(&schema, &json!({ "result": result })).is_ok());
        }
        assert!(crate::tools::validate::validate_against(&schema, &json!({})).is_err());
    }

    #[test]
    fn handover_rejects_empty_result_and_unknown_fields() {
        let schema = definition(HANDOVER_TICKET).unwrap().input_schema;
        let ok = json!({"to": "reviewer", "task": "Review {parent_key}", "result": "done"});
        assert!(crate::tools::validate::validate_against(&schema, &ok).is_ok());
        let empty = json!({"to": "reviewer", "task": "t", "result": ""});
        assert!(crate::tools::validate::validate_against(&schema, &empty).is_err());
        let extra = json!({"to": "r", "task": "t", "result": "x", "status": "done"});
        assert!(crate::tools::validate::validate_against(&schema, &extra).is_err());
    }

    #[test]
    fn actions_are_restricted() {
        let read = definition(READ_TICKETS).unwrap().input_schema;
        assert!(crate::tools::validate::validate_against(&read, &json!({"action": "list"})).is_ok());
        assert!(crate::tools::validate::validate_against(&read, &json!({"action": "create"})).is_err());
        let manage = definition(MANAGE_TICKETS).unwrap().input_schema;
        let create = json!({"action": "create", "task": "t", "labels": ["a"], "schema": {"type": "string"}});
        assert!(crate::tools::validate::validate_against(&manage, &create).is_ok());
        assert!(crate::tools::validate::validate_against(&manage, &json!({"action": "close"})).is_err());
    }

    #[test]
    fn descriptions_steer_the_model() {
        let close = definition(CLOSE_TICKET).unwrap().description;
        assert!(close.contains("ONLY way"));
        let handover = definition(HANDOVER_TICKET).unwrap().description;
        assert!(handover.contains("{parent_key}") && handover.contains("{parent_result}"));
        let manage = definition(MANAGE_TICKETS).unwrap().description;
        assert!(manage.contains("never changes a ticket's status"));
    }
}
