//! The superuser's password: generated once, kept beside the cluster, and the only way in.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, Result};
use rand::Rng;
use sqlx::PgConnection;

/// What pg_hba.conf says: every connection, over the socket or TCP, proves the password.
const HBA: &str = "\
# Written by agentdesk: every connection signs in with the password kept beside this cluster
# (<data directory>.password).
local all all scram-sha-256
host  all all 127.0.0.1/32 scram-sha-256
host  all all ::1/128 scram-sha-256
";

/// The password in `file`, if there is one.
pub(super) fn read(file: &Path) -> Result<Option<String>> {
    match fs::read_to_string(file) {
        Ok(text) => {
            let password = text.trim();
            Ok((!password.is_empty()).then(|| password.to_owned()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", file.display())),
    }
}

/// A new random password (256 bits, hex), written to `file` readable by its owner only. Written
/// to a scratch file and renamed, so the file is either whole or absent.
pub(super) fn create(file: &Path) -> Result<String> {
    let bytes: [u8; 32] = rand::rng().random();
    let password: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let scratch = file.with_extension("password.new");
    let _ = fs::remove_file(&scratch);
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&scratch)
        .with_context(|| format!("creating {}", scratch.display()))?;
    out.write_all(password.as_bytes())?;
    out.sync_all()?;
    fs::rename(&scratch, file).with_context(|| format!("writing {}", file.display()))?;
    Ok(password)
}

/// initdb reads the password from a file the server user can read: `dir` is its scratch
/// directory, private to that user.
pub(super) fn write_for_initdb(dir: &Path, password: &str) -> Result<std::path::PathBuf> {
    let file = dir.join("pwfile");
    fs::write(&file, password).with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// Makes sure no pg_hba.conf rule trusts anyone, as clusters made by earlier versions (trust for
/// every local user) did: sets the password and rewrites the rules, then reloads them. A no-op
/// when the cluster already asks for passwords, which is every start after the first.
pub(super) async fn require_everywhere(conn: &mut PgConnection, password: &str) -> Result<()> {
    let trusting: i64 =
        sqlx::query_scalar("select count(*) from pg_hba_file_rules where auth_method not in ('scram-sha-256', 'md5')")
            .fetch_one(&mut *conn)
            .await
            .context("reading the embedded PostgreSQL's pg_hba.conf")?;
    if trusting == 0 {
        return Ok(());
    }
    let hba_file: String = sqlx::query_scalar("show hba_file").fetch_one(&mut *conn).await?;
    // The password first: once the rules ask for it, it must already be set. It is hex, so it
    // cannot break out of the literal.
    sqlx::query("set password_encryption = 'scram-sha-256'")
        .execute(&mut *conn)
        .await?;
    sqlx::query(&format!("alter role postgres password '{password}'"))
        .execute(&mut *conn)
        .await
        .context("setting the embedded PostgreSQL's password")?;
    // Written in place, so the file keeps its owner (the server user).
    fs::write(&hba_file, HBA).with_context(|| format!("writing {hba_file}"))?;
    let reloaded: bool = sqlx::query_scalar("select pg_reload_conf()")
        .fetch_one(&mut *conn)
        .await?;
    anyhow::ensure!(reloaded, "the embedded PostgreSQL did not reload {hba_file}");
    tracing::info!(%hba_file, "the embedded PostgreSQL now asks every connection for its password");
    Ok(())
}
