//! Schedule firings: the tickets a schedule creates, each through the desk's own create (the
//! ticket and its `ticket.created` event in one statement), in the transaction that takes the fire
//! time's unique slot and moves the schedule on. Exactly once per fire time: the schedule's row
//! lock lets one scheduler at a time handle it, and the unique (schedule, fire time) row makes a
//! second ticket for the same time impossible whatever the timing; a crash before the commit
//! leaves no ticket and no handled fire time, so the next scheduler fires it.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::DeskError;
use crate::db;
use crate::db::tickets::NewTicket;
use crate::domain::schedule::{plan, render_task, ticket_metadata, Overlap, Rule, Schedule};
use crate::domain::{EventData, NewEvent, ProjectId, Ticket};

/// What handling one due schedule did (the `outcome` label of `schedule_firings_total`).
#[derive(Debug)]
pub enum Outcome {
    /// A ticket for an on-time fire time.
    Fired(Box<Ticket>),
    /// A ticket for the newest missed fire time (`catch_up: latest`).
    CaughtUp(Box<Ticket>),
    /// No ticket: the previous one is unfinished (`overlap: skip`; `schedule.skipped` is on it),
    /// or the project created its `tickets_per_day` (`schedule.skipped` is the project's).
    Skipped,
    /// Missed fire times passed over (`catch_up: skip`, or the newest outside the window).
    Missed,
    /// Another scheduler had already handled this fire time.
    AlreadyFired,
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Fired(_) => "fired",
            Outcome::CaughtUp(_) => "caught_up",
            Outcome::Skipped => "skipped",
            Outcome::Missed => "missed",
            Outcome::AlreadyFired => "already_fired",
        }
    }
}

fn not_found(reference: &str) -> DeskError {
    DeskError::Missing(format!("no schedule {reference:?}"))
}

/// Handles the earliest due schedule that no other scheduler is handling: None when none is due.
/// The cancelled tickets' project and agents come back for the metric.
pub async fn fire_due(pool: &PgPool) -> Result<Option<(Outcome, Vec<(ProjectId, String)>)>, DeskError> {
    let mut tx = pool.begin().await?;
    let Some((schedule, now)) = db::schedules::lock_due(&mut tx).await? else {
        return Ok(None);
    };
    let Some(due) = schedule.next_run_at else {
        return Ok(None);
    };
    let rule = match schedule.rule() {
        Ok(rule) => rule,
        Err(err) => {
            // Unreachable for stored schedules (checked when written): stop it rather than spin.
            tracing::warn!(schedule = %schedule.id, error = %err, "a schedule's rule no longer parses; it will not fire");
            db::schedules::advance(&mut tx, schedule.id, None).await?;
            tx.commit().await?;
            return Ok(Some((Outcome::Missed, vec![])));
        }
    };
    let plan = plan(&rule, due, now, schedule.catch_up, schedule.catch_up_window_secs);
    let mut cancelled = vec![];
    let outcome = match plan.fire {
        Some(at) => {
            let fired = fire_at(&mut tx, &schedule, &rule, at, &mut cancelled).await?;
            match fired {
                Outcome::Fired(ticket) if plan.missed => Outcome::CaughtUp(ticket),
                other => other,
            }
        }
        None => Outcome::Missed,
    };
    db::schedules::advance(&mut tx, schedule.id, plan.next_run_at).await?;
    tx.commit().await?;
    Ok(Some((outcome, cancelled)))
}

/// Fires `at` for a locked schedule, as `overlap` says.
async fn fire_at(
    conn: &mut PgConnection,
    schedule: &Schedule,
    rule: &Rule,
    at: DateTime<Utc>,
    cancelled: &mut Vec<(ProjectId, String)>,
) -> Result<Outcome, DeskError> {
    let open = db::schedules::open_tickets(conn, schedule.id).await?;
    // A project that created its `tickets_per_day` skips the fire, whatever `overlap` says.
    let over_quota = super::check_ticket_quota(conn, schedule.project).await?.is_err();
    let skip = over_quota || (schedule.overlap == Overlap::Skip && !open.is_empty());
    let outcome = if skip { "skipped" } else { "fired" };
    let Some(firing) = db::schedules::claim_fire_time(conn, schedule.id, at, outcome).await? else {
        return Ok(Outcome::AlreadyFired);
    };
    if skip {
        let event = EventData::ScheduleSkipped {
            schedule_id: schedule.id,
            scheduled_for: at,
            reason: if over_quota { "quota" } else { "overlap" }.into(),
        };
        let event = [NewEvent::new(None, event)];
        match open.first() {
            // On the unfinished ticket it waited for; a skip for the quota is the project's.
            Some((ticket_id, _)) if !over_quota => db::events::append(conn, *ticket_id, &event).await?,
            _ => db::events::append_to_project(conn, schedule.project, &event).await?,
        }
        return Ok(Outcome::Skipped);
    }
    if schedule.overlap == Overlap::CancelPrevious {
        for (_, key) in &open {
            if let (_, Some(agent)) = super::cancel_in(conn, schedule.project, key).await? {
                cancelled.push((schedule.project, agent));
            }
        }
    }
    let ticket = create(conn, schedule, rule, at).await?;
    db::schedules::set_ticket(conn, firing, schedule.id, ticket.id, at).await?;
    Ok(Outcome::Fired(Box::new(ticket)))
}

/// The schedule's ticket for fire time `at`, from its template.
async fn create(
    conn: &mut PgConnection,
    schedule: &Schedule,
    rule: &Rule,
    at: DateTime<Utc>,
) -> Result<Ticket, DeskError> {
    let previous = db::schedules::previous_result(conn, schedule.id).await?;
    let previous = previous.map_or_else(|| "null".to_owned(), |v| v.to_string());
    let template = &schedule.ticket;
    let new = NewTicket {
        project: schedule.project,
        task: render_task(&template.task, &rule.local_rfc3339(at), &previous),
        labels: template.labels.clone(),
        priority: template.priority,
        schema: template.schema.clone(),
        parent_id: None,
        metadata: ticket_metadata(&template.metadata, schedule.id, schedule.name.as_deref(), at),
        max_attempts: template.max_attempts,
        reporter: "user".into(),
        idempotency: None,
        trace_context: None,
        deadline_secs: template.deadline_secs,
    };
    super::create_ticket(conn, new).await
}

/// "Run now": one ticket at once, whatever `overlap` says (its `scheduled_for` is now). After it,
/// call `EventHub::wake` and `work_available`.
pub async fn run_now(pool: &PgPool, project: ProjectId, reference: &str) -> Result<Ticket, DeskError> {
    let mut tx = pool.begin().await?;
    let schedule = db::schedules::lock(&mut tx, project, reference)
        .await?
        .ok_or_else(|| not_found(reference))?;
    let rule = schedule.rule().map_err(DeskError::Invalid)?;
    let now = Utc::now();
    let firing = db::schedules::insert_manual(&mut tx, schedule.id, now).await?;
    let ticket = create(&mut tx, &schedule, &rule, now).await?;
    db::schedules::set_ticket(&mut tx, firing, schedule.id, ticket.id, now).await?;
    tx.commit().await?;
    Ok(ticket)
}

/// The schedule with its `next_run_at` recomputed from `now` (for a create, or an edit of when it
/// fires): paused schedules have none.
pub fn reschedule(mut schedule: Schedule, now: DateTime<Utc>) -> Result<Schedule, String> {
    let rule = schedule.rule()?;
    schedule.next_run_at = if schedule.enabled { rule.next_after(now) } else { None };
    Ok(schedule)
}

/// Writes an edited schedule (under its row lock, taken by `db::schedules::lock`).
pub async fn save(conn: &mut PgConnection, schedule: &Schedule) -> Result<Schedule, DeskError> {
    db::schedules::update(conn, schedule).await.map_err(|err| {
        if db::schedules::is_unique_violation(&err) {
            DeskError::Conflict(format!(
                "a schedule named {:?} exists",
                schedule.name.as_deref().unwrap_or_default()
            ))
        } else {
            err.into()
        }
    })
}

/// An id for a new schedule.
pub fn new_id() -> Uuid {
    Uuid::now_v7()
}
