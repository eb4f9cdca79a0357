//! The machine side of the embedded server: the `postgres` system user, directories it can
//! reach and own, the start lock, and where the server binaries are.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::LOCK_TIMEOUT;

/// Whether a server for `data_dir` could run: always when we are not root;
/// as root, when the `postgres` user can reach the directory's parent (not
/// so for a checkout under /root, for example). Lets callers pick another
/// place up front; a missing `postgres` user counts as reachable, since it
/// is created with the access it needs.
pub fn data_dir_reachable(data_dir: &Path) -> bool {
    if !super::sys::is_root() {
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
pub(super) struct User {
    pub(super) name: String,
    pub(super) uid: u32,
    pub(super) gid: u32,
}

pub(super) fn absolute(path: &Path) -> Result<PathBuf> {
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
pub(super) async fn lock_file(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening lock file {}", path.display()))?;
    let deadline = Instant::now() + LOCK_TIMEOUT;
    loop {
        let Err(err) = super::sys::try_lock(&file) else {
            return Ok(file);
        };
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
pub(super) fn postgres_user() -> Result<User> {
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

pub(super) fn lookup_user(name: &str) -> Result<Option<User>> {
    let passwd = fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?;
    Ok(parse_passwd(&passwd, name))
}

pub(super) fn parse_passwd(passwd: &str, name: &str) -> Option<User> {
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
pub(super) fn check_reachable(dir: &Path, user: &User) -> Result<()> {
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

pub(super) fn has_server_binaries(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// Where initdb and postgres live. A cluster that already exists prefers the
/// binaries of its own major version, which alone can open it. `given`: `AGENTDESK_PG_BINDIR`.
pub(super) fn find_bindir(data_dir: &Path, given: Option<&Path>) -> Result<PathBuf> {
    if let Some(dir) = given {
        let dir = dir.to_path_buf();
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

pub(super) fn chown(path: &Path, user: &User) -> Result<()> {
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
        .with_context(|| format!("chown {} to {}", path.display(), user.name))
}

/// Hands a whole directory tree to the server user; skipped when the top is
/// already theirs, which is the case on every start after the first.
pub(super) fn chown_tree(dir: &Path, user: &User) -> Result<()> {
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
pub(super) fn make_private_dir(path: &Path, user: Option<&User>) -> Result<()> {
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

pub(super) fn run_as(cmd: &mut Command, user: Option<&User>) {
    if let Some(user) = user {
        // Supplementary groups of root are dropped by std when uid is set.
        cmd.uid(user.uid).gid(user.gid);
        cmd.env("USER", &user.name).env("LOGNAME", &user.name);
    }
}
