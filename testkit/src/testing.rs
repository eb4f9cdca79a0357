//! Test database provisioning, for the integration tests and the benchmark.
//!
//! Every test gets its own empty database, so tests run in parallel without
//! seeing each other's rows. The server is `DATABASE_URL`'s when it is set,
//! otherwise one embedded server shared by all test processes and runs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use sqlx::{Connection, PgConnection};
use tokio::sync::OnceCell;

use agentdesk::embedded_pg::{self, EmbeddedPostgres};

const PREFIX: &str = "agentdesk_test_";

/// Admin URL of the server that test databases are created in. Only the URL
/// is kept: every test has its own tokio runtime, and a pool or connection
/// made in one runtime breaks once that runtime is gone.
static ADMIN_URL: OnceCell<String> = OnceCell::const_new();
/// Keeps the shared embedded server's handle for the life of the process.
static EMBEDDED: OnceCell<EmbeddedPostgres> = OnceCell::const_new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh, empty database for one test; returns its URL.
///
/// Base server: `DATABASE_URL` if set (any database in it; we connect to its
/// `postgres` admin database), else one shared embedded server under
/// `<CARGO_TARGET_DIR or ./target>/agentdesk-test-pg`, started once and left
/// running for later runs. Databases are named `agentdesk_test_<pid>_<n>`;
/// the first call in a process drops those left by processes that are gone.
pub async fn fresh_database() -> Result<String> {
    let admin_url = ADMIN_URL.get_or_try_init(init_server).await?.clone();
    let name = format!(
        "{PREFIX}{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut conn = PgConnection::connect(&admin_url)
        .await
        .with_context(|| format!("connecting to {}", redact(&admin_url)))?;
    let mut attempt = 0;
    loop {
        // template0 is never connected to, so concurrent creations do not
        // trip over each other; the retry covers servers where someone is
        // connected to it anyway.
        let res = sqlx::query(&format!("create database \"{name}\" template template0"))
            .execute(&mut conn)
            .await;
        match res {
            Ok(_) => break,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55006") && attempt < 50 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20 * attempt)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("creating database {name}")),
        }
    }
    let _ = conn.close().await;
    Ok(with_database(&admin_url, &name))
}

async fn init_server() -> Result<String> {
    let admin_url = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => with_database(url.trim(), "postgres"),
        _ => {
            let pg = EMBEDDED
                .get_or_try_init(|| async { EmbeddedPostgres::start_shared(&shared_dir()).await })
                .await?;
            pg.admin_url()
        }
    };
    drop_leftovers(&admin_url).await?;
    Ok(admin_url)
}

/// `<target>/agentdesk-test-pg`, unless we run as root in a tree the
/// `postgres` user cannot enter (a checkout under /root): then a directory
/// under the system temp dir, keyed by user so it is still shared by runs.
fn shared_dir() -> PathBuf {
    let dir = target_dir().join("agentdesk-test-pg");
    if embedded_pg::data_dir_reachable(&dir) {
        dir
    } else {
        // SAFETY: geteuid takes no arguments, cannot fail and touches no memory.
        std::env::temp_dir().join(format!("agentdesk-test-pg-{}", unsafe { libc::geteuid() }))
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// Drops `agentdesk_test_<pid>_*` databases whose process is gone.
async fn drop_leftovers(admin_url: &str) -> Result<()> {
    let mut conn = PgConnection::connect(admin_url)
        .await
        .with_context(|| format!("connecting to {}", redact(admin_url)))?;
    let names: Vec<String> = sqlx::query_scalar("select datname from pg_database where starts_with(datname, $1)")
        .bind(PREFIX)
        .fetch_all(&mut conn)
        .await?;
    let me = std::process::id();
    for name in names {
        let Some(pid) = leftover_pid(&name) else {
            continue;
        };
        if pid == me || pid_alive(pid) {
            continue;
        }
        // Another process may be dropping the same database right now.
        if let Err(e) = sqlx::query(&format!("drop database if exists \"{name}\" with (force)"))
            .execute(&mut conn)
            .await
        {
            tracing::warn!(database = %name, error = %e, "could not drop leftover test database");
        }
    }
    let _ = conn.close().await;
    Ok(())
}

fn leftover_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, n) = rest.split_once('_')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 only checks that the pid exists; it touches no memory.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// `url` with its database (the path) replaced by `db`, query kept.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_start = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[authority_start..]
        .find('/')
        .map(|i| authority_start + i)
        .unwrap_or(base.len());
    let mut out = format!("{}/{db}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// The URL without its password, for error messages.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{}{user}:***@{host}{}", &url[..scheme_end], &rest[authority_end..]),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_database() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/app?sslmode=disable", "postgres"),
            "postgres://u:p@h:5432/postgres?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:5432", "x"), "postgres://h:5432/x");
        assert_eq!(
            with_database("postgres:///app?host=/run/postgresql", "x"),
            "postgres:///x?host=/run/postgresql"
        );
    }

    #[test]
    fn leftover_names() {
        assert_eq!(leftover_pid("agentdesk_test_123_4"), Some(123));
        assert_eq!(leftover_pid("agentdesk_test_x_4"), None);
        assert_eq!(leftover_pid("agentdesk_test_123"), None);
        assert_eq!(leftover_pid("agentdesk"), None);
    }

    #[test]
    fn redacts_password() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    }
}
