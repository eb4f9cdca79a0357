//! What a model request costs, and the money budgets it must fit. The price comes from the
//! process's price book and the project's quotas from its project book (no database round trip);
//! only when a budget applies (the ticket's `budget_usd`, the agent's `budget_usd_per_day`, the
//! project's `tokens_per_day`, `cost_usd_per_day` and `cost_usd_per_month`) is the request's worst
//! case reserved before it is sent, and settled at its real cost once that is known
//! (`db::budgets`). A request that does not fit is not sent: the ticket waits for the budget (or,
//! with no price, for a price).

use chrono::Utc;

use super::step_state::{Charged, Step};
use super::{window, Flow, RunEnd, Stop};
use crate::db;
use crate::db::budgets::{Budget, Exhausted, Quota, Reservation, Unit};
use crate::domain::{EventData, NewEvent, Price, TicketUsage, Usd};
use crate::llm::ModelRequest;

/// What a request's reply may use when the agent sets no `max_tokens`: what the desk asks an
/// Anthropic server for when a request leaves it open.
pub const DEFAULT_OUTPUT_RESERVE: u64 = crate::llm::anthropic::DEFAULT_MAX_TOKENS as u64;

/// How often a reservation that found no room is tried again after a budget changed under it.
const RESERVE_TRIES: usize = 3;

/// A request's price, and what it holds against the budgets that apply.
#[derive(Default)]
pub(super) struct Charge {
    pub price: Option<Price>,
    pub reservation: Option<Reservation>,
}

/// The most output tokens a request may ask for, as its provider is asked.
fn max_output(request: &ModelRequest) -> u64 {
    let asked = request.max_tokens.map_or(DEFAULT_OUTPUT_RESERVE, u64::from);
    match request.thinking_budget {
        // Extended thinking raises the request's limit above the budget (`llm::anthropic`).
        Some(budget) => asked.max(u64::from(budget) + 1024),
        None => asked,
    }
}

impl Step<'_> {
    /// The budgets that apply to this ticket's requests now.
    async fn budgets(&self) -> Result<Vec<Budget>, sqlx::Error> {
        let mut budgets = vec![];
        if let Some(limit) = self.ticket.budget_usd {
            let spent = self.ticket.usage.cost;
            budgets.push(Budget::ticket(self.ticket.id, &self.ticket.key, limit, spent));
        }
        if let Some(limit) = self.agent.budget_usd_per_day {
            budgets.push(Budget::agent_day(self.ticket.project, &self.agent.name, limit));
        }
        budgets.extend(self.quota_budgets().await?);
        Ok(budgets)
    }

    /// The project's quotas on tokens and money, as budgets.
    async fn quota_budgets(&self) -> Result<Vec<Budget>, sqlx::Error> {
        let project = self.ticket.project;
        let Some(settings) = self.rt.projects.find(&self.rt.pool, project).await? else {
            return Ok(vec![]);
        };
        Ok(Quota::limits(&settings.quotas)
            .into_iter()
            .filter_map(|(quota, limit)| Some(Budget::project(project, &settings.name, quota, limit?)))
            .collect())
    }

    /// Prices a request about to be sent and, when a budget applies, reserves its worst case.
    /// Stops the step (the ticket waits) when a budget has no room or the model has no price.
    pub(super) async fn charge_for(&self, provider: &str, request: &ModelRequest) -> Flow<Charge> {
        let model = request.model.as_str();
        let mut price = self.rt.prices.price_for(model, provider, Utc::now());
        let budgets = self.budgets().await?;
        let mut charge = Charge::default();
        if budgets.is_empty() {
            charge.price = price;
            return Ok(charge);
        }
        // A token quota alone needs no price: it counts what is used, not what it costs.
        let money = budgets.iter().any(|b| b.unit == Unit::Usd);
        if price.is_none() && money {
            // This process may not have seen a price set elsewhere yet.
            self.rt.prices.reload(&self.rt.pool).await?;
            price = self.rt.prices.price_for(model, provider, Utc::now());
        }
        let worst = match &price {
            Some(found) => found.worst_case(window::estimate_tokens(request), max_output(request)),
            None if money => return self.wait_for_price(model, provider).await,
            None => Usd::ZERO,
        };
        charge.price = price;
        for tries in 1.. {
            match db::budgets::reserve(&self.rt.pool, self.fence, &budgets, worst).await? {
                Ok(reservation) => {
                    charge.reservation = Some(reservation);
                    return Ok(charge);
                }
                Err(exhausted) => self.wait_for_budget(exhausted, worst, tries < RESERVE_TRIES).await?,
            }
        }
        unreachable!("the loop returns")
    }

    /// A budget has no room for `worst`: the ticket waits for it, unless (with `recheck`) it was
    /// raised since (then Ok, and the reservation is tried again).
    async fn wait_for_budget(&self, exhausted: Exhausted, worst: Usd, recheck: bool) -> Flow<()> {
        let mut tx = self.fenced(&TicketUsage::default()).await?;
        if recheck && db::budgets::fits_now(&mut tx, &exhausted.budget, worst).await? {
            tx.rollback().await?;
            return Ok(());
        }
        let Exhausted { budget, limit, spent } = exhausted;
        // A token quota's figures are counts, not dollars: its stop is told by
        // `project.quota_reached` alone.
        let mut events = vec![];
        if budget.unit == Unit::Usd {
            let event = EventData::BudgetExhausted {
                scope: budget.scope.to_owned(),
                name: budget.name.clone(),
                limit_usd: limit,
                spent_usd: spent,
            };
            events.push(NewEvent::new(Some(self.name()), event));
        }
        db::budgets::pause_project(&mut tx, &budget, limit, spent).await?;
        db::budgets::wait(&mut tx, self.fence, self.name(), "budget", Some(&budget), &events).await?;
        tx.commit().await?;
        self.rt.hub.wake();
        tracing::info!(ticket = %self.ticket.key, scope = budget.scope, name = %budget.name,
            limit = %limit, spent = %spent, "a money budget has no room for the next request; the ticket waits");
        Err(Stop::End(RunEnd::Waiting))
    }

    /// A budget applies and the model has no price: the ticket waits for one. Under the lock a
    /// price change takes, the prices are read once more, so a price set meanwhile is not missed.
    async fn wait_for_price<T>(&self, model: &str, provider: &str) -> Flow<T> {
        let mut tx = self.fenced(&TicketUsage::default()).await?;
        db::prices::lock(&mut tx).await?;
        let desk = db::prices::all(&mut *tx).await?;
        let prices = desk.iter().chain(crate::domain::price::BUILT_IN.iter());
        if crate::domain::price::price_for(prices, model, provider, Utc::now()).is_some() {
            tx.rollback().await?;
            self.rt.prices.reload(&self.rt.pool).await?;
            // The next step finds it.
            return Err(Stop::End(RunEnd::Aborted));
        }
        let event = EventData::BudgetUnpriced {
            model: model.to_owned(),
        };
        let events = [NewEvent::new(Some(self.name()), event)];
        db::budgets::wait(&mut tx, self.fence, self.name(), "price", None, &events).await?;
        tx.commit().await?;
        self.rt.hub.wake();
        tracing::info!(ticket = %self.ticket.key, model, provider,
            "a money budget applies and the model has no price; the ticket waits for one");
        Err(Stop::End(RunEnd::Waiting))
    }

    /// `usage` with its cost at the charge's price. With no price it is unpriced when the
    /// request was answered or used tokens (a request that failed with nothing used costs nothing).
    pub(super) fn priced(&self, charge: &Charge, usage: TicketUsage, answered: bool) -> TicketUsage {
        priced(charge.price.as_ref(), usage, answered)
    }

    /// Settles the charge's reservation at what the request `used` (its cost and tokens); the
    /// `budget.threshold` events it crossed.
    pub(super) async fn settle(&self, charge: &mut Charge, used: &TicketUsage) -> Flow<Vec<NewEvent>> {
        let Some(reservation) = charge.reservation.take() else {
            return Ok(vec![]);
        };
        Ok(db::budgets::settle(&self.rt.pool, self.ticket.id, &reservation, used, self.name()).await?)
    }

    /// Adds a priced request's cost to `agentdesk_cost_usd_total` (nothing for an unpriced or a
    /// free one): an answered request's, a failed one's that reported tokens, a summariser's.
    /// Returns the cost in dollars, for the request's span.
    pub(super) fn record_cost(&self, provider: &str, usage: &TicketUsage) -> Option<f64> {
        let dollars: f64 = usage.cost_usd()?.to_string().parse().ok()?;
        crate::telemetry::metric::cost(
            self.ticket.project.0,
            &self.agent.name,
            provider,
            &self.agent.model,
            dollars,
        );
        Some(dollars)
    }

    /// Logs `budget.threshold` events now (when there are any: no write otherwise).
    pub(super) async fn append_thresholds(&self, events: Vec<NewEvent>) -> Flow<()> {
        if events.is_empty() {
            return Ok(());
        }
        self.append_events(events).await
    }

    /// Hands the latest response's charge to the step that stores it.
    pub(super) fn set_charged(&self, charged: Charged) {
        *self.charged.lock().unwrap_or_else(|e| e.into_inner()) = charged;
    }

    pub(super) fn take_charged(&self) -> Charged {
        std::mem::take(&mut *self.charged.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// `usage` with its cost at `price` (see `Step::priced`).
pub(super) fn priced(price: Option<&Price>, mut usage: TicketUsage, answered: bool) -> TicketUsage {
    match price {
        Some(price) => usage.cost = price.cost(&usage),
        None => {
            let used = usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + usage.cache_creation_tokens;
            usage.unpriced = answered || used > 0;
        }
    }
    usage
}
