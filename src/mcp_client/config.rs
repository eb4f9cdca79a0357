//! `AGENTDESK_MCP_CONFIG`: the widespread `{"mcpServers": {...}}` file, read at start-up. An entry
//! with `url` is a streamable HTTP server, one with `command` a child process over stdio (the
//! only way to define one).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::domain::mcp_server::{is_valid_mcp_server_name, DEFAULT_MCP_TIMEOUT_MS};
use crate::domain::{McpServerDef, McpTransport, RequiresApproval};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    #[serde(default)]
    mcp_servers: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    timeout_ms: Option<i64>,
    #[serde(default)]
    requires_approval: RequiresApproval,
}

/// The servers a config file defines; Err names what is wrong (start-up stops on it).
pub fn read(path: &Path) -> anyhow::Result<Vec<McpServerDef>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&text).with_context(|| format!("invalid MCP config {}", path.display()))
}

pub fn parse(text: &str) -> anyhow::Result<Vec<McpServerDef>> {
    let file: File = serde_json::from_str(text)?;
    let mut servers = Vec::new();
    for (name, entry) in file.mcp_servers {
        if !is_valid_mcp_server_name(&name) {
            bail!("server name {name:?}: use 1 to 32 letters, digits, '-' or '_'");
        }
        let transport = match (entry.url, entry.command) {
            (Some(url), None) => McpTransport::Http {
                url,
                headers: entry.headers,
            },
            (None, Some(command)) => McpTransport::Stdio {
                command,
                args: entry.args,
                env: entry.env,
            },
            _ => bail!("server {name:?}: give either `url` or `command`"),
        };
        servers.push(McpServerDef {
            name,
            transport,
            timeout_ms: entry.timeout_ms.unwrap_or(DEFAULT_MCP_TIMEOUT_MS),
            requires_approval: entry.requires_approval,
            approval_timeout_secs: None,
            on_timeout: None,
            from_config: true,
            revision: 0,
            created_at: None,
            updated_at: None,
        });
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_kinds_of_server() {
        let servers = parse(
            r#"{"mcpServers": {
                "web": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${env:T}"}},
                "files": {"command": "mcp-files", "args": ["--root", "/srv"], "env": {"A": "b"}}
            }}"#,
        )
        .unwrap();
        assert_eq!(servers.len(), 2);
        assert!(matches!(&servers[0].transport, McpTransport::Stdio { command, .. } if command == "mcp-files"));
        assert!(matches!(&servers[1].transport, McpTransport::Http { url, .. } if url.ends_with("/mcp")));
        assert!(servers.iter().all(|s| s.from_config));
    }

    #[test]
    fn refuses_bad_entries() {
        assert!(parse(r#"{"mcpServers": {"x": {}}}"#).is_err());
        assert!(parse(r#"{"mcpServers": {"x": {"url": "u", "command": "c"}}}"#).is_err());
        assert!(parse(r#"{"mcpServers": {"bad name": {"url": "u"}}}"#).is_err());
        assert!(parse("not json").is_err());
    }
}
