//! A private PostgreSQL server run from the machine's own server binaries.
//!
//! `agentdesk serve` uses it when `DATABASE_URL` is unset, and the test suites
//! use it (through the `testkit` crate) when no server is configured, so that
//! nothing but an installed PostgreSQL is needed to run or test the service.
//!
//! Layout, for a data directory `<parent>/<name>`:
//! - `<parent>/<name>`: the cluster;
//! - `<parent>/<name>.log`: the server's log (appended to across starts);
//! - `<parent>/<name>.run/`: the Unix socket directory, kept private so the
//!   server never collides with a system server's socket or lock files;
//! - `<parent>/<name>.lock`: serialises starts from several processes;
//! - `<parent>/<name>.password`: the superuser's password (0600), generated
//!   before initdb. The server listens on 127.0.0.1 and on a private Unix
//!   socket, and asks everyone for that password (scram-sha-256): another
//!   user of the machine can reach the port but cannot sign in.
//!
//! initdb and postgres refuse to run as root, so when the current process is
//! root they are run as the `postgres` system user, which must then be able
//! to reach the data directory (every ancestor directory searchable).
//!
//! The server runs in its own process group, so a terminal's Ctrl-C does not
//! reach it: the owner stops it (dropping a non-shared value does). If the
//! owner is killed outright the server keeps running, and the next start on
//! the same directory reuses it.

mod host;
mod password;
mod process;
mod sys;

pub use host::data_dir_reachable;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use sqlx::{Connection, PgConnection};

use crate::config::HostEnv;
use host::{absolute, check_reachable, chown_tree, find_bindir, lock_file, postgres_user};
use process::{
    find_running, free_port, init_cluster, prepare_socket_dir, process_gone, send_signal, spawn_server, wait_ready,
    StartError,
};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const LOCK_TIMEOUT: Duration = Duration::from_secs(120);
const DATABASE: &str = "agentdesk";
/// sun_path is 108 bytes on Linux; longer socket paths make postgres fail.
const MAX_SOCKET_PATH: usize = 100;

/// A PostgreSQL server serving one data directory on 127.0.0.1.
pub struct EmbeddedPostgres {
    data_dir: PathBuf,
    port: u16,
    password: String,
    pid: i32,
    /// Set when this value spawned the server (rather than reusing one).
    child: Option<Child>,
    /// Shared servers outlive this value and the process.
    shared: bool,
}

impl std::fmt::Debug for EmbeddedPostgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedPostgres")
            .field("data_dir", &self.data_dir)
            .field("port", &self.port)
            .field("pid", &self.pid)
            .field("spawned", &self.child.is_some())
            .field("shared", &self.shared)
            .finish()
    }
}

impl EmbeddedPostgres {
    /// Finds initdb/postgres (`AGENTDESK_PG_BINDIR`, on PATH, via
    /// `pg_config --bindir`, or the newest `/usr/lib/postgresql/*/bin`), runs
    /// initdb into `data_dir` if it holds no cluster (password auth, superuser
    /// `postgres`, UTF8, C locale), reuses the server already running from
    /// that directory or starts one on a free port, waits until it accepts
    /// connections and creates the database `agentdesk` if missing.
    ///
    /// A server this call spawned is stopped when the value is dropped; a
    /// reused one is left alone (call [`EmbeddedPostgres::stop`] to stop it).
    ///
    /// The server binaries come from `AGENTDESK_PG_BINDIR` when it is set (read by the
    /// configuration), else from where `find_bindir` looks.
    pub async fn start(data_dir: &Path) -> Result<EmbeddedPostgres> {
        Self::start_with_binaries(data_dir, HostEnv::from_env().pg_bindir.as_deref()).await
    }

    /// Like [`EmbeddedPostgres::start`], with the server binaries' directory given (None: look
    /// for them).
    pub async fn start_with_binaries(data_dir: &Path, bindir: Option<&Path>) -> Result<EmbeddedPostgres> {
        Self::start_inner(data_dir, bindir, false).await
    }

    /// Like [`EmbeddedPostgres::start`], but the server is left running when
    /// this value is dropped and when the process exits, so that test suites
    /// share one server across runs; a later call reuses the running server.
    ///
    /// Meant for throwaway test data: a server started here runs with
    /// `fsync=off` and without full page writes, so an OS crash can corrupt
    /// it (delete the directory then), and with room for many connections.
    pub async fn start_shared(data_dir: &Path) -> Result<EmbeddedPostgres> {
        Self::start_inner(data_dir, HostEnv::from_env().pg_bindir.as_deref(), true).await
    }

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/agentdesk`
    pub fn url(&self) -> String {
        server_url(&self.password, self.port, DATABASE)
    }

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres`
    pub fn admin_url(&self) -> String {
        server_url(&self.password, self.port, "postgres")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Process id of the postmaster.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Fast shutdown: SIGINT to the postmaster (open sessions are cancelled),
    /// then wait up to 10 s for it to exit.
    pub async fn stop(mut self) -> Result<()> {
        let pid = self.pid;
        let mut child = self.child.take();
        // Drop must not try again, whatever happens below.
        self.shared = true;
        send_signal(pid, libc::SIGINT)?;
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if process_gone(pid, child.as_mut()) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!(
            "PostgreSQL (pid {pid}, data directory {}) did not stop within {} s",
            self.data_dir.display(),
            STOP_TIMEOUT.as_secs()
        )
    }

    async fn start_inner(data_dir: &Path, bindir: Option<&Path>, shared: bool) -> Result<EmbeddedPostgres> {
        let data_dir = absolute(data_dir)?;
        // First, so that a machine without PostgreSQL gets the one-line
        // "install it" error rather than anything about users or paths.
        let bindir = find_bindir(&data_dir, bindir)?;
        let layout = Layout::new(&data_dir)?;
        fs::create_dir_all(&layout.parent).with_context(|| format!("creating {}", layout.parent.display()))?;
        let _lock = lock_file(&layout.lock).await?;

        let run_as = if sys::is_root() { Some(postgres_user()?) } else { None };
        if let Some(user) = &run_as {
            check_reachable(&layout.parent, user)?;
        }

        // The password kept beside the cluster, or a new one: made before initdb for a new
        // cluster; for one made by an earlier version (which trusted every local user) it is
        // set over a still-trusted connection, and pg_hba.conf rewritten (`ensure_database`).
        let password = match password::read(&layout.password)? {
            Some(password) => password,
            None => password::create(&layout.password)?,
        };

        if let Some(running) = find_running(&data_dir, &password).await? {
            let (pid, port) = running;
            let pg = EmbeddedPostgres {
                data_dir,
                port,
                password,
                pid,
                child: None,
                shared,
            };
            pg.ensure_database().await?;
            return Ok(pg);
        }

        if !data_dir.join("PG_VERSION").exists() {
            // The password file was written first: a cluster never exists without one.
            init_cluster(&bindir, &layout, &password, run_as.as_ref())?;
        } else if let Some(user) = &run_as {
            chown_tree(&data_dir, user)?;
        }

        let socket_dir = prepare_socket_dir(&layout, run_as.as_ref())?;
        let mut last_err = None;
        // A free port can be taken by someone else between our probe and
        // the server's bind; a few fresh ports make that race harmless.
        for _ in 0..5 {
            let port = free_port()?;
            let mut child = spawn_server(&bindir, &layout, port, socket_dir.as_deref(), run_as.as_ref(), shared)?;
            let pid = child.id() as i32;
            match wait_ready(port, &password, &mut child, &layout.log).await {
                Ok(()) => {
                    let pg = EmbeddedPostgres {
                        data_dir,
                        port,
                        password,
                        pid,
                        child: Some(child),
                        shared,
                    };
                    pg.ensure_database().await?;
                    return Ok(pg);
                }
                Err(StartError::PortInUse(e)) => {
                    let _ = child.wait();
                    last_err = Some(e);
                }
                Err(StartError::Other(e)) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow!("could not start PostgreSQL")))
    }

    /// Creates the `agentdesk` database if missing, and makes sure the cluster trusts nobody.
    async fn ensure_database(&self) -> Result<()> {
        let mut conn = PgConnection::connect(&self.admin_url()).await.with_context(|| {
            format!(
                "signing in to the embedded PostgreSQL in {} with the password kept beside it; \
                 if that file was lost, stop the server and delete the directory to start afresh",
                self.data_dir.display()
            )
        })?;
        password::require_everywhere(&mut conn, &self.password).await?;
        let exists: Option<i32> = sqlx::query_scalar("select 1 from pg_database where datname = $1")
            .bind(DATABASE)
            .fetch_optional(&mut conn)
            .await?;
        if exists.is_none() {
            let res = sqlx::query(&format!("create database \"{DATABASE}\""))
                .execute(&mut conn)
                .await;
            match res {
                Ok(_) => {}
                // Created meanwhile by another user of the same server.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {}
                Err(e) => return Err(e).context("creating database agentdesk"),
            }
        }
        let _ = conn.close().await;
        Ok(())
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        if self.shared {
            return;
        }
        let Some(mut child) = self.child.take() else {
            return;
        };
        if send_signal(self.pid, libc::SIGINT).is_err() {
            return;
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if process_gone(self.pid, Some(&mut child)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn server_url(password: &str, port: u16, database: &str) -> String {
    // The password is hex: nothing in it needs escaping in a URL.
    format!("postgres://postgres:{password}@127.0.0.1:{port}/{database}")
}

/// The files around one data directory.
struct Layout {
    data_dir: PathBuf,
    parent: PathBuf,
    name: String,
    log: PathBuf,
    lock: PathBuf,
    password: PathBuf,
}

impl Layout {
    fn new(data_dir: &Path) -> Result<Layout> {
        let parent = data_dir
            .parent()
            .ok_or_else(|| anyhow!("data directory {} has no parent", data_dir.display()))?
            .to_path_buf();
        let name = data_dir
            .file_name()
            .ok_or_else(|| anyhow!("data directory {} has no name", data_dir.display()))?
            .to_string_lossy()
            .into_owned();
        Ok(Layout {
            data_dir: data_dir.to_path_buf(),
            log: parent.join(format!("{name}.log")),
            lock: parent.join(format!("{name}.lock")),
            password: parent.join(format!("{name}.password")),
            parent,
            name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::host::parse_passwd;
    use super::*;

    #[test]
    fn parses_passwd() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      postgres:x:101:104:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash\n";
        let user = parse_passwd(passwd, "postgres").unwrap();
        assert_eq!((user.uid, user.gid), (101, 104));
        assert!(parse_passwd(passwd, "nobody").is_none());
    }

    #[test]
    fn normalises_paths() {
        let p = absolute(Path::new("/a/b/../c/./d")).unwrap();
        assert_eq!(p, PathBuf::from("/a/c/d"));
        assert!(absolute(Path::new("x")).unwrap().is_absolute());
    }

    #[test]
    fn layout_names() {
        let l = Layout::new(Path::new("/t/pg")).unwrap();
        assert_eq!(l.log, PathBuf::from("/t/pg.log"));
        assert_eq!(l.lock, PathBuf::from("/t/pg.lock"));
        assert_eq!(l.parent, PathBuf::from("/t"));
    }
}
