//! The one place an agent's tool names become the tools of a step. A name is a built-in tool, an
//! HTTP tool (`/v1/tools`), `mcp:{server}` (all of an MCP server's tools) or `{server}__{tool}`;
//! the MCP names are resolved by a [`ToolLender`] (the MCP hub), which this module only knows as
//! that trait.
//!
//! An agent that names only built-ins gets the process's built-in registry: no query, no
//! allocation, so the hot path does not pay for custom tools. Any other agent's tools are loaded
//! per step (one query), so a tool changed or removed through the API takes effect at the next
//! step; a name that resolves to nothing is left out of the request, and a call of it gets an
//! `unknown_tool` error result: the model sees the tool as missing, nothing crashes.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::PgPool;

use super::builtin::ALL_BUILTIN_TOOLS;
use super::http::HttpToolClient;
use super::{Tool, ToolRegistry};
use crate::db;
use crate::domain::ProjectId;
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
    if ALL_BUILTIN_TOOLS.contains(&name) {
        NameForm::Builtin
    } else if name.starts_with("mcp:") || name.contains("__") {
        NameForm::Mcp
    } else {
        NameForm::Http
    }
}

/// Lends tools by the names of the [`NameForm::Mcp`] form: the MCP hub.
#[async_trait]
pub trait ToolLender: Send + Sync {
    /// Whether `name` (an entry of an agent's `tools`) names something that exists in `project`.
    fn knows(&self, project: ProjectId, name: &str) -> bool;
    /// The tools `name` stands for now in `project`; empty when it names nothing (any more) or
    /// its server is unreachable.
    async fn resolve(&self, project: ProjectId, name: &str) -> Vec<Arc<dyn Tool>>;
}

/// Resolves tool names. Cheap to clone; holds the one HTTP client all HTTP tools share.
#[derive(Clone)]
pub struct ToolCatalog {
    http: HttpToolClient,
    lender: Option<Arc<dyn ToolLender>>,
}

/// The tools of one step: the registry, and the names offered to the model when they differ from
/// the agent's own list (`mcp:{server}` stands for the server's tools, each offered by its name).
pub struct StepTools {
    pub registry: Cow<'static, ToolRegistry>,
    pub offered: Option<Vec<String>>,
}

impl ToolCatalog {
    pub fn new(guard: AddressGuard) -> ToolCatalog {
        ToolCatalog {
            http: HttpToolClient::new(guard),
            lender: None,
        }
    }

    /// With the lender of `mcp:{server}` and `{server}__{tool}` names.
    pub fn with_lender(mut self, lender: Arc<dyn ToolLender>) -> ToolCatalog {
        self.lender = Some(lender);
        self
    }

    /// The tools of a step for an agent naming `names`.
    pub async fn for_agent(
        &self,
        pool: &PgPool,
        project: ProjectId,
        names: &[String],
    ) -> Result<StepTools, sqlx::Error> {
        if names.iter().all(|n| name_form(n) == NameForm::Builtin) {
            return Ok(StepTools {
                registry: Cow::Borrowed(ToolRegistry::builtin()),
                offered: None,
            });
        }
        let mut registry = ToolRegistry::builtin().clone();
        let http_names: Vec<String> = names
            .iter()
            .filter(|n| name_form(n) == NameForm::Http)
            .cloned()
            .collect();
        if !http_names.is_empty() {
            for def in db::http_tools::named(pool, project, &http_names).await? {
                let name = def.name.clone();
                // Definitions were validated when they were stored; one that no longer registers
                // is left out (the model sees it as missing) rather than failing the step.
                if let Err(e) = registry.register(Arc::new(self.http.tool(def))) {
                    tracing::warn!(tool = %name, error = %e, "an HTTP tool's definition was not usable");
                }
            }
        }
        // `mcp:{server}` stands for each of its tools: the list offered to the model names them.
        let mut offered = None;
        if names.iter().any(|n| name_form(n) == NameForm::Mcp) {
            let mut list = Vec::with_capacity(names.len());
            for name in names {
                if name_form(name) != NameForm::Mcp {
                    list.push(name.clone());
                    continue;
                }
                let lent = match &self.lender {
                    Some(lender) => lender.resolve(project, name).await,
                    None => vec![],
                };
                for tool in lent {
                    let tool_name = tool.name().to_string();
                    // Named twice (`mcp:x` and `x__y`): registered once.
                    let usable = registry.contains(&tool_name)
                        || registry
                            .register(tool)
                            .map_err(|e| tracing::warn!(tool = %tool_name, error = %e, "an MCP tool was not usable"))
                            .is_ok();
                    if usable && !list.contains(&tool_name) {
                        list.push(tool_name);
                    }
                }
            }
            offered = Some(list);
        }
        Ok(StepTools {
            registry: Cow::Owned(registry),
            offered,
        })
    }

    /// The names of `names` that name no tool, for `PUT /v1/agents` (422).
    pub async fn unknown(
        &self,
        pool: &PgPool,
        project: ProjectId,
        names: &[String],
    ) -> Result<Vec<String>, sqlx::Error> {
        let http_names: Vec<String> = names
            .iter()
            .filter(|n| name_form(n) == NameForm::Http)
            .cloned()
            .collect();
        let defined: Vec<String> = if http_names.is_empty() {
            vec![]
        } else {
            db::http_tools::named(pool, project, &http_names)
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
                NameForm::Mcp => !self.lender.as_ref().is_some_and(|l| l.knows(project, n)),
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
