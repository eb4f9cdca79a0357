//! The desk's own prices, and the in-process price book every model request reads its price
//! from (no database round trip per request): reloaded at once after a change in this process,
//! and every few seconds for changes made by other processes.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use tokio_util::sync::CancellationToken;

use crate::domain::money::{self, Usd};
use crate::domain::price::{self, Price, PriceSource, BUILT_IN};

/// How often a process reloads the desk's prices (changes made by other processes show within it).
pub const REFRESH: Duration = Duration::from_secs(2);

const PRICE_COLUMNS: &str = "model, provider, input::text AS input, output::text AS output, \
     cache_read::text AS cache_read, cache_creation::text AS cache_creation, effective_from";

#[derive(sqlx::FromRow)]
struct PriceRow {
    model: String,
    provider: String,
    input: String,
    output: String,
    cache_read: Option<String>,
    cache_creation: Option<String>,
    effective_from: DateTime<Utc>,
}

impl From<PriceRow> for Price {
    fn from(r: PriceRow) -> Price {
        Price {
            model: r.model,
            provider: Some(r.provider).filter(|p| !p.is_empty()),
            input: Usd::parse(&r.input).unwrap_or_default(),
            output: Usd::parse(&r.output).unwrap_or_default(),
            cache_read: money::from_db(r.cache_read),
            cache_creation: money::from_db(r.cache_creation),
            effective_from: Some(r.effective_from),
            source: PriceSource::Desk,
        }
    }
}

/// Serialises price changes with tickets starting to wait for a price (in the caller's
/// transaction), so that a price set at that moment is never missed.
pub async fn lock(conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('agentdesk.prices', 0))")
        .execute(conn)
        .await?;
    Ok(())
}

/// Every desk price, by model, provider and then newest first.
pub async fn all<'e>(db: impl PgExecutor<'e>) -> Result<Vec<Price>, sqlx::Error> {
    let rows: Vec<PriceRow> = sqlx::query_as(&format!(
        "SELECT {PRICE_COLUMNS} FROM prices ORDER BY model, provider, effective_from DESC"
    ))
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Price::from).collect())
}

/// Sets a price (replacing the one of the same model, provider and `effective_from`).
pub async fn put<'e>(db: impl PgExecutor<'e>, p: &Price) -> Result<Price, sqlx::Error> {
    let row: PriceRow = sqlx::query_as(&format!(
        "INSERT INTO prices (model, provider, input, output, cache_read, cache_creation, effective_from)
         VALUES ($1, $2, $3::numeric, $4::numeric, $5::numeric, $6::numeric, $7)
         ON CONFLICT (model, provider, effective_from) DO UPDATE SET
            input = EXCLUDED.input, output = EXCLUDED.output, cache_read = EXCLUDED.cache_read,
            cache_creation = EXCLUDED.cache_creation, updated_at = now()
         RETURNING {PRICE_COLUMNS}"
    ))
    .bind(&p.model)
    .bind(p.provider.as_deref().unwrap_or(""))
    .bind(p.input.to_string())
    .bind(p.output.to_string())
    .bind(p.cache_read.map(|u| u.to_string()))
    .bind(p.cache_creation.map(|u| u.to_string()))
    .bind(p.effective_from.unwrap_or_else(Utc::now))
    .fetch_one(db)
    .await?;
    Ok(row.into())
}

/// Deletes every price of a model and provider (its whole history); how many there were.
pub async fn delete<'e>(db: impl PgExecutor<'e>, model: &str, provider: Option<&str>) -> Result<u64, sqlx::Error> {
    let done = sqlx::query("DELETE FROM prices WHERE model = $1 AND provider = $2")
        .bind(model)
        .bind(provider.unwrap_or(""))
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}

/// The prices a process charges requests with: the desk's (as last read) and the built-in table.
#[derive(Clone, Default)]
pub struct PriceBook {
    desk: Arc<RwLock<Arc<Vec<Price>>>>,
}

impl PriceBook {
    /// Reads the desk's prices now.
    pub async fn reload(&self, pool: &PgPool) -> Result<(), sqlx::Error> {
        let prices = all(pool).await?;
        *self.desk.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(prices);
        Ok(())
    }

    /// The desk's prices as last read.
    pub fn desk(&self) -> Arc<Vec<Price>> {
        self.desk.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The price a request for `model` on `provider` sent at `at` pays, if any.
    pub fn price_for(&self, model: &str, provider: &str, at: DateTime<Utc>) -> Option<Price> {
        let desk = self.desk();
        price::price_for(desk.iter().chain(BUILT_IN.iter()), model, provider, at).cloned()
    }

    /// Reloads every `REFRESH` until `stop`.
    pub fn spawn_refresh(&self, pool: PgPool, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let book = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(REFRESH) => {}
                }
                if let Err(err) = book.reload(&pool).await {
                    tracing::debug!(error = %err, "could not reload the prices");
                }
            }
        })
    }
}
