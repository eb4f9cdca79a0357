//! The desk's signing key for links (`domain::link`), kept in Postgres so every process signs and
//! checks with the same one.

use sqlx::PgPool;

/// The links key: made with 32 random bytes by the first process that asks, read by the rest.
pub async fn signing_key(pool: &PgPool) -> Result<Vec<u8>, sqlx::Error> {
    let mut fresh = [0u8; 32];
    rand::fill(&mut fresh);
    sqlx::query("INSERT INTO desk_keys (name, secret) VALUES ('links', $1) ON CONFLICT (name) DO NOTHING")
        .bind(&fresh[..])
        .execute(pool)
        .await?;
    sqlx::query_scalar("SELECT secret FROM desk_keys WHERE name = 'links'")
        .fetch_one(pool)
        .await
}
