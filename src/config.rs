//! One typed configuration, read from the environment (and `.env`). Secrets are never printed.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone)]
pub struct Config {
    /// None: run a private PostgreSQL under `data_dir` (see `embedded_pg`).
    pub database_url: Option<String>,
    pub addr: SocketAddr,
    /// Tickets one process works on at once.
    pub workers: usize,
    pub lease: Duration,
    pub stream_idle: Duration,
    pub api_tokens: Vec<String>,
    /// Model of the `default` agent created when no agent exists.
    pub model: Option<String>,
    pub log_format: LogFormat,
    /// Interval of `: ping` comments on SSE streams (at most 15 s).
    pub sse_ping: Duration,
    /// How long running steps may take to finish on shutdown before their tickets are released.
    pub shutdown_grace: Duration,
    /// Where the embedded database keeps its data.
    pub data_dir: PathBuf,
    pub db_max_connections: u32,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("database_url", &self.database_url.as_ref().map(|_| "<set>"))
            .field("addr", &self.addr)
            .field("workers", &self.workers)
            .field("lease", &self.lease)
            .field("stream_idle", &self.stream_idle)
            .field("api_tokens", &format!("<{} tokens>", self.api_tokens.len()))
            .field("model", &self.model)
            .field("log_format", &self.log_format)
            .finish_non_exhaustive()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: None,
            addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            workers: 64,
            lease: Duration::from_secs(60),
            stream_idle: Duration::from_secs(90),
            api_tokens: vec![],
            model: None,
            log_format: LogFormat::Text,
            sse_ping: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
            data_dir: PathBuf::from(".agentdesk"),
            db_max_connections: 16,
        }
    }
}

impl Config {
    /// Reads the environment; a malformed value is an error naming the variable.
    pub fn from_env() -> Result<Config, String> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let get = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let d = Config::default();
        fn parse<T: std::str::FromStr>(name: &str, value: Option<String>, default: T) -> Result<T, String> {
            match value {
                None => Ok(default),
                Some(v) => v.parse().map_err(|_| format!("{name}: cannot parse {v:?}")),
            }
        }
        let secs = |name: &str, default: Duration| -> Result<Duration, String> {
            let v: f64 = parse(name, get(name), default.as_secs_f64())?;
            if !(v > 0.0 && v < 1e9) {
                return Err(format!("{name}: must be a positive number of seconds"));
            }
            Ok(Duration::from_secs_f64(v))
        };
        let workers: usize = parse("AGENTDESK_WORKERS", get("AGENTDESK_WORKERS"), d.workers)?;
        let sse_ping = secs("AGENTDESK_SSE_PING_SECS", d.sse_ping)?.min(Duration::from_secs(15));
        Ok(Config {
            database_url: get("DATABASE_URL"),
            addr: parse("AGENTDESK_ADDR", get("AGENTDESK_ADDR"), d.addr)?,
            workers,
            lease: secs("AGENTDESK_LEASE_SECS", d.lease)?,
            stream_idle: secs("AGENTDESK_STREAM_IDLE_SECS", d.stream_idle)?,
            api_tokens: get("AGENTDESK_API_TOKENS")
                .map(|v| {
                    v.split(',')
                        .map(|t| t.trim().to_owned())
                        .filter(|t| !t.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            model: get("AGENTDESK_MODEL"),
            log_format: match get("AGENTDESK_LOG_FORMAT").as_deref() {
                None | Some("text") => LogFormat::Text,
                Some("json") => LogFormat::Json,
                Some(other) => return Err(format!("AGENTDESK_LOG_FORMAT: expected text or json, got {other:?}")),
            },
            sse_ping,
            shutdown_grace: secs("AGENTDESK_SHUTDOWN_GRACE_SECS", d.shutdown_grace)?,
            data_dir: get("AGENTDESK_DATA_DIR").map(PathBuf::from).unwrap_or(d.data_dir),
            db_max_connections: parse(
                "AGENTDESK_DB_MAX_CONNECTIONS",
                get("AGENTDESK_DB_MAX_CONNECTIONS"),
                d.db_max_connections,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_reads_the_contract_variables() {
        let env = |name: &str| {
            match name {
                "AGENTDESK_ADDR" => Some("127.0.0.1:0"),
                "AGENTDESK_WORKERS" => Some("8"),
                "AGENTDESK_LEASE_SECS" => Some("5"),
                "AGENTDESK_API_TOKENS" => Some("a, b,,"),
                "AGENTDESK_LOG_FORMAT" => Some("json"),
                _ => None,
            }
            .map(str::to_owned)
        };
        let c = Config::from_lookup(env).unwrap();
        assert_eq!(c.addr.port(), 0);
        assert_eq!(c.workers, 8);
        assert_eq!(c.lease, Duration::from_secs(5));
        assert_eq!(c.api_tokens, vec!["a", "b"]);
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.stream_idle, Duration::from_secs(90));
        assert!(!format!("{c:?}").contains("\"a\""), "tokens are not printed");
    }

    #[test]
    fn config_rejects_malformed_values_naming_the_variable() {
        let err = Config::from_lookup(|n| (n == "AGENTDESK_WORKERS").then(|| "many".to_owned())).unwrap_err();
        assert!(err.contains("AGENTDESK_WORKERS"));
        let err = Config::from_lookup(|n| (n == "AGENTDESK_LEASE_SECS").then(|| "-1".to_owned())).unwrap_err();
        assert!(err.contains("AGENTDESK_LEASE_SECS"));
    }
}
