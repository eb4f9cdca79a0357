//! How `/mcp` and A2A appear in the OpenAPI document. They are protocols of their own, with
//! their own envelopes (JSON-RPC 2.0 messages, A2A's ProtoJSON): the document gives the
//! envelopes, the headers each binding needs and every status it answers, and points to the
//! specifications for the rest. JSON-RPC answers its own errors (an unknown method, invalid
//! params) with HTTP 200 and an `error` member; HTTP statuses are for what comes before it (the
//! token, the headers, a body that is no JSON-RPC message).
#![allow(dead_code)] // The functions exist only for their `#[utoipa::path]`.

use serde_json::json;
use utoipa::ToSchema;

use crate::http::error::ErrorBody;

/// The states an A2A task may be in, by their ProtoJSON names.
#[derive(ToSchema)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum A2aTaskState {
    TASK_STATE_SUBMITTED,
    TASK_STATE_WORKING,
    TASK_STATE_INPUT_REQUIRED,
    TASK_STATE_COMPLETED,
    TASK_STATE_FAILED,
    TASK_STATE_CANCELED,
    TASK_STATE_REJECTED,
    TASK_STATE_AUTH_REQUIRED,
    TASK_STATE_UNSPECIFIED,
}

/// `Accept` of an MCP request: both kinds of answer.
#[derive(ToSchema)]
pub enum McpAccept {
    #[schema(rename = "application/json, text/event-stream")]
    JsonAndEventStream,
}

/// `Accept` of the MCP session's stream.
#[derive(ToSchema)]
pub enum McpStreamAccept {
    #[schema(rename = "text/event-stream")]
    EventStream,
}

/// `MCP-Protocol-Version`: the revisions the transport accepts (any other is refused with 400).
#[derive(ToSchema)]
pub enum McpProtocolVersion {
    #[schema(rename = "2024-11-05")]
    V20241105,
    #[schema(rename = "2025-03-26")]
    V20250326,
    #[schema(rename = "2025-06-18")]
    V20250618,
    #[schema(rename = "2025-11-25")]
    V20251125,
    #[schema(rename = "2026-07-28")]
    V20260728,
}

/// `MCP-Protocol-Version` of a session's requests: the revisions with sessions (2026-07-28 has
/// none: 405).
#[derive(ToSchema)]
pub enum McpSessionProtocolVersion {
    #[schema(rename = "2024-11-05")]
    V20241105,
    #[schema(rename = "2025-03-26")]
    V20250326,
    #[schema(rename = "2025-06-18")]
    V20250618,
    #[schema(rename = "2025-11-25")]
    V20251125,
}

/// Adds the schemas of the protocols' envelopes to a document's components. They are JSON
/// Schema written out (constants, `contains`, one of several message shapes), which utoipa's
/// schema model does not hold, so they go into the document's JSON.
pub fn add_schemas(document: &mut serde_json::Value) {
    let Some(components) = document
        .pointer_mut("/components/schemas")
        .and_then(|c| c.as_object_mut())
    else {
        return;
    };
    for (name, schema) in schemas() {
        components.insert(name.to_owned(), schema);
    }
    components.sort_keys();
}

fn schemas() -> Vec<(&'static str, serde_json::Value)> {
    let id = json!({"type": ["string", "integer"], "description": "The request's id, echoed in its response"});
    // As `/v1/tickets` takes them.
    let label = json!({"type": "string", "minLength": 1, "maxLength": 100,
        "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"});
    let task =
        json!({"anyOf": [{"type": "string", "pattern": "\\S"}, {"type": ["object", "array", "number", "boolean"]}]});
    vec![
        (
            "McpMessage",
            json!({
                "description": "One JSON-RPC 2.0 message of the Model Context Protocol: a request (`id` and `method`), a notification (`method` alone), or a response to a request of the server (`id` and `result` or `error`). Batches are not read.",
                "anyOf": [
                    {"type": "object", "title": "Request or notification", "required": ["jsonrpc", "method"],
                     "properties": {"jsonrpc": {"const": "2.0"}, "id": id, "method": {"type": "string", "examples": ["initialize", "tools/list", "tools/call"]},
                                    "params": {"type": "object"}}},
                    {"type": "object", "title": "Result", "required": ["jsonrpc", "id", "result"],
                     "properties": {"jsonrpc": {"const": "2.0"}, "id": id, "result": {"type": "object"}}},
                    {"type": "object", "title": "Error", "required": ["jsonrpc", "id", "error"],
                     "properties": {"jsonrpc": {"const": "2.0"}, "id": id, "error": {"$ref": "#/components/schemas/JsonRpcErrorObject"}}}
                ]
            }),
        ),
        (
            "McpRefusal",
            json!({
                "description": "The desk's error body, or a JSON-RPC response whose `error` says what the transport refused",
                "anyOf": [{"$ref": "#/components/schemas/ErrorBody"}, {"$ref": "#/components/schemas/JsonRpcResponse"}]
            }),
        ),
        (
            "JsonRpcErrorObject",
            json!({
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "integer", "description": "-32700 parse error, -32600 invalid request, -32601 method not found, -32602 invalid params, -32603 internal error; A2A's own from -32001"},
                    "message": {"type": "string"},
                    "data": {}
                }
            }),
        ),
        (
            "JsonRpcResponse",
            json!({
                "description": "A JSON-RPC 2.0 response: `result`, or `error` (sent with HTTP 200).",
                "type": "object",
                "required": ["jsonrpc"],
                "properties": {
                    "jsonrpc": {"const": "2.0"},
                    "id": {"type": ["string", "number", "null"], "description": "The request's id; null when the request could not be read"},
                    "result": {},
                    "error": {"$ref": "#/components/schemas/JsonRpcErrorObject"}
                }
            }),
        ),
        (
            "A2aJsonRpcRequest",
            json!({
                "description": "A JSON-RPC 2.0 request of A2A: `params` is the method's request message (SendMessageRequest for the sending methods; `{id, historyLength}` for GetTask, `{id}` for CancelTask and SubscribeToTask; ListTasksRequest's fields for ListTasks).",
                "type": "object",
                "required": ["jsonrpc", "id", "method"],
                "properties": {
                    "jsonrpc": {"const": "2.0"},
                    "id": id,
                    "method": {"enum": ["SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask"]},
                    "params": {"type": "object"}
                }
            }),
        ),
        (
            "A2aStatus",
            json!({
                "description": "An A2A error of the HTTP+JSON binding: a google.rpc.Status whose `details` hold a google.rpc.ErrorInfo naming the error (`reason`: TASK_NOT_FOUND, TASK_NOT_CANCELABLE, INVALID_PARAMS, PARSE_ERROR, VERSION_NOT_SUPPORTED, …).",
                "type": "object",
                "required": ["error"],
                "properties": {"error": {
                    "type": "object",
                    "required": ["code", "status", "message"],
                    "properties": {
                        "code": {"type": "integer", "description": "The HTTP status"},
                        "status": {"type": "string", "examples": ["INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION"]},
                        "message": {"type": "string"},
                        "details": {"type": "array", "items": {"type": "object"}}
                    }
                }}
            }),
        ),
        (
            "A2aPart",
            json!({
                "description": "One part of a message: `text`, or `data` (any JSON); `url` and `raw` (file parts) are kept but not read as the task. A null field is an absent one.",
                "type": "object",
                "properties": {
                    "text": {"type": ["string", "null"]},
                    "data": {},
                    "url": {"type": ["string", "null"]},
                    "raw": {"type": ["string", "null"], "description": "Base64"},
                    "mediaType": {"type": ["string", "null"]},
                    "filename": {"type": ["string", "null"]},
                    "metadata": {}
                }
            }),
        ),
        (
            "A2aMetadata",
            json!({
                "description": "Free metadata, kept on the ticket; `skill` (an agent's name) or else `labels` label the ticket a message creates.",
                "type": ["object", "null"],
                "anyOf": [
                    {"type": "null"},
                    {"required": ["skill"], "properties": {"skill": label.clone()}},
                    {"properties": {
                        "skill": {"type": "null"},
                        "labels": {"type": ["array", "null"], "maxItems": 50, "items": label}
                    }}
                ]
            }),
        ),
        (
            "A2aMessage",
            json!({
                "type": "object",
                "required": ["messageId", "role", "parts"],
                "properties": {
                    "messageId": {"type": "string", "pattern": "\\S"},
                    "contextId": {"type": ["string", "null"]},
                    "taskId": {"type": ["string", "null"], "description": "The task to add this message to (as a comment); it must exist and wait for input"},
                    "role": {"enum": ["ROLE_USER", "ROLE_AGENT"]},
                    "parts": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/A2aPart"}},
                    "metadata": {"$ref": "#/components/schemas/A2aMetadata"}
                }
            }),
        ),
        (
            "A2aSendMessageRequest",
            json!({
                "type": "object",
                "required": ["message"],
                "anyOf": [
                    {"properties": {"message": {"properties": {"metadata": {"type": "object", "anyOf": [
                        {"required": ["skill"], "properties": {"skill": {"not": {"type": "null"}}}},
                        {"required": ["labels"], "properties": {"labels": {"not": {"type": "null"}}}}
                    ]}}}}},
                    {"properties": {"metadata": {"$ref": "#/components/schemas/A2aMetadata"}}}
                ],
                "properties": {
                    "message": {
                        "allOf": [{"$ref": "#/components/schemas/A2aMessage"}],
                        "description": "Its text parts, joined, are the task (or the comment), and must not be blank; without text parts, its data parts are (one: its JSON, but null or a blank string; several: an array of them).",
                        "properties": {"parts": {"anyOf": [
                            {"contains": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string", "pattern": "\\S"}}}},
                            {
                                "items": {"properties": {"text": {"type": "null"}}},
                                "contains": {"type": "object", "required": ["data"], "properties": {"data": task}}
                            }
                        ]}}
                    },
                    "configuration": {"type": ["object", "array", "null"], "description": "An array is read as the fields in this order", "properties": {
                        "historyLength": {"type": ["integer", "null"], "description": "How much history the answer holds; message:send refuses a negative one, message:stream does not read it"},
                        "returnImmediately": {"type": ["boolean", "null"], "description": "Answer at once instead of when the task is terminal or needs input"}
                    }},
                    "metadata": {"type": ["object", "null"], "description": "Read as A2aMetadata when the message's metadata names no skill or labels"}
                }
            }),
        ),
        (
            "A2aTask",
            json!({
                "type": "object",
                "required": ["id", "contextId", "status"],
                "properties": {
                    "id": {"type": "string", "description": "The ticket's id"},
                    "contextId": {"type": "string"},
                    "status": {"type": "object", "required": ["state", "timestamp"], "properties": {
                        "state": {"$ref": "#/components/schemas/A2aTaskState"},
                        "message": {"type": "object"},
                        "timestamp": {"type": "string", "format": "date-time"}
                    }},
                    "artifacts": {"type": "array", "items": {"type": "object", "required": ["artifactId", "parts"], "properties": {
                        "artifactId": {"type": "string"},
                        "name": {"type": "string"},
                        "parts": {"type": "array", "items": {"$ref": "#/components/schemas/A2aPart"}}
                    }}},
                    "history": {"type": "array", "items": {"type": "object"}},
                    "metadata": {"type": "object"}
                }
            }),
        ),
        (
            "A2aSendMessageResponse",
            json!({"type": "object", "required": ["task"], "properties": {"task": {"$ref": "#/components/schemas/A2aTask"}}}),
        ),
        (
            "A2aListTasksResponse",
            json!({
                "type": "object",
                "required": ["tasks", "nextPageToken", "pageSize", "totalSize"],
                "properties": {
                    "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/A2aTask"}},
                    "nextPageToken": {"type": "string", "description": "Empty on the last page"},
                    "pageSize": {"type": "integer"},
                    "totalSize": {"type": "integer"}
                }
            }),
        ),
        (
            "A2aStreamEvent",
            json!({
                "description": "One server-sent event: `data` is the JSON text of a StreamResponse (`{\"task\"}`, `{\"statusUpdate\"}` or `{\"artifactUpdate\"}`); `: ping` comments carry nothing.",
                "type": "object",
                "properties": {"data": {"type": "string", "contentMediaType": "application/json"}}
            }),
        ),
    ]
}

/// The Model Context Protocol (streamable HTTP)
///
/// Revisions 2025-06-18 and 2025-11-25 (`initialize`, then an `Mcp-Session-Id` session) and the
/// stateless 2026-07-28 (per-request `_meta`, `Mcp-Method`/`Mcp-Name` headers, `server/discover`).
/// Tools: `create_ticket` (with `wait_secs`, 0 to 300), `get_ticket`, `list_tickets`,
/// `comment_ticket`, `cancel_ticket`, `retry_ticket`, `answer_approval`; resource template
/// `agentdesk://tickets/{ticket}`. A `read:` token sees and calls only the reading tools.
/// JSON-RPC errors (an unknown method or tool, invalid params) are answered with HTTP 200.
/// See https://modelcontextprotocol.io/specification.
#[utoipa::path(post, path = "/mcp", tag = "agent-protocols",
    params(
        ("Accept" = McpAccept, Header, description = "Must accept both `application/json` and `text/event-stream`"),
        ("Mcp-Session-Id" = Option<String>, Header, description = "The session `initialize` answered with: required on every later request of the 2025 revisions"),
        ("MCP-Protocol-Version" = Option<McpProtocolVersion>, Header, description = "The revision spoken; `2026-07-28` is stateless (no session)"),
    ),
    request_body(content = ref("#/components/schemas/McpMessage"), description = "A JSON-RPC 2.0 message", content_type = "application/json"),
    responses(
        (status = 200, description = "The JSON-RPC response (a JSON-RPC error too), as JSON or as a text/event-stream of messages ending with it",
            content((ref("#/components/schemas/JsonRpcResponse") = "application/json"), (ref("#/components/schemas/JsonRpcResponse") = "text/event-stream"))),
        (status = 202, description = "A notification or a response was accepted"),
        (status = 400, description = "The body is no JSON-RPC message, the session id is missing or malformed, the protocol version is not one spoken here, or a 2026-07-28 request lacks its `_meta`", body = ref("#/components/schemas/McpRefusal")),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such session (it ended, or the desk restarted): initialize a new one", body = ErrorBody),
        (status = 406, description = "`Accept` lacks `application/json` or `text/event-stream`", body = ErrorBody),
        (status = 413, description = "The body is larger than 1 MiB", body = ErrorBody),
        (status = 415, description = "The body is not `application/json`", body = ErrorBody),
    ))]
fn mcp() {}

/// The MCP session's server-to-client stream
#[utoipa::path(get, path = "/mcp", tag = "agent-protocols",
    params(
        ("Accept" = McpStreamAccept, Header, description = "Must accept `text/event-stream`"),
        ("Mcp-Session-Id" = String, Header, description = "The session `initialize` answered with"),
        ("MCP-Protocol-Version" = Option<McpSessionProtocolVersion>, Header, description = "The session's revision"),
    ),
    responses(
        (status = 200, description = "A text/event-stream of JSON-RPC messages", content_type = "text/event-stream"),
        (status = 400, description = "The session id is missing or malformed, or the protocol version is not one spoken here", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 405, description = "`MCP-Protocol-Version: 2026-07-28` is stateless: it has no session stream", body = ErrorBody),
        (status = 406, description = "`Accept` lacks `text/event-stream`", body = ErrorBody),
        (status = 409, description = "The session's stream is already open", body = ErrorBody),
    ))]
fn mcp_stream() {}

/// Ends an MCP session
#[utoipa::path(delete, path = "/mcp", tag = "agent-protocols",
    params(
        ("Mcp-Session-Id" = String, Header, description = "The session to end"),
        ("MCP-Protocol-Version" = Option<McpSessionProtocolVersion>, Header, description = "The session's revision"),
    ),
    responses(
        (status = 204, description = "Ended (also for a session that had ended already)"),
        (status = 400, description = "The session id is missing or malformed", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 405, description = "`MCP-Protocol-Version: 2026-07-28` is stateless: it has no session to end", body = ErrorBody),
    ))]
fn mcp_end() {}

/// The A2A agent card (public)
///
/// A2A v1.0: the desk's interfaces (`HTTP+JSON` at `{base}/a2a`, `JSONRPC` at
/// `{base}/a2a/jsonrpc`, where `{base}` is `AGENTDESK_PUBLIC_URL` or the request's scheme and
/// host), streaming, and one skill per agent. See https://a2a-protocol.org.
#[utoipa::path(get, path = "/.well-known/agent-card.json", tag = "agent-protocols",
    responses((status = 200, description = "An AgentCard", body = Object)))]
fn agent_card() {}

/// A2A SendMessage
///
/// A message without `taskId` creates a ticket (its text parts joined, or a single data part's
/// JSON, are the task; `metadata.skill` or `metadata.labels` label it); one with the `taskId`
/// of an unfinished task is a comment on it. Answers once the task is terminal or needs input,
/// unless `configuration.returnImmediately`.
#[utoipa::path(post, path = "/a2a/message:send", tag = "agent-protocols",
    request_body(content = ref("#/components/schemas/A2aSendMessageRequest"), description = "A SendMessageRequest", content_type = "application/json"),
    responses((status = 200, description = "A SendMessageResponse holding the task", body = ref("#/components/schemas/A2aSendMessageResponse")),
        (status = 400, description = "Not JSON, not a SendMessageRequest, or an A2A version not spoken here", body = ref("#/components/schemas/A2aStatus")),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "`taskId` names no task", body = ref("#/components/schemas/A2aStatus")),
        (status = 409, description = "The task named by `taskId` is finished or does not wait for input", body = ref("#/components/schemas/A2aStatus")),
        (status = 413, description = "The body is larger than 1 MiB", body = ErrorBody)))]
fn send_message() {}

/// A2A SendStreamingMessage
#[utoipa::path(post, path = "/a2a/message:stream", tag = "agent-protocols",
    request_body(content = ref("#/components/schemas/A2aSendMessageRequest"), description = "A SendMessageRequest", content_type = "application/json"),
    responses((status = 200, description = "text/event-stream of StreamResponse: the task, then status and artifact updates until it is terminal or needs input",
            body = ref("#/components/schemas/A2aStreamEvent"), content_type = "text/event-stream"),
        (status = 400, description = "Not JSON, not a SendMessageRequest, or an A2A version not spoken here", body = ref("#/components/schemas/A2aStatus")),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "`taskId` names no task", body = ref("#/components/schemas/A2aStatus")),
        (status = 409, description = "The task named by `taskId` is finished or does not wait for input", body = ref("#/components/schemas/A2aStatus")),
        (status = 413, description = "The body is larger than 1 MiB", body = ErrorBody)))]
fn stream_message() {}

/// A2A ListTasks (the most recently changed first)
#[utoipa::path(get, path = "/a2a/tasks", tag = "agent-protocols",
    params(("contextId" = Option<String>, Query),
        ("status" = Option<A2aTaskState>, Query, description = "Only tasks in this state"),
        ("statusTimestampAfter" = Option<String>, Query, format = DateTime,
            description = "Only tasks whose status changed after this time (RFC 3339)"),
        ("pageSize" = Option<i64>, Query, minimum = 1, maximum = 100), ("pageToken" = Option<String>, Query, description = "`nextPageToken` of the previous page"),
        ("historyLength" = Option<i64>, Query, minimum = 0), ("includeArtifacts" = Option<bool>, Query)),
    responses((status = 200, description = "A ListTasksResponse", body = ref("#/components/schemas/A2aListTasksResponse")),
        (status = 400, description = "A query parameter of the wrong form, a page token not from a previous page, or an A2A version not spoken here", body = ref("#/components/schemas/A2aStatus")),
        (status = 401, body = ErrorBody)))]
fn list_tasks() {}

/// A2A GetTask (`{id}`) or SubscribeToTask (`{id}:subscribe`)
#[utoipa::path(get, path = "/a2a/tasks/{task}", tag = "agent-protocols",
    params(("task" = String, Path, description = "A task id (a ticket id), or `{id}:subscribe`"),
        ("historyLength" = Option<i64>, Query, minimum = 0)),
    responses((status = 200, description = "A Task, or a text/event-stream of StreamResponse for `:subscribe`",
            content((ref("#/components/schemas/A2aTask") = "application/json"), (ref("#/components/schemas/A2aStreamEvent") = "text/event-stream"))),
        (status = 400, description = "A query parameter of the wrong form, or an A2A version not spoken here", body = ref("#/components/schemas/A2aStatus")),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such task", body = ref("#/components/schemas/A2aStatus"))))]
fn get_task() {}

/// A2A CancelTask (`{id}:cancel`) or SubscribeToTask (`{id}:subscribe`)
#[utoipa::path(post, path = "/a2a/tasks/{task}", tag = "agent-protocols",
    params(("task" = String, Path, description = "`{id}:cancel` or `{id}:subscribe`")),
    responses((status = 200, description = "The Task, or a text/event-stream of StreamResponse for `:subscribe`",
            content((ref("#/components/schemas/A2aTask") = "application/json"), (ref("#/components/schemas/A2aStreamEvent") = "text/event-stream"))),
        (status = 400, description = "An A2A version not spoken here", body = ref("#/components/schemas/A2aStatus")),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "No such task, or no such operation (neither `:cancel` nor `:subscribe`)", body = ref("#/components/schemas/A2aStatus")),
        (status = 409, description = "The task is finished and cannot be canceled", body = ref("#/components/schemas/A2aStatus"))))]
fn task_action() {}

/// A2A over JSON-RPC 2.0
///
/// Methods `SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask` and
/// `SubscribeToTask`. Errors are JSON-RPC error objects with HTTP 200 (a body that is not
/// JSON, an unknown method, invalid params, no such task); a `read:` token may call only
/// GetTask, ListTasks and SubscribeToTask.
#[utoipa::path(post, path = "/a2a/jsonrpc", tag = "agent-protocols",
    request_body(content = ref("#/components/schemas/A2aJsonRpcRequest"), description = "A JSON-RPC 2.0 request", content_type = "application/json"),
    responses((status = 200, description = "A JSON-RPC 2.0 response (its errors too), or a text/event-stream of them for the streaming methods",
            content((ref("#/components/schemas/JsonRpcResponse") = "application/json"), (ref("#/components/schemas/JsonRpcResponse") = "text/event-stream"))),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 413, description = "The body is larger than 1 MiB", body = ErrorBody)))]
fn jsonrpc() {}
