//! An MCP server's tool as a desk [`Tool`]: shown to the model as `{server}__{tool}`, called on
//! the server's connection with the server's timeout; whatever goes wrong is an error result.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::Peer;
use rmcp::{RoleClient, ServiceError};
use serde_json::Value;

use super::connection::transport_text;
use crate::domain::McpToolInfo;
use crate::tools::{Tool, ToolContext, ToolErrorKind, ToolOutcome};

/// What a tool needs of its server (`server::ServerHandle`): a connection to call on, the
/// server's timeout, its secrets cut out of messages, and dropping a connection that broke.
/// A trait, so that the server lists its tools without the tools naming it back.
#[async_trait]
pub(crate) trait ToolServer: Send + Sync {
    async fn call_peer(self: Arc<Self>) -> Result<Peer<RoleClient>, String>;
    fn timeout(&self) -> Duration;
    /// How long a call of its tools waits for approval, by the server's own setting.
    fn approval_deadline(&self) -> Option<crate::domain::tool::ApprovalDeadline>;
    fn redact(&self, message: &str) -> String;
    async fn drop_connection(&self);
}

pub struct McpTool {
    pub(crate) info: McpToolInfo,
    /// Weak: a server removed or redefined makes its old tools fail as missing.
    server: Weak<dyn ToolServer>,
}

impl McpTool {
    pub(crate) fn new(info: McpToolInfo, server: Weak<dyn ToolServer>) -> Self {
        McpTool { info, server }
    }

    /// The server's own name of the tool.
    pub fn remote_name(&self) -> &str {
        &self.info.name
    }
}

fn failed(kind: ToolErrorKind, message: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Failed {
        kind,
        message: message.into(),
    }
}

/// The text a result shows the model: its text blocks in order, other blocks as JSON, and the
/// structured content when there is nothing else.
fn result_text(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            other => serde_json::to_string(other).unwrap_or_default(),
        })
        .collect();
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    parts.join("\n")
}

#[async_trait]
impl Tool for McpTool {
    // The model's name for the tool is the qualified one; `info.name` is the server's.
    #[allow(clippy::misnamed_getters)]
    fn name(&self) -> &str {
        &self.info.qualified_name
    }

    fn description(&self) -> &str {
        &self.info.description
    }

    fn input_schema(&self) -> &Value {
        &self.info.input_schema
    }

    fn requires_approval(&self) -> bool {
        self.info.requires_approval
    }

    fn approval_deadline(&self) -> Option<crate::domain::tool::ApprovalDeadline> {
        self.server.upgrade()?.approval_deadline()
    }

    async fn call(&self, ctx: &ToolContext<'_>, input: &Value) -> ToolOutcome {
        let Some(server) = self.server.upgrade() else {
            return failed(
                ToolErrorKind::UnknownTool,
                format!("The tool {:?} is no longer available.", self.info.qualified_name),
            );
        };
        let name = self.info.qualified_name.as_str();
        let peer = match server.clone().call_peer().await {
            Ok(peer) => peer,
            Err(status) if status.starts_with("forbidden_address") => {
                return failed(ToolErrorKind::ForbiddenAddress, status);
            }
            Err(status) => {
                return failed(
                    ToolErrorKind::Remote,
                    format!("{name}: the MCP server is unavailable: {status}"),
                )
            }
        };
        let arguments = match input {
            Value::Object(map) => map.clone(),
            _ => serde_json::Map::new(),
        };
        let params = CallToolRequestParams::new(self.info.name.clone()).with_arguments(arguments);
        let timeout = server.timeout();
        // Dropping the call (cancelled, or past its timeout) sends `notifications/cancelled`.
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(timeout, peer.call_tool(params)) => outcome,
            _ = ctx.cancel.cancelled() => {
                return failed(ToolErrorKind::Conflict, format!("{name}: the call was cancelled"));
            }
        };
        match outcome {
            Err(_) => failed(
                ToolErrorKind::Timeout,
                format!("{name}: no answer within {} ms", timeout.as_millis()),
            ),
            Ok(Ok(result)) if result.is_error == Some(true) => failed(ToolErrorKind::Remote, result_text(&result)),
            Ok(Ok(result)) => ToolOutcome::Output(result_text(&result)),
            Ok(Err(ServiceError::McpError(error))) => failed(
                ToolErrorKind::Remote,
                server.redact(&format!(
                    "{name}: the MCP server answered with error {}: {}",
                    error.code.0, error.message
                )),
            ),
            Ok(Err(error)) => {
                let text = match &error {
                    ServiceError::TransportSend(e) => transport_text(&*e.error),
                    other => other.to_string(),
                };
                if matches!(error, ServiceError::TransportClosed | ServiceError::TransportSend(_)) {
                    server.drop_connection().await;
                }
                failed(
                    ToolErrorKind::Remote,
                    server.redact(&format!("{name}: the MCP call failed: {text}")),
                )
            }
        }
    }
}
