//! The embedded server's lifecycle on a real cluster: initdb, restart over an
//! existing cluster, a stale postmaster.pid, and reuse of a shared server.
//! One test function, because every step works on the same data directory.

use std::path::{Path, PathBuf};

use agentdesk::embedded_pg::EmbeddedPostgres;
use sqlx::{Connection, PgConnection};

async fn select_one(url: &str) -> i32 {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    let one: i32 = sqlx::query_scalar("select 1").fetch_one(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    one
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the pid exists; it touches no memory.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Stops whatever an earlier, interrupted run left running in `dir`, then
/// removes it and its sibling files.
async fn clean(dir: &Path) {
    if dir.join("PG_VERSION").exists() {
        if let Ok(pg) = EmbeddedPostgres::start(dir).await {
            let _ = pg.stop().await;
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    for ext in ["log", "lock", "run", "initdb", "initdb-pw", "password"] {
        let p = dir.with_extension(ext);
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
    }
}

/// Nobody signs in without the generated password: not over TCP, not over the Unix socket, not
/// with a wrong one; and the password file is private to its owner.
async fn assert_signs_in_with_password_only(dir: &Path, port: u16) {
    use std::os::unix::fs::PermissionsExt;
    let file = dir.with_extension("password");
    let mode = std::fs::metadata(&file).expect("password file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{} is readable by others", file.display());
    let password = std::fs::read_to_string(&file).unwrap();
    assert_eq!(password.trim().len(), 64);
    for url in [
        format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        format!("postgres://postgres:wrong@127.0.0.1:{port}/postgres"),
        format!("postgres://somebody@127.0.0.1:{port}/postgres"),
    ] {
        assert!(PgConnection::connect(&url).await.is_err(), "{url} signed in");
    }
    let socket_dir = dir.with_extension("run");
    if socket_dir.exists() {
        let url = format!(
            "postgres://postgres@localhost:{port}/postgres?host={}",
            socket_dir.display()
        );
        assert!(
            PgConnection::connect(&url).await.is_err(),
            "signed in over the socket without a password"
        );
        let url = format!(
            "postgres://postgres:{}@localhost:{port}/postgres?host={}",
            password.trim(),
            socket_dir.display()
        );
        assert_eq!(select_one(&url).await, 1, "the password does not work over the socket");
    }
}

#[tokio::test]
async fn embedded_server_lifecycle() {
    let mut dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("embedded-pg-lifecycle");
    if !agentdesk::embedded_pg::data_dir_reachable(&dir) {
        // As root in a tree the postgres user cannot enter.
        dir = std::env::temp_dir().join("agentdesk-embedded-pg-lifecycle");
    }
    clean(&dir).await;

    // First start: initdb, then a server with the agentdesk database.
    let pg = EmbeddedPostgres::start(&dir).await.expect("first start");
    assert!(dir.join("PG_VERSION").exists());
    assert_eq!(select_one(&pg.url()).await, 1);
    assert!(pg.url().ends_with("/agentdesk"));
    assert!(pg.admin_url().ends_with("/postgres"));
    let mut conn = PgConnection::connect(&pg.url()).await.unwrap();
    sqlx::query("create table survives (x int)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let pid = pg.pid();
    assert_signs_in_with_password_only(&dir, pg.port()).await;
    pg.stop().await.expect("stop");
    assert!(!pid_alive(pid), "postmaster still running after stop");
    assert!(!dir.join("postmaster.pid").exists());

    // A cluster made before passwords (trust for every local user, no password file) is locked
    // down at its next start.
    std::fs::write(
        dir.join("pg_hba.conf"),
        "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n",
    )
    .unwrap();
    std::fs::remove_file(dir.with_extension("password")).unwrap();
    let pg = EmbeddedPostgres::start(&dir)
        .await
        .expect("start over a trusting cluster");
    assert_eq!(select_one(&pg.url()).await, 1);
    assert_signs_in_with_password_only(&dir, pg.port()).await;
    pg.stop().await.expect("stop");

    // Second start reuses the cluster: the table is still there.
    let pg = EmbeddedPostgres::start(&dir).await.expect("restart");
    let mut conn = PgConnection::connect(&pg.url()).await.unwrap();
    let n: i64 = sqlx::query_scalar("select count(*) from survives")
        .fetch_one(&mut conn)
        .await
        .expect("table created before the restart");
    assert_eq!(n, 0);
    conn.close().await.unwrap();

    // Dropping a non-shared instance stops its server.
    let pid = pg.pid();
    drop(pg);
    assert!(!pid_alive(pid), "postmaster still running after drop");

    // A postmaster.pid left by a killed server (dead pid) does not block a
    // start, nor is it taken for a running server.
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    std::fs::write(
        dir.join("postmaster.pid"),
        format!("{dead_pid}\n{}\n0\n1\n\n127.0.0.1\n0 0\nready\n", dir.display()),
    )
    .unwrap();
    let pg = EmbeddedPostgres::start(&dir)
        .await
        .expect("start over a stale postmaster.pid");
    assert_ne!(pg.pid(), dead_pid as i32);
    assert_eq!(select_one(&pg.url()).await, 1);
    pg.stop().await.unwrap();

    // A shared server outlives its handle and is reused by the next call.
    let shared = EmbeddedPostgres::start_shared(&dir).await.expect("shared");
    let (pid, port) = (shared.pid(), shared.port());
    drop(shared);
    assert!(pid_alive(pid), "shared server stopped on drop");
    let again = EmbeddedPostgres::start_shared(&dir).await.expect("reuse");
    assert_eq!((again.pid(), again.port()), (pid, port));
    assert_eq!(select_one(&again.url()).await, 1);

    // start() reuses it too, and leaves it running when dropped.
    let plain = EmbeddedPostgres::start(&dir).await.expect("reuse by start");
    assert_eq!(plain.pid(), pid);
    drop(plain);
    assert!(pid_alive(pid));

    again.stop().await.expect("stop shared");
    assert!(!pid_alive(pid));
    clean(&dir).await;
}

#[tokio::test]
async fn fresh_databases_are_distinct_and_empty() {
    let urls = futures::future::join_all((0..8).map(|_| testkit::testing::fresh_database()))
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()
        .expect("fresh databases");
    let mut names: Vec<&str> = urls.iter().map(|u| u.rsplit('/').next().unwrap()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), urls.len());
    for url in &urls {
        let mut conn = PgConnection::connect(url).await.unwrap();
        let tables: i64 =
            sqlx::query_scalar("select count(*) from information_schema.tables where table_schema = 'public'")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(tables, 0);
        conn.close().await.unwrap();
    }
}
