//! Projects: one team's desk inside the desk, and the tokens that act in one.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// A project's row id. Every query of a project's rows takes one: there is no default, so a
/// query cannot forget whose rows it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, sqlx::Type, Serialize, Deserialize)]
#[sqlx(transparent)]
#[serde(transparent)]
pub struct ProjectId(pub i64);

impl ProjectId {
    /// `default`, which an upgraded desk keeps everything in and a client that names no project
    /// acts in.
    pub const DEFAULT: ProjectId = ProjectId(1);
}

impl std::fmt::Display for ProjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// `ProjectId::DEFAULT`, for serde's defaults.
pub fn default_project() -> ProjectId {
    ProjectId::DEFAULT
}

/// The name of the project every desk has.
pub const DEFAULT_PROJECT: &str = "default";

/// A token bucket: refilled at `requests_per_s`, holding at most `burst`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    #[schema(minimum = 0.001, maximum = 1000000)]
    pub requests_per_s: f64,
    #[schema(minimum = 1, maximum = 1000000)]
    pub burst: u32,
}

impl RateLimit {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.requests_per_s.is_finite() && (0.001..=1_000_000.0).contains(&self.requests_per_s)) {
            return Err("rate_limit.requests_per_s must be between 0.001 and 1000000".into());
        }
        if !(1..=1_000_000).contains(&self.burst) {
            return Err("rate_limit.burst must be between 1 and 1000000".into());
        }
        Ok(())
    }
}

/// A project's limits per UTC day (and month for money); null is none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    #[serde(default)]
    #[schema(minimum = 0)]
    pub tickets_per_day: Option<i64>,
    #[serde(default)]
    #[schema(minimum = 0)]
    pub tokens_per_day: Option<i64>,
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0)]
    pub cost_usd_per_day: Option<crate::domain::Usd>,
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0)]
    pub cost_usd_per_month: Option<crate::domain::Usd>,
}

impl Quotas {
    pub fn validate(&self) -> Result<(), String> {
        for (name, value) in [
            ("tickets_per_day", self.tickets_per_day),
            ("tokens_per_day", self.tokens_per_day),
        ] {
            if value.is_some_and(|v| v < 0) {
                return Err(format!("quotas.{name} must be at least 0"));
            }
        }
        for (name, value) in [
            ("cost_usd_per_day", self.cost_usd_per_day),
            ("cost_usd_per_month", self.cost_usd_per_month),
        ] {
            if value.is_some_and(|v| v.is_negative()) {
                return Err(format!("quotas.{name} must be at least 0"));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Project {
    #[serde(skip)]
    pub id: ProjectId,
    #[schema(example = "ops")]
    pub name: String,
    #[schema(example = "OPS")]
    pub key_prefix: String,
    pub description: Option<String>,
    pub weight: i32,
    pub rate_limit: Option<RateLimit>,
    pub quotas: Quotas,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `[a-z0-9-]`, 1 to 32 characters.
pub fn is_project_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `[A-Z]`, 1 to 10 characters.
pub fn is_key_prefix(prefix: &str) -> bool {
    (1..=10).contains(&prefix.len()) && prefix.bytes().all(|b| b.is_ascii_uppercase())
}

/// What a project token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    /// GET requests and streams.
    Read,
    /// Read, and create, patch, cancel and retry tickets and comments.
    Write,
    /// Read, and answer approvals and questions.
    Approve,
    /// All of these, and agents, tools, MCP servers, providers, schedules, webhooks and the
    /// project's own tokens.
    Admin,
}

impl TokenScope {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Read => "read",
            TokenScope::Write => "write",
            TokenScope::Approve => "approve",
            TokenScope::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<TokenScope> {
        [
            TokenScope::Read,
            TokenScope::Write,
            TokenScope::Approve,
            TokenScope::Admin,
        ]
        .into_iter()
        .find(|scope| scope.as_str() == s)
    }
}

/// A project token as listed: never its secret.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ProjectToken {
    pub id: Uuid,
    pub name: String,
    pub scopes: Vec<TokenScope>,
    pub expires_at: Option<DateTime<Utc>>,
    pub rate_limit: Option<RateLimit>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_prefixes_follow_the_contract() {
        assert!(is_project_name("ops"));
        assert!(is_project_name("team-7"));
        assert!(!is_project_name(""));
        assert!(!is_project_name("Ops"));
        assert!(!is_project_name(&"a".repeat(33)));
        assert!(is_key_prefix("OPS"));
        assert!(!is_key_prefix("OPS1"));
        assert!(!is_key_prefix("ABCDEFGHIJK"));
    }
}
