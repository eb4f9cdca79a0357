//! One server as this process knows it: its definition, its connection (made on demand and
//! kept), and its tools as last listed.

use std::sync::{Arc, RwLock, Weak};

use chrono::{DateTime, Utc};
use rmcp::model::{ClientConfig, Implementation};
use rmcp::service::Peer;
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::Value;
use sqlx::PgPool;

use super::connection::{self, Secrets, LEGACY_VERSION};
use super::tool::{McpTool, ToolServer};
use crate::db;
use crate::domain::mcp_server::MCP_SEPARATOR;
use crate::domain::{McpServerDef, McpToolInfo, ProjectId};
use crate::net::guard::AddressGuard;

/// The status of a server not listed yet.
pub const PENDING: &str = "pending";
/// The longest a tool name the model sees may be.
const MAX_TOOL_NAME: usize = 64;

/// What the last listing (or the failure to list) left.
#[derive(Clone)]
pub(crate) struct Listing {
    pub tools: Vec<Arc<McpTool>>,
    pub status: String,
    pub listed_at: Option<DateTime<Utc>>,
}

/// The connection to one server, with the answers the client side gives it.
pub(crate) type Running = RunningService<RoleClient, Handler>;

/// The client side's answers to the server: who we are, and a re-listing when the server says
/// its tools changed.
#[derive(Clone)]
pub(crate) struct Handler {
    pub server: Weak<ServerHandle>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.protocol_version = LEGACY_VERSION;
        info.client_info = Implementation::new("agentdesk", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(server) = self.server.upgrade() {
            tokio::spawn(async move {
                server.relist().await;
            });
        }
    }
}

pub(crate) struct ServerHandle {
    pub def: McpServerDef,
    guard: AddressGuard,
    http: reqwest::Client,
    /// Where API-defined servers record their listings (and whose project they are), for every
    /// process to show.
    store: Option<(PgPool, ProjectId)>,
    /// The live connection; held only while connecting, so calls run side by side on the peer.
    conn: tokio::sync::Mutex<Option<Running>>,
    listing: RwLock<Listing>,
    /// What the current connection's templates expanded to.
    secrets: RwLock<Secrets>,
    /// When the last attempt to connect or list failed (None after a success).
    failed_at: RwLock<Option<std::time::Instant>>,
}

impl ServerHandle {
    pub fn new(
        def: McpServerDef,
        guard: AddressGuard,
        http: reqwest::Client,
        store: Option<(PgPool, ProjectId)>,
    ) -> Arc<Self> {
        Arc::new(ServerHandle {
            def,
            guard,
            http,
            store,
            conn: tokio::sync::Mutex::new(None),
            listing: RwLock::new(Listing {
                tools: Vec::new(),
                status: PENDING.to_owned(),
                listed_at: None,
            }),
            secrets: RwLock::new(Secrets::default()),
            failed_at: RwLock::new(None),
        })
    }

    pub fn listing(&self) -> Listing {
        self.listing.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the last attempt failed less than `pause` ago: resolving an agent's tools does
    /// not wait for another attempt then (a call still makes one).
    pub fn failed_within(&self, pause: std::time::Duration) -> bool {
        self.failed_at
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < pause)
    }

    pub fn is_listed(&self) -> bool {
        self.listing().listed_at.is_some()
    }

    /// The connected peer, connecting first when there is none or the last one closed. The bool
    /// says whether this call connected (so the caller lists the tools).
    async fn peer(self: &Arc<Self>) -> Result<(Peer<RoleClient>, bool), String> {
        let mut conn = self.conn.lock().await;
        if let Some(running) = conn.as_ref() {
            if !running.is_closed() && !running.peer().is_transport_closed() {
                return Ok((running.peer().clone(), false));
            }
        }
        let handler = Handler {
            server: Arc::downgrade(self),
        };
        let (running, secrets) = connection::connect(&self.def.transport, self.guard, &self.http, handler).await?;
        *self.secrets.write().unwrap_or_else(|e| e.into_inner()) = secrets;
        let peer = running.peer().clone();
        if let Some(mut old) = conn.replace(running) {
            tokio::spawn(async move {
                let _ = old.close().await;
            });
        }
        Ok((peer, true))
    }

    /// A peer to call tools on: connects (and lists) when needed. Err: the status text.
    pub async fn call_peer(self: &Arc<Self>) -> Result<Peer<RoleClient>, String> {
        match self.peer().await {
            Ok((peer, connected)) => {
                if connected {
                    self.list_with(&peer).await;
                }
                Ok(peer)
            }
            Err(status) => {
                self.record(None, &status).await;
                Err(status)
            }
        }
    }

    /// Connects if needed and lists the tools again; the result (or the error) is the new
    /// listing.
    pub async fn relist(self: &Arc<Self>) {
        match self.peer().await {
            Ok((peer, _)) => self.list_with(&peer).await,
            Err(status) => self.record(None, &status).await,
        }
    }

    /// Whether the connection is up (false before the first connect and after the server closed
    /// it or died).
    pub async fn is_connected(&self) -> bool {
        let conn = self.conn.lock().await;
        conn.as_ref()
            .is_some_and(|r| !r.is_closed() && !r.peer().is_transport_closed())
    }

    /// Forgets a connection that failed, so the next call connects again.
    pub async fn drop_connection(&self) {
        if let Some(mut old) = self.conn.lock().await.take() {
            tokio::spawn(async move {
                let _ = old.close().await;
            });
        }
    }

    /// Closes the connection (a stdio server's child process ends with it).
    pub async fn close(&self) {
        if let Some(mut old) = self.conn.lock().await.take() {
            let _ = old.close_with_timeout(std::time::Duration::from_secs(5)).await;
        }
    }

    async fn list_with(self: &Arc<Self>, peer: &Peer<RoleClient>) {
        let listed = tokio::time::timeout(self.timeout(), peer.list_all_tools()).await;
        match listed {
            Ok(Ok(tools)) => {
                let tools = self.tools_from(tools);
                self.record(Some(tools), "ok").await;
            }
            Ok(Err(e)) => {
                self.record(None, &self.redact(&format!("tools/list failed: {e}")))
                    .await
            }
            Err(_) => self.record(None, "tools/list timed out").await,
        }
    }

    /// `message` without any value a `${env:…}` template of this server expanded to.
    pub fn redact(&self, message: &str) -> String {
        self.secrets.read().unwrap_or_else(|e| e.into_inner()).redact(message)
    }

    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.def.timeout_ms.max(1) as u64)
    }

    fn tools_from(self: &Arc<Self>, listed: Vec<rmcp::model::Tool>) -> Vec<Arc<McpTool>> {
        let mut seen = std::collections::HashSet::new();
        let mut tools = Vec::new();
        for tool in listed {
            let qualified = qualified_name(&self.def.name, &tool.name);
            if !seen.insert(qualified.clone()) {
                tracing::warn!(server = %self.def.name, tool = %tool.name, "two MCP tools share a name; the second is left out");
                continue;
            }
            let mut schema = Value::Object((*tool.input_schema).clone());
            if schema.get("type").is_none() {
                schema["type"] = Value::from("object");
            }
            let info = McpToolInfo {
                name: tool.name.to_string(),
                qualified_name: qualified,
                description: tool.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: schema,
                requires_approval: self.def.requires_approval.for_tool(&tool.name),
            };
            let server: Weak<dyn ToolServer> = Arc::downgrade(self) as Weak<ServerHandle>;
            tools.push(Arc::new(McpTool::new(info, server)));
        }
        tools
    }

    /// Stores a listing (`tools` Some) or an error status; API servers also in Postgres, for
    /// the revision this handle was made for (a replaced definition's listing changes nothing).
    async fn record(&self, tools: Option<Vec<Arc<McpTool>>>, status: &str) {
        let infos: Option<Vec<McpToolInfo>> = tools.as_ref().map(|t| t.iter().map(|t| t.info.clone()).collect());
        {
            let mut listing = self.listing.write().unwrap_or_else(|e| e.into_inner());
            if let Some(tools) = tools {
                listing.tools = tools;
                listing.listed_at = Some(Utc::now());
            }
            listing.status = status.to_owned();
        }
        *self.failed_at.write().unwrap_or_else(|e| e.into_inner()) = (status != "ok").then(std::time::Instant::now);
        if status != "ok" {
            tracing::warn!(server = %self.def.name, status, "MCP server unavailable");
        }
        if let Some((pool, project)) = &self.store {
            let (name, revision) = (&self.def.name, self.def.revision);
            let stored =
                db::mcp_servers::record_listing(pool, *project, name, revision, infos.as_deref(), status).await;
            if let Err(e) = stored {
                tracing::warn!(server = %self.def.name, error = %e, "cannot record an MCP server's listing");
            }
        }
    }
}

#[async_trait::async_trait]
impl ToolServer for ServerHandle {
    async fn call_peer(self: Arc<Self>) -> Result<Peer<RoleClient>, String> {
        ServerHandle::call_peer(&self).await
    }

    fn timeout(&self) -> std::time::Duration {
        ServerHandle::timeout(self)
    }

    fn approval_deadline(&self) -> Option<crate::domain::tool::ApprovalDeadline> {
        crate::domain::tool::ApprovalDeadline::of(self.def.approval_timeout_secs, self.def.on_timeout)
    }

    fn redact(&self, message: &str) -> String {
        ServerHandle::redact(self, message)
    }

    async fn drop_connection(&self) {
        ServerHandle::drop_connection(self).await
    }
}

/// `{server}__{tool}`, the tool's part limited to the characters and length model providers
/// accept in a tool name.
pub fn qualified_name(server: &str, tool: &str) -> String {
    let mut name = format!("{server}{MCP_SEPARATOR}");
    for c in tool.chars() {
        if name.len() >= MAX_TOOL_NAME {
            break;
        }
        name.push(if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            c
        } else {
            '_'
        });
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_keep_to_what_models_accept() {
        assert_eq!(qualified_name("gh", "search_issues"), "gh__search_issues");
        assert_eq!(qualified_name("gh", "repo.read/file"), "gh__repo_read_file");
        let long = qualified_name("server", &"t".repeat(100));
        assert_eq!(long.len(), 64);
        assert!(long.starts_with("server__t"));
    }
}
