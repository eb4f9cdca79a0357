//! The one place an agent's tool names become the tools of a step. A name is a built-in tool, an
//! HTTP tool (`/v1/tools`), or, once MCP servers are wired in, `mcp:{server}` (all of a server's
//! tools) or `{server}__{tool}`.
//!
//! An agent that names only built-ins gets the process's built-in registry: no query, no
//! allocation, so the hot path does not pay for custom tools. Any other agent's tools are loaded
//! per step (one query), so a tool changed or removed through the API takes effect at the next
//! step; a name that resolves to nothing is left out of the request, and a call of it gets an
//! `unknown_tool` error result: the model sees the tool as missing, nothing crashes.

use std::borrow::Cow;
use std::sync::Arc;

use sqlx::PgPool;

use super::builtin::BUILTIN_TOOLS;
use super::http::HttpToolClient;
use super::ToolRegistry;
use crate::db;
use crate::net::AddressGuard;

/// What a name in an agent's `tools` refers to, judged by its form alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameForm {
    Builtin,
    /// `mcp:{server}` or `{server}__{tool}`.
    Mcp,
    /// Anything else: an HTTP tool's name.
    Http,
}

pub fn name_form(name: &str) -> NameForm {
    if BUILTIN_TOOLS.contains(&name) {
        NameForm::Builtin
    } else if name.starts_with("mcp:") || name.contains("__") {
        NameForm::Mcp
    } else {
        NameForm::Http
    }
}

/// Resolves tool names. Cheap to clone; holds the one HTTP client all HTTP tools share.
#[derive(Clone)]
pub struct ToolCatalog {
    http: HttpToolClient,
}

impl ToolCatalog {
    pub fn new(guard: AddressGuard) -> ToolCatalog {
        ToolCatalog {
            http: HttpToolClient::new(guard),
        }
    }

    /// The tools of a step for an agent naming `names`.
    pub async fn for_agent(&self, pool: &PgPool, names: &[String]) -> Result<Cow<'static, ToolRegistry>, sqlx::Error> {
        if names.iter().all(|n| name_form(n) == NameForm::Builtin) {
            return Ok(Cow::Borrowed(ToolRegistry::builtin()));
        }
        let mut registry = ToolRegistry::builtin().clone();
        let http_names: Vec<String> = names
            .iter()
            .filter(|n| name_form(n) == NameForm::Http)
            .cloned()
            .collect();
        if !http_names.is_empty() {
            for def in db::http_tools::named(pool, &http_names).await? {
                let name = def.name.clone();
                // Definitions were validated when they were stored; one that no longer registers
                // is left out (the model sees it as missing) rather than failing the step.
                if let Err(e) = registry.register(Arc::new(self.http.tool(def))) {
                    tracing::warn!(tool = %name, error = %e, "an HTTP tool's definition was not usable");
                }
            }
        }
        // MCP extension point: `mcp:{server}` and `{server}__{tool}` names resolve through the
        // MCP hub (`McpHub::resolve(name)`), whose tools are registered here like HTTP tools.
        Ok(Cow::Owned(registry))
    }

    /// The names of `names` that name no tool, for `PUT /v1/agents` (422).
    pub async fn unknown(&self, pool: &PgPool, names: &[String]) -> Result<Vec<String>, sqlx::Error> {
        let http_names: Vec<String> = names
            .iter()
            .filter(|n| name_form(n) == NameForm::Http)
            .cloned()
            .collect();
        let defined: Vec<String> = if http_names.is_empty() {
            vec![]
        } else {
            db::http_tools::named(pool, &http_names)
                .await?
                .into_iter()
                .map(|d| d.name)
                .collect()
        };
        Ok(names
            .iter()
            .filter(|n| match name_form(n) {
                NameForm::Builtin => false,
                NameForm::Http => !defined.contains(n),
                // MCP extension point: known when the MCP hub knows it (`McpHub::knows(name)`).
                NameForm::Mcp => true,
            })
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sorted_by_form() {
        assert_eq!(name_form("close_ticket"), NameForm::Builtin);
        assert_eq!(name_form("weather"), NameForm::Http);
        assert_eq!(name_form("mcp:github"), NameForm::Mcp);
        assert_eq!(name_form("github__create_issue"), NameForm::Mcp);
    }
}
