//! MCP client tools: the desk connects to MCP servers (streamable HTTP, or stdio child processes
//! from the config file), lists their tools, and lends them to agents as `{server}__{tool}`.
//!
//! One [`McpHub`] per process holds the connections. Servers defined through the API live in
//! Postgres, each in its project (an agent sees its own project's servers, and the config file's
//! belong to `default`), so every process sees them: the hub looks a server up when an agent's tools are
//! resolved and reconnects when its definition changed (its revision). Config-file servers live
//! in memory; stdio ones are kept running (restarted with backoff if they die) until shutdown.

pub mod config;
mod connection;
pub mod http_client;
mod server;
pub mod tool;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::db::mcp_servers::StoredServer;
use crate::domain::mcp_server::{MCP_PREFIX, MCP_SEPARATOR};
use crate::domain::{McpServerDef, McpServerView, McpToolInfo, McpTransport, ProjectId};
use crate::net::backoff::Backoff;
use crate::net::guard::AddressGuard;
use crate::tools::Tool;
use server::ServerHandle;
pub use server::{qualified_name, PENDING};
pub use tool::McpTool;

/// How often a process re-reads the names of the API's servers, for [`McpHub::knows`].
const NAMES_REFRESH: Duration = Duration::from_secs(5);
/// After a failed attempt, how long resolving an agent's tools goes on without trying again, so
/// a server that is down does not slow every step of the agents naming it.
const RETRY_PAUSE: Duration = Duration::from_secs(5);
/// The longest `PUT` and refresh wait for a listing before they answer with what they have.
const LIST_WAIT: Duration = Duration::from_secs(15);

/// How a hub is set up.
#[derive(Clone, Debug)]
pub struct McpOptions {
    /// The address guard for HTTP servers (from the config).
    pub guard: AddressGuard,
    /// `AGENTDESK_MCP_CONFIG`: the `{"mcpServers": …}` file read at start-up.
    pub config_file: Option<PathBuf>,
}

/// The process's MCP servers and their connections; cheap to clone.
#[derive(Clone)]
pub struct McpHub {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    guard: AddressGuard,
    http: reqwest::Client,
    /// From the config file, by name; never changes. They belong to `default`.
    config_servers: HashMap<String, Arc<ServerHandle>>,
    /// The API's servers by project and name, as this process last used them.
    api_servers: tokio::sync::Mutex<HashMap<(ProjectId, String), Arc<ServerHandle>>>,
    /// Projects and names of the API's servers, for the synchronous [`McpHub::knows`].
    api_names: RwLock<ApiNames>,
    shutdown: CancellationToken,
}

/// The API's server names this process knows, and how many times this process changed them.
struct ApiNames {
    names: HashSet<(ProjectId, String)>,
    /// Counts this process's own puts and deletes: a periodic re-read that began before one of
    /// them would put back the list without it, so it is dropped (the next one is fresh).
    changes: u64,
}

/// The catalog resolves `mcp:{server}` and `{server}__{tool}` names through the hub.
#[async_trait::async_trait]
impl crate::tools::catalog::ToolLender for McpHub {
    fn knows(&self, project: ProjectId, name: &str) -> bool {
        McpHub::knows(self, project, name)
    }

    async fn resolve(&self, project: ProjectId, name: &str) -> Vec<Arc<dyn Tool>> {
        McpHub::resolve(self, project, name).await
    }
}

impl McpHub {
    /// Reads the config file (a bad one is an error), loads the API's server names, and starts
    /// the stdio servers and the background tasks, which end with `shutdown`.
    pub async fn start(pool: PgPool, options: McpOptions, shutdown: CancellationToken) -> anyhow::Result<McpHub> {
        let guard = options.guard;
        // Connections stay open (SSE streams): no overall timeout here; each call has its own.
        let http = guard.client_builder().build()?;
        let defs = match &options.config_file {
            Some(path) => config::read(path)?,
            None => Vec::new(),
        };
        let config_servers = defs
            .into_iter()
            .map(|def| (def.name.clone(), ServerHandle::new(def, guard, http.clone(), None)))
            .collect::<HashMap<_, _>>();
        let names = db::mcp_servers::names(&pool).await?;
        let hub = McpHub {
            inner: Arc::new(Inner {
                pool,
                guard,
                http,
                config_servers,
                api_servers: tokio::sync::Mutex::new(HashMap::new()),
                api_names: RwLock::new(ApiNames {
                    names: names.into_iter().collect(),
                    changes: 0,
                }),
                shutdown,
            }),
        };
        for server in hub.inner.config_servers.values() {
            if matches!(server.def.transport, McpTransport::Stdio { .. }) {
                tokio::spawn(supervise(server.clone(), hub.inner.shutdown.clone()));
            }
        }
        tokio::spawn(refresh_names(Arc::downgrade(&hub.inner)));
        Ok(hub)
    }

    /// Whether an agent's `tools` entry names MCP tools of a server that exists: `mcp:{server}`
    /// or `{server}__{tool}` (the tool itself is looked up when the agent runs).
    pub fn knows(&self, project: ProjectId, name: &str) -> bool {
        self.split(project, name).is_some()
    }

    /// For a `{server}__{tool}` entry of a server that exists: the tool's server, when its last
    /// listing went well and did not hold the tool. A server not listed yet, or not reachable
    /// now, is given the benefit of the doubt: the tool is looked up when the agent runs.
    pub async fn listing_without(&self, project: ProjectId, name: &str) -> Result<Option<String>, sqlx::Error> {
        let Some((server, Some(tool))) = self.split(project, name) else {
            return Ok(None);
        };
        let Some(view) = self.get(project, server).await? else {
            return Ok(None);
        };
        let lacks = view.status == "ok" && !view.tools.iter().any(|t| t.name == tool);
        Ok(lacks.then(|| server.to_owned()))
    }

    /// The server and (for `{server}__{tool}`) the tool an entry names, when the server exists.
    fn split<'n>(&self, project: ProjectId, name: &'n str) -> Option<(&'n str, Option<&'n str>)> {
        let exists = |server: &str| {
            self.is_config_server(project, server)
                || self
                    .inner
                    .api_names
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .names
                    .contains(&(project, server.to_owned()))
        };
        if let Some(server) = name.strip_prefix(MCP_PREFIX) {
            return exists(server).then_some((server, None));
        }
        // A server's name may hold `__` itself: try every split.
        let mut from = 0;
        while let Some(at) = name[from..].find(MCP_SEPARATOR) {
            let (server, tool) = (&name[..from + at], &name[from + at + MCP_SEPARATOR.len()..]);
            if !tool.is_empty() && exists(server) {
                return Some((server, Some(tool)));
            }
            from += at + 1;
        }
        None
    }

    /// The tools an agent's `tools` entry stands for now, connecting and listing when needed;
    /// empty when the server or tool is gone or cannot be reached.
    pub async fn resolve(&self, project: ProjectId, name: &str) -> Vec<Arc<dyn Tool>> {
        let (server, tool) = match name.strip_prefix(MCP_PREFIX) {
            Some(server) => (server.to_owned(), None),
            None => {
                // The names cache may be behind another process: look the server up either way.
                match self.split(project, name) {
                    Some((server, tool)) => (server.to_owned(), tool.map(str::to_owned)),
                    None => match name.split_once(MCP_SEPARATOR) {
                        Some((server, tool)) => (server.to_owned(), Some(tool.to_owned())),
                        None => return Vec::new(),
                    },
                }
            }
        };
        let Some(handle) = self.handle(project, &server).await else {
            return Vec::new();
        };
        if (!handle.is_listed() || !handle.is_connected().await) && !handle.failed_within(RETRY_PAUSE) {
            handle.relist().await;
        }
        handle
            .listing()
            .tools
            .into_iter()
            .filter(|t| {
                tool.as_deref()
                    .is_none_or(|tool| t.info.qualified_name == name || t.info.name == tool)
            })
            .map(|t| t as Arc<dyn Tool>)
            .collect()
    }

    /// The live handle of a server: a config-file one, or the API's current definition (one
    /// primary-key lookup), replacing a handle made for an older revision.
    async fn handle(&self, project: ProjectId, server: &str) -> Option<Arc<ServerHandle>> {
        if self.is_config_server(project, server) {
            return self.inner.config_servers.get(server).cloned();
        }
        let stored = match db::mcp_servers::get(&self.inner.pool, project, server).await {
            Ok(stored) => stored,
            Err(e) => {
                tracing::warn!(server, error = %e, "cannot look up an MCP server");
                // The store is down: keep using what this process has.
                let key = (project, server.to_owned());
                return self.inner.api_servers.lock().await.get(&key).cloned();
            }
        };
        self.adopt(project, server, stored.map(|s| s.def)).await
    }

    /// Makes `def` the server's current definition in this process (None: it is gone).
    async fn adopt(&self, project: ProjectId, server: &str, def: Option<McpServerDef>) -> Option<Arc<ServerHandle>> {
        let key = (project, server.to_owned());
        let mut servers = self.inner.api_servers.lock().await;
        let Some(def) = def else {
            self.set_name(&key, false);
            if let Some(old) = servers.remove(&key) {
                tokio::spawn(async move { old.close().await });
            }
            return None;
        };
        self.set_name(&key, true);
        if let Some(handle) = servers.get(&key) {
            if handle.def.revision == def.revision {
                return Some(handle.clone());
            }
        }
        let handle = ServerHandle::new(
            def,
            self.inner.guard,
            self.inner.http.clone(),
            Some((self.inner.pool.clone(), project)),
        );
        if let Some(old) = servers.insert(key, handle.clone()) {
            tokio::spawn(async move { old.close().await });
        }
        Some(handle)
    }

    fn set_name(&self, key: &(ProjectId, String), present: bool) {
        let mut api = self.inner.api_names.write().unwrap_or_else(|e| e.into_inner());
        api.changes += 1;
        if present {
            api.names.insert(key.clone());
        } else {
            api.names.remove(key);
        }
    }

    /// Whether `name` is a config-file server (read-only through the API), seen in `project`:
    /// they belong to `default`.
    pub fn is_config_server(&self, project: ProjectId, name: &str) -> bool {
        project == ProjectId::DEFAULT && self.inner.config_servers.contains_key(name)
    }

    /// Every server of a project: the config file's (in `default`), then the API's, by name.
    pub async fn list(&self, project: ProjectId) -> Result<Vec<McpServerView>, sqlx::Error> {
        let mut config: Vec<&Arc<ServerHandle>> = self.inner.config_servers.values().collect();
        config.retain(|_| project == ProjectId::DEFAULT);
        config.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        let mut items: Vec<McpServerView> = config.into_iter().map(|h| config_view(h)).collect();
        items.extend(
            db::mcp_servers::all(&self.inner.pool, project)
                .await?
                .into_iter()
                .map(stored_view),
        );
        Ok(items)
    }

    pub async fn get(&self, project: ProjectId, name: &str) -> Result<Option<McpServerView>, sqlx::Error> {
        if self.is_config_server(project, name) {
            return Ok(self.inner.config_servers.get(name).map(|h| config_view(h)));
        }
        Ok(db::mcp_servers::get(&self.inner.pool, project, name)
            .await?
            .map(stored_view))
    }

    /// Defines or replaces an API server (an HTTP one), then connects and lists its tools,
    /// waiting at most a few seconds: the answer shows the outcome (or `pending`). True: created.
    pub async fn put(&self, project: ProjectId, def: &McpServerDef) -> Result<(McpServerView, bool), sqlx::Error> {
        // The upsert is one statement; the revision it returns fences the listing recorded next.
        let (stored, created) = db::mcp_servers::upsert(&self.inner.pool, project, def).await?;
        if let Some(handle) = self.adopt(project, &def.name, Some(stored.def.clone())).await {
            let _ = tokio::time::timeout(LIST_WAIT.min(handle.timeout()), handle.relist()).await;
        }
        let view = self
            .get(project, &def.name)
            .await?
            .unwrap_or_else(|| stored_view(stored));
        Ok((view, created))
    }

    /// Deletes an API server; false when there was none. Agents naming it see its tools missing.
    pub async fn delete(&self, project: ProjectId, name: &str) -> Result<bool, sqlx::Error> {
        let deleted = db::mcp_servers::delete(&self.inner.pool, project, name).await?;
        self.adopt(project, name, None).await;
        Ok(deleted)
    }

    /// Connects if needed and lists a server's tools again; None when there is no such server.
    pub async fn refresh(&self, project: ProjectId, name: &str) -> Result<Option<McpServerView>, sqlx::Error> {
        let Some(handle) = self.handle(project, name).await else {
            return Ok(None);
        };
        let _ = tokio::time::timeout(LIST_WAIT.min(handle.timeout()), handle.relist()).await;
        self.get(project, name).await
    }

    /// Closes every connection; stdio servers' child processes end with them.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        let api: Vec<_> = self.inner.api_servers.lock().await.drain().map(|(_, h)| h).collect();
        let all = api.into_iter().chain(self.inner.config_servers.values().cloned());
        futures::future::join_all(all.map(|h| async move { h.close().await })).await;
    }
}

fn config_view(handle: &ServerHandle) -> McpServerView {
    let listing = handle.listing();
    let def = &handle.def;
    let mut view = McpServerView {
        name: def.name.clone(),
        url: None,
        headers: BTreeMap::new(),
        command: None,
        args: None,
        timeout_ms: def.timeout_ms,
        requires_approval: def.requires_approval.clone(),
        approval_timeout_secs: def.approval_timeout_secs,
        on_timeout: def.on_timeout,
        source: "config",
        tools: listing
            .tools
            .iter()
            .map(|t| t.info.clone())
            .collect::<Vec<McpToolInfo>>(),
        status: listing.status,
        listed_at: listing.listed_at,
        created_at: None,
        updated_at: None,
    };
    match &def.transport {
        McpTransport::Http { url, headers } => {
            view.url = Some(url.clone());
            view.headers = headers.clone();
        }
        // `env` is not shown: a config file may hold plain secrets there.
        McpTransport::Stdio { command, args, .. } => {
            view.command = Some(command.clone());
            view.args = Some(args.clone());
        }
    }
    view
}

fn stored_view(stored: StoredServer) -> McpServerView {
    let def = stored.def;
    let (url, headers) = match def.transport {
        McpTransport::Http { url, headers } => (Some(url), headers),
        McpTransport::Stdio { .. } => (None, BTreeMap::new()),
    };
    McpServerView {
        name: def.name,
        url,
        headers,
        command: None,
        args: None,
        timeout_ms: def.timeout_ms,
        requires_approval: def.requires_approval,
        approval_timeout_secs: def.approval_timeout_secs,
        on_timeout: def.on_timeout,
        source: "api",
        tools: stored.tools,
        status: stored.status,
        listed_at: stored.listed_at,
        created_at: def.created_at,
        updated_at: def.updated_at,
    }
}

/// Keeps a stdio server running: connects, watches the connection, and restarts the process
/// when it dies, waiting longer after each quick failure (0.5 s doubling to 30 s).
async fn supervise(server: Arc<ServerHandle>, shutdown: CancellationToken) {
    const RESTART: Backoff = Backoff::doubling(Duration::from_millis(500), Duration::from_secs(30));
    let mut failures = 0;
    loop {
        server.relist().await;
        let started = tokio::time::Instant::now();
        // Watch until the connection is lost.
        while server.is_connected().await {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    server.close().await;
                    return;
                }
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
        // A server that ran a while failed anew, not again.
        failures = if started.elapsed() > Duration::from_secs(30) {
            1
        } else {
            failures + 1
        };
        let backoff = RESTART.delay(failures);
        tracing::warn!(server = %server.def.name, retry_in_ms = backoff.as_millis() as u64, "MCP stdio server stopped; restarting it");
        tokio::select! {
            _ = shutdown.cancelled() => {
                server.close().await;
                return;
            }
            _ = tokio::time::sleep(backoff) => {}
        }
    }
}

/// Re-reads the API's server names now and then, so `knows` sees servers another process
/// defined; ends when the hub is dropped or shut down.
async fn refresh_names(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(hub) = inner.upgrade() else { return };
        let shutdown = hub.shutdown.clone();
        let changes_before = hub.api_names.read().unwrap_or_else(|e| e.into_inner()).changes;
        match db::mcp_servers::names(&hub.pool).await {
            Ok(names) => {
                let mut api = hub.api_names.write().unwrap_or_else(|e| e.into_inner());
                // A put or delete of this process since the read began is newer than what it read.
                if api.changes == changes_before {
                    api.names = names.into_iter().collect();
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot refresh the MCP server names"),
        }
        drop(hub);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(NAMES_REFRESH) => {}
        }
    }
}
