//! Whether a waiting ticket will ever be claimed: a `todo` ticket whose labels no agent takes
//! waits for ever, so the answers that create or show one carry a warning header
//! (`AgentDesk-Warning`), which the client prints and the board shows. A header, not a field:
//! the ticket's JSON stays the one its `ticket.created` event carries.
//!
//! The agents' names and labels are read at most once per `FRESH_FOR` per process (a burst of
//! creates costs one query, not one each) and again at once after this process changed an
//! agent; another process's change shows within `FRESH_FOR`. The answer is advice: claims route
//! in the database, not by this.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderName, HeaderValue};
use sqlx::PgPool;
use tokio::sync::Mutex;

use crate::db;
use crate::domain::agent::some_agent_takes;
use crate::domain::ticket::{Status, Ticket};

/// The header that carries the warning.
pub const WARNING: HeaderName = HeaderName::from_static("agentdesk-warning");

const FRESH_FOR: Duration = Duration::from_secs(2);

type Routes = Arc<Vec<(crate::domain::ProjectId, String, Vec<String>)>>;

#[derive(Clone, Default)]
pub struct RouteCheck(Arc<Mutex<Option<(Instant, Routes)>>>);

impl RouteCheck {
    /// Forgets what was read, after this process changed an agent.
    pub async fn agents_changed(&self) {
        *self.0.lock().await = None;
    }

    async fn routes(&self, pool: &PgPool) -> Result<Routes, sqlx::Error> {
        let mut held = self.0.lock().await;
        if let Some((read_at, routes)) = held.as_ref() {
            if read_at.elapsed() < FRESH_FOR {
                return Ok(routes.clone());
            }
        }
        let routes = Arc::new(db::agents::routing(pool).await?);
        *held = Some((Instant::now(), routes.clone()));
        Ok(routes)
    }

    /// The warning for a `todo` ticket that no agent takes; None for any other ticket (the
    /// agents are read only for a `todo` one).
    pub async fn warning(&self, pool: &PgPool, ticket: &Ticket) -> Result<Option<String>, sqlx::Error> {
        if ticket.status != Status::Todo {
            return Ok(None);
        }
        // Only the ticket's own project's agents take it.
        let routes = self.routes(pool).await?;
        let own: Vec<(String, Vec<String>)> = routes
            .iter()
            .filter(|(project, _, _)| *project == ticket.project)
            .map(|(_, name, labels)| (name.clone(), labels.clone()))
            .collect();
        if some_agent_takes(&own, &ticket.labels) {
            return Ok(None);
        }
        let labels = if ticket.labels.is_empty() {
            "unlabelled tickets".to_owned()
        } else {
            format!("tickets labelled {}", ticket.labels.join(", "))
        };
        Ok(Some(format!(
            "no agent takes {labels}: it stays todo until an agent's labels (or name) match"
        )))
    }

    /// `warning` as the header an answer carries.
    pub async fn header(
        &self,
        pool: &PgPool,
        ticket: &Ticket,
    ) -> Result<Option<(HeaderName, HeaderValue)>, sqlx::Error> {
        let warning = self.warning(pool, ticket).await?;
        // Labels are printable ASCII or not; a header holds the former only.
        Ok(warning.map(|w| {
            let ascii: String = w
                .chars()
                .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
                .collect();
            (
                WARNING,
                HeaderValue::from_str(&ascii).unwrap_or(HeaderValue::from_static("no agent takes this ticket")),
            )
        }))
    }
}
