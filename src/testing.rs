//! Helpers for tests: a fresh, empty database per test.

use anyhow::Context;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// Creates a new empty database on the server of `DATABASE_URL` and returns its URL.
pub async fn fresh_database() -> anyhow::Result<String> {
    let url = std::env::var("DATABASE_URL").context("DATABASE_URL is not set")?;
    let options: PgConnectOptions = url.parse().context("DATABASE_URL is not a Postgres URL")?;
    let name = format!("agentdesk_test_{}", uuid::Uuid::now_v7().simple());
    let mut conn = options
        .connect()
        .await
        .context("cannot connect to DATABASE_URL")?;
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(with_database(&url, &name))
}

/// `url` with its database name replaced (query parameters kept).
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(i) => &base[..authority_start + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}
