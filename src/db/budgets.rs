//! Money budgets: a row per budget and period holding what was spent and what is reserved for
//! requests in flight. Before a request the worker reserves its worst case against every budget
//! that applies, each with one conditional UPDATE (so processes that reserve at once never take
//! a budget past its limit); once the request's real cost is known it settles. A reservation is
//! tied to its claim: one that was never settled (the worker died) is given back by the reaper
//! once the claim has ended.
//!
//! A project's quotas are budgets too (scope `project`): its money per day and month, reserved
//! like any other, and its tokens per day, which a request may use while any are left (a token
//! count has no price to reserve by). A project whose quota is reached is paused until the
//! period ends: its tickets are not claimed (`projects.paused_until`), and
//! `project.quota_reached` is announced once per quota and period.

use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use sqlx::{PgConnection, PgPool, Row};
use uuid::Uuid;

use super::fence::Fence;
use crate::domain::money::Usd;
use crate::domain::{EventData, NewEvent, ProjectId, RequeueReason, TicketUsage};

/// The thresholds announced once each per period (`budget.threshold`).
pub const THRESHOLDS: [i32; 3] = [50, 80, 100];

/// What a budget counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// US dollars: a request reserves its worst case before it is sent.
    Usd,
    /// Input and output tokens (a project's `tokens_per_day`): a request may be sent while the
    /// count is below the limit. The row's columns hold the count as a whole number.
    Tokens,
}

/// A project's quota that is kept as a budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quota {
    TokensPerDay,
    CostPerDay,
    CostPerMonth,
}

impl Quota {
    pub fn as_str(self) -> &'static str {
        match self {
            Quota::TokensPerDay => "tokens_per_day",
            Quota::CostPerDay => "cost_usd_per_day",
            Quota::CostPerMonth => "cost_usd_per_month",
        }
    }

    /// A project's quotas that are kept as budgets, with their limits (a token count as the
    /// budget columns hold it); None where the project sets none.
    pub fn limits(quotas: &crate::domain::project::Quotas) -> [(Quota, Option<Usd>); 3] {
        [
            (Quota::TokensPerDay, quotas.tokens_per_day.map(count)),
            (Quota::CostPerDay, quotas.cost_usd_per_day),
            (Quota::CostPerMonth, quotas.cost_usd_per_month),
        ]
    }

    fn unit(self) -> Unit {
        match self {
            Quota::TokensPerDay => Unit::Tokens,
            _ => Unit::Usd,
        }
    }

    /// The period it counts in now (`2026-01-31`, or `2026-01` for a month) and when that ends.
    fn period(self, now: DateTime<Utc>) -> (String, DateTime<Utc>) {
        let midnight = midnight(now);
        match self {
            Quota::CostPerMonth => {
                let (y, m) = if now.month() == 12 {
                    (now.year() + 1, 1)
                } else {
                    (now.year(), now.month() + 1)
                };
                let end = Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0).single().unwrap_or(now);
                (now.format("%Y-%m").to_string(), end)
            }
            _ => (now.format("%Y-%m-%d").to_string(), midnight + Duration::days(1)),
        }
    }
}

/// The requests a budget's period spent before its row was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Since {
    pub project: ProjectId,
    /// Only this agent's requests.
    pub agent: Option<String>,
    pub start: DateTime<Utc>,
}

/// The start of the UTC day `now` is in.
fn midnight(now: DateTime<Utc>) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(now.year(), now.month(), now.day(), 0, 0, 0)
        .single()
        .unwrap_or(now)
}

/// A budget that applies to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// `ticket`, `agent` or `project`.
    pub scope: &'static str,
    /// Its key: the ticket's id, the agent's name, `{project id}/{quota}`.
    pub key: String,
    /// `""` for a ticket's whole life; the UTC day (`2026-01-31`) for an agent and a project's
    /// daily quotas, the month (`2026-01`) for its monthly one.
    pub period: String,
    /// As events name it: the ticket's key, the agent's name, the project's name.
    pub name: String,
    pub limit: Usd,
    /// What it starts from when its row is made (a ticket's cost so far).
    pub spent_before: Usd,
    /// A budget of a period set during that period counts what the period spent before it: the
    /// project's requests (those of one agent) since the period began, read from the log when
    /// the period's row is made.
    pub counts_since: Option<Since>,
    pub unit: Unit,
    /// For a project's quota: which, its project, and when its period ends.
    pub quota: Option<(Quota, ProjectId, DateTime<Utc>)>,
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
            counts_since: None,
            unit: Unit::Usd,
            quota: None,
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
            counts_since: Some(Since {
                project,
                agent: Some(name.to_owned()),
                start: midnight(Utc::now()),
            }),
            unit: Unit::Usd,
            quota: None,
        }
    }

    /// One of a project's quotas in its current period; a token quota's limit is a count.
    pub fn project(project: ProjectId, name: &str, quota: Quota, limit: Usd) -> Budget {
        let now = Utc::now();
        let (period, ends) = quota.period(now);
        let start = match quota {
            Quota::CostPerMonth => Utc
                .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
                .single()
                .unwrap_or(now),
            _ => midnight(now),
        };
        Budget {
            scope: "project",
            key: format!("{project}/{}", quota.as_str()),
            period,
            name: name.to_owned(),
            limit,
            spent_before: Usd::ZERO,
            counts_since: Some(Since {
                project,
                agent: None,
                start,
            }),
            unit: quota.unit(),
            quota: Some((quota, project, ends)),
        }
    }

    /// What a request adds to it: its cost, or its input and output tokens.
    fn amount(&self, used: &TicketUsage) -> Usd {
        match self.unit {
            Unit::Usd => used.cost,
            Unit::Tokens => count(used.input_tokens.saturating_add(used.output_tokens)),
        }
    }

    /// What a request reserves of it before it is sent: its worst case in dollars; nothing for
    /// tokens.
    fn reserves(&self, worst: Usd) -> Usd {
        match self.unit {
            Unit::Usd => worst,
            Unit::Tokens => Usd::ZERO,
        }
    }

    /// Whether a reservation of `amount` (an SQL parameter) fits a row with `spent` and
    /// `reserved`: within the limit in dollars; for tokens, while some are left.
    fn fits_sql(&self, amount: &str) -> String {
        match self.unit {
            Unit::Usd => format!("spent + reserved + {amount}::numeric <= limit_usd"),
            Unit::Tokens => format!("spent + {amount}::numeric < limit_usd"),
        }
    }
}

/// A count (of tokens) as the budget columns hold it: a whole number.
pub fn count(n: i64) -> Usd {
    Usd::parse(&n.max(0).to_string()).unwrap_or_default()
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
        let held_here = budget.reserves(amount);
        let fits: Option<i64> = sqlx::query_scalar(&format!(
            "UPDATE budgets SET reserved = reserved + $2::numeric WHERE id = $1 AND {} RETURNING id",
            budget.fits_sql("$2")
        ))
        .bind(id)
        .bind(held_here.to_string())
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
        .bind(held_here.to_string())
        .execute(&mut *tx)
        .await?;
        held.push((id, budget.clone()));
    }
    tx.commit().await?;
    Ok(Ok(Reservation { budgets: held, amount }))
}

/// The budget's row, made with its limit when this is the period's first request. A period's
/// row starts from what the period spent before it (`Budget::counts_since`): a budget set at
/// noon counts the morning's requests. Looked up first, so only the period's first request reads
/// the log.
async fn ensure_row(conn: &mut PgConnection, budget: &Budget) -> Result<i64, sqlx::Error> {
    if let Some(id) = row_id(&mut *conn, budget).await? {
        return Ok(id);
    }
    let spent = match &budget.counts_since {
        Some(since) => budget.spent_before.plus(spent_since(conn, budget.unit, since).await?),
        None => budget.spent_before,
    };
    let made: Option<i64> = sqlx::query_scalar(
        "INSERT INTO budgets (scope, name, period, limit_usd, spent)
         VALUES ($1, $2, $3, $4::numeric, $5::numeric)
         ON CONFLICT (project_id, scope, name, period) DO NOTHING RETURNING id",
    )
    .bind(budget.scope)
    .bind(&budget.key)
    .bind(&budget.period)
    .bind(budget.limit.to_string())
    .bind(spent.to_string())
    .fetch_optional(&mut *conn)
    .await?;
    match made {
        Some(id) => Ok(id),
        // Made meanwhile by another process.
        None => row_id(conn, budget).await?.ok_or(sqlx::Error::RowNotFound),
    }
}

async fn row_id(conn: &mut PgConnection, budget: &Budget) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM budgets WHERE scope = $1 AND name = $2 AND period = $3")
        .bind(budget.scope)
        .bind(&budget.key)
        .bind(&budget.period)
        .fetch_optional(conn)
        .await
}

/// What the project's requests (or one agent's) spent since `since.start`, from their
/// `request.finished` events: dollars, or input and output tokens. Reads the tickets changed
/// since then and their events through the events' key.
async fn spent_since(conn: &mut PgConnection, unit: Unit, since: &Since) -> Result<Usd, sqlx::Error> {
    let amount = match unit {
        Unit::Usd => "(e.data->>'cost_usd')::numeric",
        Unit::Tokens => {
            "coalesce((e.data->'usage'->>'input_tokens')::numeric, 0) + coalesce((e.data->'usage'->>'output_tokens')::numeric, 0)"
        }
    };
    let spent: String = sqlx::query_scalar(&format!(
        "SELECT coalesce(sum({amount}), 0)::text FROM events e
         WHERE e.ticket_id IN (SELECT t.id FROM tickets t WHERE t.project_id = $1 AND t.updated_at >= $2
                               AND ($3::text IS NULL OR t.agent = $3))
           AND e.kind = 'request.finished' AND e.at >= $2 AND ($3::text IS NULL OR e.agent = $3)"
    ))
    .bind(since.project)
    .bind(since.start)
    .bind(since.agent.as_deref())
    .fetch_one(conn)
    .await?;
    Ok(Usd::parse(&spent).unwrap_or_default())
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

/// Settles a reservation at the request's real cost (and, for a token quota, its tokens): what is
/// still reserved is given back, the cost is spent. Returns the `budget.threshold` events this
/// spending crossed. A project quota this reaches pauses the project, in the same transaction.
pub async fn settle(
    pool: &PgPool,
    ticket_id: Uuid,
    reservation: &Reservation,
    used: &TicketUsage,
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
        let Some(budget) = reservation.budgets.iter().find(|(b, _)| *b == id).map(|(_, b)| b) else {
            continue;
        };
        let limit = Usd::parse(&row.try_get::<String, _>("l")?).unwrap_or_default();
        let spent = Usd::parse(&row.try_get::<String, _>("s")?)
            .unwrap_or_default()
            .plus(budget.amount(used));
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
        if budget.unit == Unit::Usd {
            for percent in THRESHOLDS.into_iter().filter(|p| *p > notified && *p <= reached) {
                let data = EventData::BudgetThreshold {
                    scope: budget.scope.to_owned(),
                    name: budget.name.clone(),
                    percent,
                };
                events.push(NewEvent::new(Some(agent), data));
            }
        }
        if spent.pico() >= limit.pico() {
            pause_project(&mut tx, budget, limit, spent).await?;
        }
    }
    tx.commit().await?;
    Ok(events)
}

/// A project quota was reached: the project is not claimed from until the quota's period ends
/// (or the quota is raised, which lifts the pause), and `project.quota_reached` is logged once
/// per quota and period. Nothing for other budgets.
pub async fn pause_project(conn: &mut PgConnection, budget: &Budget, limit: Usd, used: Usd) -> Result<(), sqlx::Error> {
    let Some((quota, project, ends)) = budget.quota else {
        return Ok(());
    };
    sqlx::query("UPDATE projects SET paused_until = $2 WHERE id = $1 AND paused_until IS DISTINCT FROM $2")
        .bind(project)
        .bind(ends.max(Utc::now()))
        .execute(&mut *conn)
        .await?;
    let first: Option<i64> = sqlx::query_scalar(
        "INSERT INTO project_quota_notices (project_id, quota, period) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING RETURNING project_id",
    )
    .bind(project)
    .bind(quota.as_str())
    .bind(&budget.period)
    .fetch_optional(&mut *conn)
    .await?;
    if first.is_some() {
        let event = EventData::ProjectQuotaReached {
            quota: quota.as_str().to_owned(),
            limit,
            used,
        };
        super::events::append_to_project(conn, project, &[NewEvent::new(None, event)]).await?;
        tracing::info!(project = %budget.name, quota = quota.as_str(), %limit, %used,
            "a project reached its quota; its tickets wait until the period ends or the quota is raised");
    }
    Ok(())
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
    let fits: Option<bool> = sqlx::query_scalar(&format!(
        "SELECT {} FROM budgets WHERE scope = $1 AND name = $2 AND period = $3 FOR UPDATE",
        budget.fits_sql("$4")
    ))
    .bind(budget.scope)
    .bind(&budget.key)
    .bind(&budget.period)
    .bind(budget.reserves(amount).to_string())
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

/// Tickets stopped by an agent's daily budget or a project's quota of an earlier day (or month)
/// go back to `todo`. (A paused project is claimed from again by itself once its
/// `paused_until` has passed.)
pub async fn resume_new_day(pool: &PgPool) -> Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let now = Utc::now();
    let (today, month) = (now.format("%Y-%m-%d").to_string(), now.format("%Y-%m").to_string());
    let n = resume(
        &mut tx,
        "blocked_scope IN ('agent', 'project')
         AND ((length(blocked_period) = 10 AND blocked_period < $1) OR (length(blocked_period) = 7 AND blocked_period < $2))",
        &[today.as_str(), month.as_str()],
    )
    .await?;
    tx.commit().await?;
    Ok(n)
}

/// A project's quotas changed: its budget rows take the new limits (a quota removed keeps its
/// rows as the record), the pause is lifted, and the tickets its quotas stopped go back to `todo`
/// (a quota still reached pauses it again at the next request). Returns how many resumed.
pub async fn set_project_quotas(
    conn: &mut PgConnection,
    project: ProjectId,
    quotas: &[(Quota, Option<Usd>)],
) -> Result<usize, sqlx::Error> {
    for (quota, limit) in quotas {
        if let Some(limit) = limit {
            sqlx::query("UPDATE budgets SET limit_usd = $3::numeric WHERE scope = $1 AND name = $2")
                .bind("project")
                .bind(format!("{project}/{}", quota.as_str()))
                .bind(limit.to_string())
                .execute(&mut *conn)
                .await?;
        }
    }
    sqlx::query("UPDATE projects SET paused_until = NULL WHERE id = $1 AND paused_until IS NOT NULL")
        .bind(project)
        .execute(&mut *conn)
        .await?;
    let prefix = format!("{project}/%");
    resume(
        conn,
        "blocked_scope = 'project' AND blocked_name LIKE $1",
        &[prefix.as_str()],
    )
    .await
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
