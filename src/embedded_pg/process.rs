//! The server process: creating the cluster, starting it, waiting until it answers, and finding
//! or signalling a server already running on a data directory.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use sqlx::{Connection, PgConnection};

use super::host::{make_private_dir, run_as, User};
use super::{Layout, MAX_SOCKET_PATH, READY_TIMEOUT, STOP_TIMEOUT};

/// initdb into a scratch directory that is renamed into place at the end, so
/// an interrupted initdb never leaves a half-made cluster behind that later
/// starts would mistake for a real one.
pub(super) fn init_cluster(bindir: &Path, layout: &Layout, password: &str, user: Option<&User>) -> Result<()> {
    if layout.data_dir.exists() {
        let non_empty = fs::read_dir(&layout.data_dir)?.next().is_some();
        if non_empty {
            bail!(
                "{} is neither empty nor a PostgreSQL data directory (no PG_VERSION)",
                layout.data_dir.display()
            );
        }
        fs::remove_dir(&layout.data_dir)?;
    }
    let scratch = layout.parent.join(format!("{}.initdb", layout.name));
    if scratch.exists() {
        fs::remove_dir_all(&scratch).with_context(|| format!("removing leftover {}", scratch.display()))?;
    }
    make_private_dir(&scratch, user)?;
    // Beside the scratch directory, not in it: initdb wants that one empty.
    let pwfile_dir = layout.parent.join(format!("{}.initdb-pw", layout.name));
    make_private_dir(&pwfile_dir, user)?;
    let pwfile = super::password::write_for_initdb(&pwfile_dir, password)?;
    if let Some(user) = user {
        super::host::chown(&pwfile, user)?;
    }
    let mut cmd = Command::new(bindir.join("initdb"));
    cmd.arg("-D")
        .arg(&scratch)
        .arg("--pwfile")
        .arg(&pwfile)
        .args([
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-instructions",
        ])
        .current_dir(&scratch)
        .stdin(Stdio::null());
    run_as(&mut cmd, user);
    let out = cmd.output();
    let _ = fs::remove_dir_all(&pwfile_dir);
    let out = out.with_context(|| format!("running {}", bindir.join("initdb").display()))?;
    if !out.status.success() {
        let _ = fs::remove_dir_all(&scratch);
        bail!(
            "initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::rename(&scratch, &layout.data_dir)
        .with_context(|| format!("moving {} to {}", scratch.display(), layout.data_dir.display()))?;
    Ok(())
}

/// The socket directory, or None to disable Unix sockets when its path would
/// be too long for a socket address (we only connect over TCP anyway).
pub(super) fn prepare_socket_dir(layout: &Layout, user: Option<&User>) -> Result<Option<PathBuf>> {
    let dir = layout.parent.join(format!("{}.run", layout.name));
    // ".s.PGSQL.65535" is the longest name postgres puts there.
    if dir.as_os_str().len() + 15 > MAX_SOCKET_PATH {
        return Ok(None);
    }
    make_private_dir(&dir, user)?;
    Ok(Some(dir))
}

pub(super) fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

pub(super) fn spawn_server(
    bindir: &Path,
    layout: &Layout,
    port: u16,
    socket_dir: Option<&Path>,
    user: Option<&User>,
    shared: bool,
) -> Result<Child> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&layout.log)
        .with_context(|| format!("opening {}", layout.log.display()))?;
    let mut cmd = Command::new(bindir.join("postgres"));
    cmd.arg("-D")
        .arg(&layout.data_dir)
        .arg("-p")
        .arg(port.to_string())
        .arg("-k")
        .arg(socket_dir.map(|d| d.as_os_str()).unwrap_or_default())
        .args(["-c", "listen_addresses=127.0.0.1"])
        .current_dir(&layout.data_dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if shared {
        cmd.args([
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "max_connections=500",
        ]);
    }
    // Its own process group, so a Ctrl-C in the terminal reaches only us:
    // `serve` still needs the database while it shuts down gracefully, and
    // a shared server must survive the test run it was started by.
    cmd.process_group(0);
    run_as(&mut cmd, user);
    cmd.spawn()
        .with_context(|| format!("starting {}", bindir.join("postgres").display()))
}

pub(super) enum StartError {
    PortInUse(anyhow::Error),
    Other(anyhow::Error),
}

pub(super) async fn wait_ready(port: u16, password: &str, child: &mut Child, log: &Path) -> Result<(), StartError> {
    let url = super::server_url(password, port, "postgres");
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let tail = log_tail(log);
            let err = anyhow!("PostgreSQL exited during startup ({status}); log tail:\n{tail}");
            return Err(if tail.contains("could not bind") || tail.contains("in use") {
                StartError::PortInUse(err)
            } else {
                StartError::Other(err)
            });
        }
        if try_connect(&url).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(StartError::Other(anyhow!(
                "PostgreSQL did not accept connections on port {port} within {} s; log {} tail:\n{}",
                READY_TIMEOUT.as_secs(),
                log.display(),
                log_tail(log)
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) async fn try_connect(url: &str) -> Result<PgConnection> {
    match tokio::time::timeout(Duration::from_secs(3), PgConnection::connect(url)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => bail!("timed out connecting"),
    }
}

/// The last lines of the server log, for error messages.
pub(super) fn log_tail(log: &Path) -> String {
    let Ok(mut file) = File::open(log) else {
        return String::from("(no log)");
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(4096)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The postmaster.pid fields we use: pid (line 1) and port (line 4).
pub(super) fn read_postmaster_pid(data_dir: &Path) -> Option<(i32, u16)> {
    let text = fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let mut lines = text.lines();
    let pid = lines.next()?.trim().parse().ok()?;
    let port = lines.nth(2)?.trim().parse().ok()?;
    Some((pid, port))
}

pub(super) fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    match super::sys::kill(pid, 0) {
        Ok(()) => true,
        Err(err) => err.raw_os_error() == Some(libc::EPERM),
    }
}

/// Whether the process is a postgres. After a reboot or in a new container
/// the pid in a stale postmaster.pid often belongs to an unrelated process.
pub(super) fn is_postgres_process(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(comm) => comm.trim() == "postgres",
        // Without /proc we cannot tell; the connection check decides.
        Err(_) => !Path::new("/proc/self").exists(),
    }
}

/// The postmaster runs with its data directory as working directory, which
/// tells a live server of ours from a reused pid; None when we cannot see it.
pub(super) fn cwd_matches(pid: i32, data_dir: &Path) -> Option<bool> {
    let cwd = fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    let dir = fs::canonicalize(data_dir).ok()?;
    Some(cwd == dir)
}

/// Whether the process has exited. A server spawned earlier by this process
/// but no longer tracked stays a zombie (and so "alive" to kill(2)) until it
/// is reaped, hence the waitpid.
pub(super) fn process_gone(pid: i32, child: Option<&mut Child>) -> bool {
    match child {
        Some(child) => !matches!(child.try_wait(), Ok(None)),
        None => {
            super::sys::reap(pid);
            !pid_alive(pid)
        }
    }
}

pub(super) fn send_signal(pid: i32, signal: i32) -> Result<()> {
    if let Err(err) = super::sys::kill(pid, signal) {
        if err.raw_os_error() == Some(libc::ESRCH) {
            return Ok(());
        }
        return Err(err).with_context(|| format!("signalling PostgreSQL pid {pid}"));
    }
    Ok(())
}

/// The (pid, port) of a server running from `data_dir`, if any. A
/// postmaster.pid alone proves nothing (a killed server leaves it behind), so
/// the server must answer on its port and report this very data directory.
pub(super) async fn find_running(data_dir: &Path, password: &str) -> Result<Option<(i32, u16)>> {
    let pid_file = data_dir.join("postmaster.pid");
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        let Some((pid, port)) = read_postmaster_pid(data_dir) else {
            return Ok(None);
        };
        if !pid_alive(pid) {
            return Ok(None);
        }
        let ours = is_postgres_process(pid) && cwd_matches(pid, data_dir) != Some(false);
        if !ours {
            // postgres itself would refuse to start over a live pid.
            let _ = fs::remove_file(&pid_file);
            return Ok(None);
        }
        let url = super::server_url(password, port, "postgres");
        if let Ok(mut conn) = try_connect(&url).await {
            let dir: Result<String, _> = sqlx::query_scalar("show data_directory").fetch_one(&mut conn).await;
            let _ = conn.close().await;
            if let Ok(dir) = dir {
                let same = match (fs::canonicalize(&dir), fs::canonicalize(data_dir)) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => false,
                };
                if same {
                    return Ok(Some((pid, port)));
                }
                // Another cluster answers there: the pid file is stale.
                let _ = fs::remove_file(&pid_file);
                return Ok(None);
            }
        }
        // A live postmaster that does not answer is starting up or shutting
        // down; give it time to settle either way.
        if Instant::now() > deadline {
            bail!(
                "a PostgreSQL server (pid {pid}) holds {} but does not accept connections on \
                 port {port}; stop it or remove the directory",
                data_dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
