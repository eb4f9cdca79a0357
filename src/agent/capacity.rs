//! Provider capacity: at most `max_concurrent` model requests in flight to one provider across
//! every process of the desk (local servers that serve one request at a time interrupt the
//! running one when another arrives). A request to a provider with a limit takes a slot first,
//! waiting in order of arrival (`db::provider_slots`); the wait is outside the model call, so it
//! counts against no stall timeout, retry or turn limit, and a cancel ends it at once. A provider
//! without a limit costs nothing here.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;

use super::step_state::Step;
use super::{aborted, Flow};
use crate::db;
use crate::db::provider_slots::Turn;
use crate::domain::{EventData, NewEvent};
use crate::llm::Provider;

/// The slots of this process's requests, and the wake-up of its waiters when one is given back.
#[derive(Clone)]
pub struct ProviderSlots {
    pool: PgPool,
    /// How long a slot or a place in line lasts without renewal (the claims' lease).
    lease: Duration,
    /// A slot of this process was given back: its waiters look again at once. Waiters also look
    /// every `poll` for slots given back by other processes.
    freed: Arc<Notify>,
}

impl ProviderSlots {
    pub fn new(pool: PgPool, lease: Duration) -> Self {
        ProviderSlots {
            pool,
            lease,
            freed: Arc::new(Notify::new()),
        }
    }

    /// How often a waiter looks at the line (and renews its place): well within the lease.
    fn poll(&self) -> Duration {
        (self.lease / 3).min(Duration::from_millis(250))
    }
}

/// A place in line, then a held slot. Dropping it gives it back, in the background: the row
/// goes even when the step that held it was cancelled (and its lease frees it if that fails).
pub struct Slot {
    slots: ProviderSlots,
    id: i64,
    renewal: Option<tokio::task::JoinHandle<()>>,
}

impl Slot {
    /// The slot is taken: its lease is renewed until it is given back.
    fn hold(&mut self) {
        let (pool, id, lease) = (self.slots.pool.clone(), self.id, self.slots.lease);
        self.renewal = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                match db::provider_slots::renew(&pool, id, lease).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(slot = id, "a provider slot expired while its request ran");
                        return;
                    }
                    Err(err) => tracing::warn!(slot = id, error = %err, "renewing a provider slot failed"),
                }
            }
        }));
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (pool, id, freed) = (self.slots.pool.clone(), self.id, self.slots.freed.clone());
        runtime.spawn(async move {
            if let Err(err) = db::provider_slots::release(&pool, id).await {
                tracing::warn!(slot = id, error = %err, "giving a provider slot back failed; its lease frees it");
            }
            freed.notify_waiters();
        });
    }
}

impl Step<'_> {
    /// A slot of `provider` for one model request when it has a `max_concurrent`, waiting in
    /// line for it; None when it has no limit. A `request.queued` event says when the request
    /// has to wait.
    pub(super) async fn take_slot(&self, provider: &dyn Provider) -> Flow<Option<Slot>> {
        let Some(limit) = provider.max_concurrent() else {
            return Ok(None);
        };
        let name = self.agent.provider.as_deref().unwrap_or(provider.name());
        // The line is per provider of a project: the key, not the name.
        let key = self.provider_key(name);
        let slots = &self.rt.slots;
        let mut slot = self.get_in_line(&key).await?;
        let mut announced = false;
        loop {
            // Asked for before looking, so a slot given back meanwhile is not missed.
            let freed = slots.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match db::provider_slots::try_take(&slots.pool, slot.id, &key, limit, slots.lease).await? {
                Turn::Taken => {
                    slot.hold();
                    return Ok(Some(slot));
                }
                Turn::Waiting { ahead } if !announced => {
                    announced = true;
                    let queued = EventData::RequestQueued {
                        provider: name.to_owned(),
                        max_concurrent: limit,
                        ahead,
                    };
                    self.append_events(vec![NewEvent::new(Some(self.name()), queued)])
                        .await?;
                }
                Turn::Waiting { .. } => {}
                // The place was given up (not renewed in time): in line again, at the back.
                Turn::Lost => slot = self.get_in_line(&key).await?,
            }
            tokio::select! {
                biased;
                _ = self.signals.abort.cancelled() => return aborted(),
                _ = &mut freed => {}
                _ = tokio::time::sleep(slots.poll()) => {}
            }
        }
    }

    async fn get_in_line(&self, provider: &str) -> Flow<Slot> {
        let slots = &self.rt.slots;
        let id = db::provider_slots::enqueue(&slots.pool, provider, self.ticket.id, slots.lease).await?;
        Ok(Slot {
            slots: slots.clone(),
            id,
            renewal: None,
        })
    }
}
