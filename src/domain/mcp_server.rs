//! MCP servers by name: streamable HTTP servers defined through the API (kept in Postgres) or in
//! the `AGENTDESK_MCP_CONFIG` file, and stdio servers (child processes), from that file only.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

pub const DEFAULT_MCP_TIMEOUT_MS: i64 = 60_000;
pub const MIN_MCP_TIMEOUT_MS: i64 = 100;
pub const MAX_MCP_TIMEOUT_MS: i64 = 3_600_000;
/// What an agent's `tools` entry names to get every tool of a server: `mcp:{server}`.
pub const MCP_PREFIX: &str = "mcp:";
/// Between the server's name and the tool's in the name the model sees: `{server}__{tool}`.
pub const MCP_SEPARATOR: &str = "__";

/// 1 to 32 of `[a-zA-Z0-9_-]`.
pub fn is_valid_mcp_server_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether a server's tools need a person's approval before a call runs: all, none, or those
/// named (by the server's own tool names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RequiresApproval {
    All(bool),
    Tools(Vec<String>),
}

impl Default for RequiresApproval {
    fn default() -> Self {
        RequiresApproval::All(false)
    }
}

impl RequiresApproval {
    pub fn for_tool(&self, tool: &str) -> bool {
        match self {
            RequiresApproval::All(all) => *all,
            RequiresApproval::Tools(tools) => tools.iter().any(|t| t == tool),
        }
    }
}

/// How the desk reaches a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// Streamable HTTP; `url` and header values may hold `${env:NAME}` templates, expanded only
    /// when connecting.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
    /// A child process speaking MCP over stdio; `env` values may hold templates too.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
}

/// A server's definition, as written (templates unexpanded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerDef {
    pub name: String,
    pub transport: McpTransport,
    pub timeout_ms: i64,
    pub requires_approval: RequiresApproval,
    /// How long a call of its tools waits for approval (beats the agent's); None: the agent's.
    pub approval_timeout_secs: Option<i32>,
    pub on_timeout: Option<super::tool::OnTimeout>,
    /// From the config file: read-only through the API.
    pub from_config: bool,
    /// Bumped by every replacement: a connection made for an older revision is dropped.
    pub revision: i64,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// A tool as the server last listed it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpToolInfo {
    /// The server's own name for it.
    pub name: String,
    /// The name the model sees and an agent's `tools` may list: `{server}__{tool}`.
    pub qualified_name: String,
    pub description: String,
    #[schema(value_type = Object)]
    pub input_schema: Value,
    pub requires_approval: bool,
}

/// What the API shows of a server.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct McpServerView {
    pub name: String,
    /// Streamable HTTP servers: the URL as given (templates unexpanded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Header values as given: `${env:NAME}` templates are never shown expanded.
    pub headers: BTreeMap<String, String>,
    /// Stdio servers (config file only): the command and its arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    pub timeout_ms: i64,
    pub requires_approval: RequiresApproval,
    /// Seconds a call of its tools waits for approval before the desk answers `on_timeout`;
    /// null: the agent's setting.
    #[schema(minimum = 1, maximum = 31536000)]
    pub approval_timeout_secs: Option<i32>,
    /// `deny` (default), `approve` or `fail`.
    pub on_timeout: Option<super::tool::OnTimeout>,
    /// `api` (defined through the API) or `config` (from `AGENTDESK_MCP_CONFIG`, read-only).
    pub source: &'static str,
    /// The tools as last listed (empty before the first listing).
    pub tools: Vec<McpToolInfo>,
    /// `ok`, `pending` (not listed yet), or the last error (`forbidden_address: …` when the
    /// address guard refused the server's address).
    pub status: String,
    pub listed_at: Option<DateTime<Utc>>,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_approvals() {
        assert!(is_valid_mcp_server_name("git-hub_2"));
        assert!(!is_valid_mcp_server_name(""));
        assert!(!is_valid_mcp_server_name("a.b"));
        assert!(!is_valid_mcp_server_name(&"a".repeat(33)));
        let some: RequiresApproval = serde_json::from_str(r#"["push"]"#).unwrap();
        assert!(some.for_tool("push") && !some.for_tool("pull"));
        let all: RequiresApproval = serde_json::from_str("true").unwrap();
        assert!(all.for_tool("anything"));
        assert!(!RequiresApproval::default().for_tool("anything"));
        assert!(serde_json::from_str::<RequiresApproval>(r#""yes""#).is_err());
    }
}
