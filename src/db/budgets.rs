//! Money budgets: a row per budget and period holding what was spent and what is reserved for
//! requests in flight. Before a request the worker reserves its worst case against every budget
//! that applies, each with one conditional UPDATE (so processes that reserve at once never take
//! a budget past its limit); once the request's real cost is known it settles. A reservation is
//! tied to its claim: one that was never settled (the worker died) is given back by the reaper
//! once the claim has ended.

use chrono::Utc;
use sqlx::{PgConnection, PgPool, Row};
use uuid::Uuid;

use super::fence::Fence;
use crate::domain::money::Usd;
use crate::domain::{EventData, NewEvent, ProjectId, RequeueReason};

/// The thresholds announced once each per period (`budget.threshold`).
pub const THRESHOLDS: [i32; 3] = [50, 80, 100];

/// A budget that applies to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// `ticket` or `agent`.
    pub scope: &'static str,
    /// Its key: the ticket's id, the agent's name.
    pub key: String,
    /// `""` for a ticket's whole life; the UTC day (`2026-01-31`) for an agent.
    pub period: String,
    /// As events name it: the ticket's key, the agent's name.
    pub name: String,
    pub limit: Usd,
    /// What it starts from when its row is made (a ticket's cost so far).
    pub spent_before: Usd,
}

impl Budget {
    pub fn ticket(id: Uuid, key: &str, limit: Usd, cost_so_far: Usd) -> Budget {
        Budget {
            scope: "ticket",
            key: id.to_string(),
            period: String::new(),
            name: key.to_owned(),
            limit,
            spent_before: cost_so_far,
        }
    }

    pub fn agent_day(project: ProjectId, name: &str, limit: Usd) -> Budget {
        Budget {
            scope: "agent",
            key: agent_key(project, name),
            period: today(),
            name: name.to_owned(),
            limit,
            spent_before: Usd::ZERO,
        }
    }
}

/// The key of an agent's budget: its name, with its project's id before it outside `default`
/// (agents of two projects may share a name; `default`'s keys stay as they were).
pub fn agent_key(project: ProjectId, name: &str) -> String {
    if project == ProjectId::DEFAULT {
        name.to_owned()
    } else {
        format!("{project}/{name}")
    }
}

/// The UTC day, as an agent's daily budget names its period.
pub fn today() -> String {
    Utc::now().format("%Y-%m-%d").to_string()
}

/// What a reservation holds: the budgets' rows and the amount held on each.
#[derive(Clone, Debug, Default)]
pub struct Reservation {
    pub budgets: Vec<(i64, Budget)>,
    pub amount: Usd,
}

/// A budget with no room for a request.
#[derive(Clone, Debug)]
pub struct Exhausted {
    pub budget: Budget,
    pub limit: Usd,
    pub spent: Usd,
}

/// Reserves `amount` against every budget, all or nothing: Err names the first with no room.
pub async fn reserve(
    pool: &PgPool,
    fence: Fence,
    budgets: &[Budget],
    amount: Usd,
) -> Result<Result<Reservation, Exhausted>, sqlx::Error> {
    // The rows first, on their own: they stay whether or not the reservation fits.
    let mut ids = Vec::with_capacity(budgets.len());
    {
        let mut conn = pool.acquire().await?;
        for budget in budgets {
            ids.push(ensure_row(&mut conn, budget).await?);
        }
    }
    let mut tx = pool.begin().await?;
    let mut held = Vec::with_capacity(budgets.len());
    for (budget, id) in budgets.iter().zip(ids) {
        let fits: Option<i64> = sqlx::query_scalar(
            "UPDATE budgets SET reserved = reserved + $2::numeric
             WHERE id = $1 AND spent + reserved + $2::numeric <= limit_usd RETURNING id",
        )
        .bind(id)
        .bind(amount.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        if fits.is_none() {
            let (limit, spent) = figures(&mut tx, id).await?;
            tx.rollback().await?;
            return Ok(Err(Exhausted {
                budget: budget.clone(),
                limit,
                spent,
            }));
        }
        sqlx::query(
            "INSERT INTO budget_reservations (ticket_id, generation, budget_id, amount)
             VALUES ($1, $2, $3, $4::numeric)
             ON CONFLICT (ticket_id, budget_id) DO UPDATE SET
                amount = budget_reservations.amount + EXCLUDED.amount, generation = EXCLUDED.generation",
        )
        .bind(fence.ticket_id)
        .bind(fence.generation)
        .bind(id)
        .bind(amount.to_string())
        .execute(&mut *tx)
        .await?;
        held.push((id, budget.clone()));
    }
    tx.commit().await?;
    Ok(Ok(Reservation { budgets: held, amount }))
}

/// The budget's row, made with its limit when this is the period's first request.
async fn ensure_row(conn: &mut PgConnection, budget: &Budget) -> Result<i64, sqlx::Error> {
    let made: Option<i64> = sqlx::query_scalar(
        "INSERT INTO budgets (scope, name, period, limit_usd, spent)
         VALUES ($1, $2, $3, $4::numeric, $5::numeric)
         ON CONFLICT (project_id, scope, name, period) DO NOTHING RETURNING id",
    )
    .bind(budget.scope)
    .bind(&budget.key)
    .bind(&budget.period)
    .bind(budget.limit.to_string())
    .bind(budget.spent_before.to_string())
    .fetch_optional(&mut *conn)
    .await?;
    match made {
        Some(id) => Ok(id),
        None => {
            sqlx::query_scalar("SELECT id FROM budgets WHERE scope = $1 AND name = $2 AND period = $3")
                .bind(budget.scope)
                .bind(&budget.key)
                .bind(&budget.period)
                .fetch_one(conn)
                .await
        }
    }
}

/// A budget row's limit and what it has spent and reserved together.
async fn figures(conn: &mut PgConnection, id: i64) -> Result<(Usd, Usd), sqlx::Error> {
    let row = sqlx::query("SELECT limit_usd::text AS l, spent::text AS s FROM budgets WHERE id = $1")
        .bind(id)
        .fetch_one(conn)
        .await?;
    let parse = |s: String| Usd::parse(&s).unwrap_or_default();
    Ok((parse(row.try_get("l")?), parse(row.try_get("s")?)))
}

/// Settles a reservation at the request's real cost: what is still reserved is given back, the
/// cost is spent. Returns the `budget.threshold` events this spending crossed.
pub async fn settle(
    pool: &PgPool,
    ticket_id: Uuid,
    reservation: &Reservation,
    cost: Usd,
    agent: &str,
) -> Result<Vec<NewEvent>, sqlx::Error> {
    let ids: Vec<i64> = reservation.budgets.iter().map(|(id, _)| *id).collect();
    let mut tx = pool.begin().await?;
    // Only what is still held is given back (the reaper may have given it back already).
    let held: Vec<(i64, String)> = sqlx::query_as(
        "DELETE FROM budget_reservations WHERE ticket_id = $1 AND budget_id = ANY($2) RETURNING budget_id, amount::text",
    )
    .bind(ticket_id)
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    let rows = sqlx::query(
        "SELECT id, limit_usd::text AS l, spent::text AS s, notified FROM budgets WHERE id = ANY($1) ORDER BY id FOR UPDATE",
    )
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    let mut events = vec![];
    for row in rows {
        let id: i64 = row.try_get("id")?;
        let limit = Usd::parse(&row.try_get::<String, _>("l")?).unwrap_or_default();
        let spent = Usd::parse(&row.try_get::<String, _>("s")?)
            .unwrap_or_default()
            .plus(cost);
        let notified: i32 = row.try_get("notified")?;
        let released = held
            .iter()
            .find(|(b, _)| *b == id)
            .and_then(|(_, a)| Usd::parse(a))
            .unwrap_or_default();
        let reached = reached(spent, limit);
        sqlx::query(
            "UPDATE budgets SET spent = $2::numeric, reserved = GREATEST(reserved - $3::numeric, 0),
                notified = GREATEST(notified, $4) WHERE id = $1",
        )
        .bind(id)
        .bind(spent.to_string())
        .bind(released.to_string())
        .bind(reached)
        .execute(&mut *tx)
        .await?;
        let budget = reservation.budgets.iter().find(|(b, _)| *b == id).map(|(_, b)| b);
        for percent in THRESHOLDS.into_iter().filter(|p| *p > notified && *p <= reached) {
            if let Some(budget) = budget {
                let data = EventData::BudgetThreshold {
                    scope: budget.scope.to_owned(),
                    name: budget.name.clone(),
                    percent,
                };
                events.push(NewEvent::new(Some(agent), data));
            }
        }
    }
    tx.commit().await?;
    Ok(events)
}

/// The highest threshold `spent` has reached of `limit` (0 for none, and for a zero limit).
pub fn reached(spent: Usd, limit: Usd) -> i32 {
    if limit.pico() <= 0 {
        return 0;
    }
    THRESHOLDS
        .into_iter()
        .filter(|p| spent.pico().saturating_mul(100) >= limit.pico().saturating_mul(i128::from(*p)))
        .max()
        .unwrap_or(0)
}

/// Whether `amount` now fits the budget (checked under its row lock, in the transaction that
/// would make a ticket wait for it: a raise committed meanwhile is seen).
pub async fn fits_now(conn: &mut PgConnection, budget: &Budget, amount: Usd) -> Result<bool, sqlx::Error> {
    let fits: Option<bool> = sqlx::query_scalar(
        "SELECT spent + reserved + $4::numeric <= limit_usd FROM budgets
         WHERE scope = $1 AND name = $2 AND period = $3 FOR UPDATE",
    )
    .bind(budget.scope)
    .bind(&budget.key)
    .bind(&budget.period)
    .bind(amount.to_string())
    .fetch_optional(conn)
    .await?;
    Ok(fits.unwrap_or(true))
}

/// Makes a claimed ticket wait (inside its fenced transaction) for a budget or a price:
/// `waiting_for` and the budget that stopped it, then `events` and `ticket.waiting`. The claim
/// is let go without spending an attempt; the transcript stays as it is.
pub async fn wait(
    conn: &mut PgConnection,
    fence: Fence,
    agent: &str,
    waiting_for: &str,
    blocked: Option<&Budget>,
    events: &[NewEvent],
) -> Result<(), sqlx::Error> {
    super::events::append(conn, fence.ticket_id, events).await?;
    super::claims::release(conn, fence, super::claims::Release::Waiting, agent).await?;
    sqlx::query(
        "UPDATE tickets SET waiting_for = $2, blocked_scope = $3, blocked_name = $4, blocked_period = $5
         WHERE id = $1",
    )
    .bind(fence.ticket_id)
    .bind(waiting_for)
    .bind(blocked.map(|b| b.scope))
    .bind(blocked.map(|b| b.key.as_str()))
    .bind(blocked.map(|b| b.period.as_str()))
    .execute(conn)
    .await?;
    Ok(())
}

/// A budget's new limit (None: no budget any more), for every period's row; the tickets it
/// stopped go back to `todo` when it was raised or removed. Returns how many did.
pub async fn set_limit(
    conn: &mut PgConnection,
    scope: &str,
    key: &str,
    limit: Option<Usd>,
    raised: bool,
) -> Result<usize, sqlx::Error> {
    // Without a budget its rows stay, as the record of what was spent.
    if let Some(limit) = limit {
        sqlx::query("UPDATE budgets SET limit_usd = $3::numeric WHERE scope = $1 AND name = $2")
            .bind(scope)
            .bind(key)
            .bind(limit.to_string())
            .execute(&mut *conn)
            .await?;
    }
    if !raised && limit.is_some() {
        return Ok(0);
    }
    resume(conn, "blocked_scope = $1 AND blocked_name = $2", &[scope, key]).await
}

/// Tickets that wait for a price go back to `todo` (a price was set).
pub async fn resume_priced(conn: &mut PgConnection) -> Result<usize, sqlx::Error> {
    resume(conn, "waiting_for = 'price'", &[]).await
}

/// Tickets stopped by an agent's daily budget of an earlier day go back to `todo`.
pub async fn resume_new_day(pool: &PgPool) -> Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let today = today();
    let n = resume(
        &mut tx,
        "blocked_scope = 'agent' AND blocked_period < $1",
        &[today.as_str()],
    )
    .await?;
    tx.commit().await?;
    Ok(n)
}

/// Waiting tickets matching `condition` (with text parameters `params`) go back to `todo`, each
/// with `ticket.requeued {reason: budget}`.
async fn resume(conn: &mut PgConnection, condition: &str, params: &[&str]) -> Result<usize, sqlx::Error> {
    let sql = format!(
        "UPDATE tickets SET status = 'todo', waiting_for = NULL, blocked_scope = NULL, blocked_name = NULL,
            blocked_period = NULL, updated_at = now()
         WHERE id IN (SELECT id FROM tickets WHERE status = 'waiting' AND waiting_for IS NOT NULL
                      AND {condition} FOR UPDATE SKIP LOCKED)
         RETURNING id, agent"
    );
    let mut query = sqlx::query_as::<_, (Uuid, Option<String>)>(&sql);
    for p in params {
        query = query.bind(*p);
    }
    let resumed = query.fetch_all(&mut *conn).await?;
    for (id, agent) in &resumed {
        let event = NewEvent::new(
            agent.as_deref(),
            EventData::TicketRequeued {
                reason: RequeueReason::Budget,
            },
        );
        super::events::append(conn, *id, &[event]).await?;
    }
    if !resumed.is_empty() {
        super::tickets::notify_work(conn).await?;
    }
    Ok(resumed.len())
}

/// Gives back what claims that ended without settling still hold (their worker died or lost
/// the claim between reserving and settling). Returns how many reservations.
pub async fn release_orphans(pool: &PgPool) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "WITH gone AS (
            DELETE FROM budget_reservations r
            WHERE NOT EXISTS (SELECT 1 FROM tickets t WHERE t.id = r.ticket_id
                              AND t.status = 'in_progress' AND t.generation = r.generation)
            RETURNING r.budget_id, r.amount),
         g AS (SELECT budget_id, sum(amount) AS amount FROM gone GROUP BY budget_id)
         UPDATE budgets b SET reserved = GREATEST(b.reserved - g.amount, 0) FROM g WHERE b.id = g.budget_id",
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Every money budget's standing, for an agent's or a ticket's view.
pub async fn standing(pool: &PgPool, scope: &str, key: &str, period: &str) -> Result<Option<(Usd, Usd)>, sqlx::Error> {
    let row: Option<(String, String)> = sqlx::query_as(
        "SELECT spent::text, reserved::text FROM budgets WHERE scope = $1 AND name = $2 AND period = $3",
    )
    .bind(scope)
    .bind(key)
    .bind(period)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(s, r)| (Usd::parse(&s).unwrap_or_default(), Usd::parse(&r).unwrap_or_default())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_reached_at_50_80_and_100_percent() {
        let usd = |s: &str| Usd::parse(s).unwrap();
        assert_eq!(reached(usd("0.49"), usd("1")), 0);
        assert_eq!(reached(usd("0.5"), usd("1")), 50);
        assert_eq!(reached(usd("0.79"), usd("1")), 50);
        assert_eq!(reached(usd("0.8"), usd("1")), 80);
        assert_eq!(reached(usd("1"), usd("1")), 100);
        assert_eq!(reached(usd("0"), usd("0")), 0);
    }
}
