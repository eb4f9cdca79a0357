//! What the process learns from the machine it runs on rather than from its options: these
//! variables are set by the host or the image, not by an operator, so they have no option of
//! their own (nor a place in `--help`).

use std::path::PathBuf;

/// The host's own variables, read once with the rest of the configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostEnv {
    /// `HOSTNAME`: the first part of a worker's id, so that a claim names the machine holding it.
    pub hostname: Option<String>,
    /// `AGENTDESK_CONTAINER` (set by the image): a container has no PostgreSQL of its own to start.
    pub in_container: bool,
    /// `AGENTDESK_PG_BINDIR`: where the embedded database's server binaries are, when given.
    pub pg_bindir: Option<PathBuf>,
}

impl HostEnv {
    /// Reads the process's environment.
    pub fn from_env() -> HostEnv {
        HostEnv {
            hostname: std::env::var("HOSTNAME").ok(),
            in_container: std::env::var_os("AGENTDESK_CONTAINER").is_some(),
            // As given, even when it is not UTF-8.
            pg_bindir: std::env::var_os("AGENTDESK_PG_BINDIR").map(PathBuf::from),
        }
    }

    /// Every variable, by its name, from `get` (None: unset).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> HostEnv {
        HostEnv {
            hostname: get("HOSTNAME"),
            in_container: get("AGENTDESK_CONTAINER").is_some(),
            pg_bindir: get("AGENTDESK_PG_BINDIR").map(PathBuf::from),
        }
    }
}
