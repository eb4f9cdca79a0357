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
//! - `<parent>/<name>.lock`: serialises starts from several processes.
//!
//! initdb and postgres refuse to run as root, so when the current process is
//! root they are run as the `postgres` system user, which must then be able
//! to reach the data directory (every ancestor directory searchable).
//!
//! The server runs in its own process group, so a terminal's Ctrl-C does not
//! reach it: the owner stops it (dropping a non-shared value does). If the
//! owner is killed outright the server keeps running, and the next start on
//! the same directory reuses it.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use sqlx::{Connection, PgConnection};

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
    /// initdb into `data_dir` if it holds no cluster (trust auth, superuser
    /// `postgres`, UTF8, C locale), reuses the server already running from
    /// that directory or starts one on a free port, waits until it accepts
    /// connections and creates the database `agentdesk` if missing.
    ///
    /// A server this call spawned is stopped when the value is dropped; a
    /// reused one is left alone (call [`EmbeddedPostgres::stop`] to stop it).
    pub async fn start(data_dir: &Path) -> Result<EmbeddedPostgres> {
        Self::start_inner(data_dir, false).await
    }

    /// Like [`EmbeddedPostgres::start`], but the server is left running when
    /// this value is dropped and when the process exits, so that test suites
    /// share one server across runs; a later call reuses the running server.
    ///
    /// Meant for throwaway test data: a server started here runs with
    /// `fsync=off` and without full page writes, so an OS crash can corrupt
    /// it (delete the directory then), and with room for many connections.
    pub async fn start_shared(data_dir: &Path) -> Result<EmbeddedPostgres> {
        Self::start_inner(data_dir, true).await
    }

    /// `postgres://postgres@127.0.0.1:PORT/agentdesk`
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
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

    async fn start_inner(data_dir: &Path, shared: bool) -> Result<EmbeddedPostgres> {
        let data_dir = absolute(data_dir)?;
        // First, so that a machine without PostgreSQL gets the one-line
        // "install it" error rather than anything about users or paths.
        let bindir = find_bindir(&data_dir)?;
        let layout = Layout::new(&data_dir)?;
        fs::create_dir_all(&layout.parent).with_context(|| format!("creating {}", layout.parent.display()))?;
        let _lock = lock_file(&layout.lock).await?;

        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(postgres_user()?)
        } else {
            None
        };
        if let Some(user) = &run_as {
            check_reachable(&layout.parent, user)?;
        }

        if let Some(running) = find_running(&data_dir).await? {
            let (pid, port) = running;
            let pg = EmbeddedPostgres {
                data_dir,
                port,
                pid,
                child: None,
                shared,
            };
            pg.ensure_database().await?;
            return Ok(pg);
        }

        if !data_dir.join("PG_VERSION").exists() {
            init_cluster(&bindir, &layout, run_as.as_ref())?;
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
            match wait_ready(port, &mut child, &layout.log).await {
                Ok(()) => {
                    let pg = EmbeddedPostgres {
                        data_dir,
                        port,
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

    async fn ensure_database(&self) -> Result<()> {
        let mut conn = PgConnection::connect(&self.admin_url())
            .await
            .context("connecting to the embedded PostgreSQL")?;
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

/// The files around one data directory.
struct Layout {
    data_dir: PathBuf,
    parent: PathBuf,
    name: String,
    log: PathBuf,
    lock: PathBuf,
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
            parent,
            name,
        })
    }
}

/// Whether a server for `data_dir` could run: always when we are not root;
/// as root, when the `postgres` user can reach the directory's parent (not
/// so for a checkout under /root, for example). Lets callers pick another
/// place up front; a missing `postgres` user counts as reachable, since it
/// is created with the access it needs.
pub fn data_dir_reachable(data_dir: &Path) -> bool {
    if unsafe { libc::geteuid() } != 0 {
        return true;
    }
    let Ok(data_dir) = absolute(data_dir) else {
        return false;
    };
    let Some(parent) = data_dir.parent() else {
        return false;
    };
    // The parent may not exist yet: check what does.
    let existing = parent.ancestors().find(|p| p.exists()).unwrap_or(parent);
    match lookup_user("postgres") {
        Ok(Some(user)) => check_reachable(existing, &user).is_ok(),
        _ => true,
    }
}

/// The system user the server runs as when we are root.
#[derive(Debug, Clone)]
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

fn absolute(path: &Path) -> Result<PathBuf> {
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    // Normalise `.`/`..` without requiring the directory to exist yet.
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Cross-process lock so that two processes (e.g. test binaries run in
/// parallel) never initdb or start the same directory at once. The lock is
/// released when the file is closed, including when the process dies.
async fn lock_file(path: &Path) -> Result<File> {
    use std::os::fd::AsRawFd;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening lock file {}", path.display()))?;
    let deadline = Instant::now() + LOCK_TIMEOUT;
    loop {
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(err).with_context(|| format!("locking {}", path.display()));
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for the lock {}", path.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Looks up (or creates) the `postgres` system user.
fn postgres_user() -> Result<User> {
    if let Some(user) = lookup_user("postgres")? {
        return Ok(user);
    }
    let status = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "postgres",
        ])
        .stdin(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => {}
        _ => bail!(
            "running as root, PostgreSQL must run as an unprivileged user, but there is no \
             `postgres` user and `useradd --system --no-create-home postgres` failed: create it, \
             or run as a normal user"
        ),
    }
    lookup_user("postgres")?.ok_or_else(|| anyhow!("user `postgres` still missing from /etc/passwd after useradd"))
}

fn lookup_user(name: &str) -> Result<Option<User>> {
    let passwd = fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?;
    Ok(parse_passwd(&passwd, name))
}

fn parse_passwd(passwd: &str, name: &str) -> Option<User> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        let uid = fields.next()?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some(User {
            name: name.to_string(),
            uid,
            gid,
        })
    })
}

/// The server user must be able to reach the data directory; a checkout
/// under /root (mode 0700) is the usual way this fails, so say so up front
/// instead of leaving it to a permission error in the server log.
fn check_reachable(dir: &Path, user: &User) -> Result<()> {
    let mut cur = Some(dir);
    while let Some(d) = cur {
        let meta = fs::metadata(d).with_context(|| format!("reading {}", d.display()))?;
        let mode = meta.mode();
        let ok = if meta.uid() == user.uid {
            mode & 0o100 != 0
        } else if meta.gid() == user.gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !ok {
            bail!(
                "PostgreSQL runs as user `{}` (it refuses to run as root) but cannot reach {}: \
                 directory {} is not searchable by that user; use a data directory elsewhere or \
                 `chmod o+x {}`",
                user.name,
                dir.display(),
                d.display(),
                d.display()
            );
        }
        cur = d.parent();
    }
    Ok(())
}

fn has_server_binaries(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// Where initdb and postgres live. A cluster that already exists prefers the
/// binaries of its own major version, which alone can open it.
fn find_bindir(data_dir: &Path) -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("AGENTDESK_PG_BINDIR") {
        let dir = PathBuf::from(dir);
        if has_server_binaries(&dir) {
            return Ok(dir);
        }
        bail!(
            "AGENTDESK_PG_BINDIR={} does not contain initdb and postgres",
            dir.display()
        );
    }
    if let Ok(version) = fs::read_to_string(data_dir.join("PG_VERSION")) {
        let dir = PathBuf::from(format!("/usr/lib/postgresql/{}/bin", version.trim()));
        if has_server_binaries(&dir) {
            return Ok(dir);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_server_binaries(&dir) {
                return Ok(dir);
            }
        }
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").stderr(Stdio::null()).output() {
        if out.status.success() {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if has_server_binaries(&dir) {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = Vec::new();
    for root in ["/usr/lib/postgresql", "/usr/local/pgsql"] {
        let Ok(entries) = fs::read_dir(root) else {
            continue;
        };
        for entry in entries.flatten() {
            let bin = entry.path().join("bin");
            let key = entry
                .file_name()
                .to_string_lossy()
                .split('.')
                .map(|p| p.parse().unwrap_or(0))
                .collect();
            if has_server_binaries(&bin) {
                versions.push((key, bin));
            }
        }
    }
    if has_server_binaries(Path::new("/usr/local/pgsql/bin")) {
        versions.push((Vec::new(), PathBuf::from("/usr/local/pgsql/bin")));
    }
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Ok(dir);
    }
    bail!(
        "no PostgreSQL server binaries found (initdb/postgres): install them, e.g. \
         `apt-get install postgresql`, or set DATABASE_URL"
    )
}

fn chown(path: &Path, user: &User) -> Result<()> {
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
        .with_context(|| format!("chown {} to {}", path.display(), user.name))
}

/// Hands a whole directory tree to the server user; skipped when the top is
/// already theirs, which is the case on every start after the first.
fn chown_tree(dir: &Path, user: &User) -> Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    if meta.uid() == user.uid && meta.gid() == user.gid {
        return Ok(());
    }
    fn walk(path: &Path, user: &User) -> Result<()> {
        let meta = fs::symlink_metadata(path)?;
        if meta.file_type().is_symlink() {
            return Ok(());
        }
        chown(path, user)?;
        if meta.is_dir() {
            for entry in fs::read_dir(path)? {
                walk(&entry?.path(), user)?;
            }
        }
        Ok(())
    }
    walk(dir, user)
}

/// Makes `path` an empty directory, 0700, owned by the server user.
fn make_private_dir(path: &Path, user: Option<&User>) -> Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
        }
        Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
    }
    if let Some(user) = user {
        chown(path, user)?;
    }
    Ok(())
}

fn run_as(cmd: &mut Command, user: Option<&User>) {
    if let Some(user) = user {
        // Supplementary groups of root are dropped by std when uid is set.
        cmd.uid(user.uid).gid(user.gid);
        cmd.env("USER", &user.name).env("LOGNAME", &user.name);
    }
}

/// initdb into a scratch directory that is renamed into place at the end, so
/// an interrupted initdb never leaves a half-made cluster behind that later
/// starts would mistake for a real one.
fn init_cluster(bindir: &Path, layout: &Layout, user: Option<&User>) -> Result<()> {
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
    let mut cmd = Command::new(bindir.join("initdb"));
    cmd.arg("-D")
        .arg(&scratch)
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-instructions",
        ])
        .current_dir(&scratch)
        .stdin(Stdio::null());
    run_as(&mut cmd, user);
    let out = cmd
        .output()
        .with_context(|| format!("running {}", bindir.join("initdb").display()))?;
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
fn prepare_socket_dir(layout: &Layout, user: Option<&User>) -> Result<Option<PathBuf>> {
    let dir = layout.parent.join(format!("{}.run", layout.name));
    // ".s.PGSQL.65535" is the longest name postgres puts there.
    if dir.as_os_str().len() + 15 > MAX_SOCKET_PATH {
        return Ok(None);
    }
    make_private_dir(&dir, user)?;
    Ok(Some(dir))
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

fn spawn_server(
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

enum StartError {
    PortInUse(anyhow::Error),
    Other(anyhow::Error),
}

async fn wait_ready(port: u16, child: &mut Child, log: &Path) -> Result<(), StartError> {
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
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

async fn try_connect(url: &str) -> Result<PgConnection> {
    match tokio::time::timeout(Duration::from_secs(3), PgConnection::connect(url)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => bail!("timed out connecting"),
    }
}

/// The last lines of the server log, for error messages.
fn log_tail(log: &Path) -> String {
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
fn read_postmaster_pid(data_dir: &Path) -> Option<(i32, u16)> {
    let text = fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let mut lines = text.lines();
    let pid = lines.next()?.trim().parse().ok()?;
    let port = lines.nth(2)?.trim().parse().ok()?;
    Some((pid, port))
}

fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether the process is a postgres. After a reboot or in a new container
/// the pid in a stale postmaster.pid often belongs to an unrelated process.
fn is_postgres_process(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(comm) => comm.trim() == "postgres",
        // Without /proc we cannot tell; the connection check decides.
        Err(_) => !Path::new("/proc/self").exists(),
    }
}

/// The postmaster runs with its data directory as working directory, which
/// tells a live server of ours from a reused pid; None when we cannot see it.
fn cwd_matches(pid: i32, data_dir: &Path) -> Option<bool> {
    let cwd = fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    let dir = fs::canonicalize(data_dir).ok()?;
    Some(cwd == dir)
}

/// Whether the process has exited. A server spawned earlier by this process
/// but no longer tracked stays a zombie (and so "alive" to kill(2)) until it
/// is reaped, hence the waitpid.
fn process_gone(pid: i32, child: Option<&mut Child>) -> bool {
    match child {
        Some(child) => !matches!(child.try_wait(), Ok(None)),
        None => {
            unsafe {
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
            !pid_alive(pid)
        }
    }
}

fn send_signal(pid: i32, signal: i32) -> Result<()> {
    if unsafe { libc::kill(pid, signal) } != 0 {
        let err = std::io::Error::last_os_error();
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
async fn find_running(data_dir: &Path) -> Result<Option<(i32, u16)>> {
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
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
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

#[cfg(test)]
mod tests {
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
