//! How `/mcp` and A2A appear in the OpenAPI document. They are protocols of their own, with
//! their own envelopes (JSON-RPC 2.0 messages, A2A's ProtoJSON), so the document names their
//! endpoints, methods and tokens and points to the specifications for the bodies.
#![allow(dead_code)] // The functions exist only for their `#[utoipa::path]`.

use crate::http::error::ErrorBody;

/// The Model Context Protocol (streamable HTTP)
///
/// Revisions 2025-06-18 and 2025-11-25 (`initialize`, then an `Mcp-Session-Id` session) and the
/// stateless 2026-07-28 (per-request `_meta`, `Mcp-Method`/`Mcp-Name` headers, `server/discover`).
/// Tools: `create_ticket` (with `wait_secs`, 0 to 300), `get_ticket`, `list_tickets`,
/// `comment_ticket`, `cancel_ticket`, `retry_ticket`, `answer_approval`; resource template
/// `agentdesk://tickets/{ticket}`. A `read:` token sees and calls only the reading tools.
/// See https://modelcontextprotocol.io/specification.
#[utoipa::path(post, path = "/mcp", tag = "agent-protocols",
    request_body(content = Object, description = "A JSON-RPC 2.0 message"),
    responses((status = 200, description = "A JSON-RPC 2.0 response, as JSON or as a text/event-stream"),
        (status = 202, description = "A notification or response was accepted"),
        (status = 401, body = ErrorBody)))]
fn mcp() {}

/// The MCP session's server-to-client stream
#[utoipa::path(get, path = "/mcp", tag = "agent-protocols",
    responses((status = 200, description = "text/event-stream of JSON-RPC messages", content_type = "text/event-stream"),
        (status = 401, body = ErrorBody)))]
fn mcp_stream() {}

/// Ends an MCP session
#[utoipa::path(delete, path = "/mcp", tag = "agent-protocols",
    responses((status = 200, description = "Ended"), (status = 401, body = ErrorBody)))]
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
    request_body(content = Object, description = "A SendMessageRequest"),
    responses((status = 200, description = "A SendMessageResponse holding the task", body = Object),
        (status = 400, description = "A google.rpc.Status", body = Object), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, description = "A google.rpc.Status", body = Object)))]
fn send_message() {}

/// A2A SendStreamingMessage
#[utoipa::path(post, path = "/a2a/message:stream", tag = "agent-protocols",
    request_body(content = Object, description = "A SendMessageRequest"),
    responses((status = 200, description = "text/event-stream of StreamResponse: the task, then status and artifact updates until it is terminal or needs input", content_type = "text/event-stream"),
        (status = 400, description = "A google.rpc.Status", body = Object), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
fn stream_message() {}

/// A2A ListTasks (newest first)
#[utoipa::path(get, path = "/a2a/tasks", tag = "agent-protocols",
    params(("contextId" = Option<String>, Query), ("status" = Option<String>, Query, description = "A TaskState, e.g. TASK_STATE_WORKING"),
        ("pageSize" = Option<i32>, Query, minimum = 1, maximum = 100), ("pageToken" = Option<String>, Query),
        ("historyLength" = Option<i32>, Query, minimum = 0), ("includeArtifacts" = Option<bool>, Query)),
    responses((status = 200, description = "A ListTasksResponse", body = Object),
        (status = 400, description = "A google.rpc.Status", body = Object), (status = 401, body = ErrorBody)))]
fn list_tasks() {}

/// A2A GetTask (`{id}`) or SubscribeToTask (`{id}:subscribe`)
#[utoipa::path(get, path = "/a2a/tasks/{task}", tag = "agent-protocols",
    params(("task" = String, Path, description = "A task id (a ticket id), or `{id}:subscribe`"),
        ("historyLength" = Option<i32>, Query, minimum = 0)),
    responses((status = 200, description = "A Task, or a text/event-stream of StreamResponse for `:subscribe`", body = Object),
        (status = 400, description = "A google.rpc.Status", body = Object), (status = 401, body = ErrorBody),
        (status = 404, description = "A google.rpc.Status", body = Object)))]
fn get_task() {}

/// A2A CancelTask (`{id}:cancel`) or SubscribeToTask (`{id}:subscribe`)
#[utoipa::path(post, path = "/a2a/tasks/{task}", tag = "agent-protocols",
    params(("task" = String, Path, description = "`{id}:cancel` or `{id}:subscribe`")),
    responses((status = 200, description = "The Task, or a text/event-stream of StreamResponse for `:subscribe`", body = Object),
        (status = 400, description = "A google.rpc.Status", body = Object), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, description = "A google.rpc.Status", body = Object)))]
fn task_action() {}

/// A2A over JSON-RPC 2.0
///
/// Methods `SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask` and
/// `SubscribeToTask`. Errors are JSON-RPC error objects with HTTP 200; a `read:` token may call
/// only GetTask, ListTasks and SubscribeToTask.
#[utoipa::path(post, path = "/a2a/jsonrpc", tag = "agent-protocols",
    request_body(content = Object, description = "A JSON-RPC 2.0 request"),
    responses((status = 200, description = "A JSON-RPC 2.0 response, or a text/event-stream of them for the streaming methods", body = Object),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
fn jsonrpc() {}
