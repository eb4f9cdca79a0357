//! The worker pool: claims tickets, renews leases, reaps expired ones, runs the agent loop.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;

use crate::config::Config;
use crate::events::EventHub;
use crate::llm::Providers;

pub struct WorkerPool {}

impl WorkerPool {
    pub fn start(_pool: PgPool, _hub: EventHub, _config: Arc<Config>, _providers: Arc<Providers>) -> WorkerPool {
        WorkerPool {}
    }

    pub async fn shutdown(self, _grace: Duration) {}
}
