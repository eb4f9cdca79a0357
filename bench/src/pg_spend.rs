//! What Postgres spends, read from the server's processes and its WAL position.

use anyhow::Result;

use crate::server;

/// What Postgres has spent so far, or per ticket between two readings: CPU seconds of the
/// server's processes (0 when it runs elsewhere) and WAL bytes, cluster-wide.
#[derive(Clone, Copy)]
pub struct PgSpend {
    pub cpu_s: f64,
    pub wal_bytes: f64,
}

impl PgSpend {
    pub async fn now(db_url: &str) -> Result<PgSpend> {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(db_url).await?;
        let (wal, backend): (i64, i32) =
            sqlx::query_as("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, pg_backend_pid()")
                .fetch_one(&mut c)
                .await?;
        // The server's processes when it runs on this machine (a backend's parent is its
        // postmaster), so that another server here (a test suite's) is not counted; else every
        // postgres process visible (none, for a remote server).
        let cpu_s = match server::parent(backend as u32) {
            Some(postmaster) => server::cluster_cpu_secs(postmaster),
            None => server::postgres_cpu_secs(),
        };
        let _ = c.close().await;
        Ok(PgSpend {
            cpu_s,
            wal_bytes: wal as f64,
        })
    }

    pub fn since(self, before: PgSpend, tickets: i64) -> PgSpend {
        let n = tickets.max(1) as f64;
        PgSpend {
            cpu_s: (self.cpu_s - before.cpu_s) / n,
            wal_bytes: (self.wal_bytes - before.wal_bytes) / n,
        }
    }
}
