//! `/v1/schedules`: recurring tickets. The firings themselves run in `crate::scheduler`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::access::Caller;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::pagination::{next_cursor, Cursor, IdPageQuery, NumberPageQuery, Page};
use super::tickets::{TicketList, DEFAULT_MAX_ATTEMPTS, MAX_DEADLINE_SECS};
use super::AppState;
use crate::db;
use crate::domain::schedule::{check_name, CatchUp, Overlap, Schedule, TicketTemplate, DEFAULT_CATCH_UP_WINDOW_SECS};
use crate::domain::Ticket;
use crate::transitions::{self, schedules as firing, DeskError};

/// A new schedule.
#[derive(Deserialize, ToSchema)]
pub struct CreateSchedule {
    /// Unique, 1 to 64 of `[a-zA-Z0-9_-]`; it may stand for the id in paths.
    #[schema(example = "daily-digest", pattern = "^[a-zA-Z0-9_-]{1,64}$")]
    pub name: Option<String>,
    /// 5 fields (`min hour day month weekday`), or 6 with seconds first; names of days and months,
    /// ranges, lists and steps.
    #[schema(example = "0 9 * * mon-fri")]
    pub cron: String,
    /// An IANA time zone name; default `UTC`.
    #[schema(example = "Europe/Berlin")]
    pub timezone: Option<String>,
    pub ticket: TicketTemplateBody,
    /// Default true; false pauses.
    pub enabled: Option<bool>,
    /// Fire times start here (inclusive).
    #[serde(default, deserialize_with = "start_at")]
    pub start_at: Option<DateTime<Utc>>,
    /// Fire times stop here (inclusive); must be after `start_at`.
    #[serde(default, deserialize_with = "end_at")]
    pub end_at: Option<DateTime<Utc>>,
    /// `skip` (default), `allow` or `cancel_previous`.
    #[schema(value_type = Option<Overlap>)]
    pub overlap: Option<String>,
    /// `skip` (default) or `latest`.
    #[schema(value_type = Option<CatchUp>)]
    pub catch_up: Option<String>,
    /// Default 3600; at least 0.
    #[schema(minimum = 0)]
    pub catch_up_window_secs: Option<i64>,
}

/// The ticket each firing creates (as `POST /v1/tickets`): `{scheduled_for}` (RFC 3339 in the
/// schedule's zone) and `{previous_result}` (the last done ticket's result as JSON text, or
/// `null`) in its task's strings are replaced; its metadata gets `schedule: {id, name, scheduled_for}`.
#[derive(Deserialize, Serialize, ToSchema)]
pub struct TicketTemplateBody {
    #[schema(schema_with = super::formats::task)]
    pub task: Value,
    #[serde(default)]
    #[schema(schema_with = super::formats::labels)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub schema: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// 1 to 100; default 3.
    #[schema(minimum = 1, maximum = 100)]
    pub max_attempts: Option<i32>,
    #[schema(minimum = 1, maximum = 315360000)]
    pub deadline_secs: Option<i32>,
}

/// Changes to a schedule: what the body names. `ticket` keys replace the template's keys of the
/// same name. A change of `cron`, `timezone`, `start_at`, `end_at` or `enabled` recomputes
/// `next_run_at` from now (times missed while paused do not fire).
#[derive(Deserialize, ToSchema)]
pub struct PatchSchedule {
    /// A string sets it, null clears it.
    #[serde(default, deserialize_with = "super::extract::present")]
    #[schema(value_type = Option<String>)]
    pub name: Option<Option<String>>,
    pub cron: Option<String>,
    pub timezone: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub ticket: Option<Value>,
    pub enabled: Option<bool>,
    #[serde(default, deserialize_with = "present_start_at")]
    #[schema(value_type = Option<DateTime<Utc>>)]
    pub start_at: Option<Option<DateTime<Utc>>>,
    #[serde(default, deserialize_with = "present_end_at")]
    #[schema(value_type = Option<DateTime<Utc>>)]
    pub end_at: Option<Option<DateTime<Utc>>>,
    #[schema(value_type = Option<Overlap>)]
    pub overlap: Option<String>,
    #[schema(value_type = Option<CatchUp>)]
    pub catch_up: Option<String>,
    #[schema(minimum = 0)]
    pub catch_up_window_secs: Option<i64>,
}

/// A date-time field, RFC 3339, or null; one of another form is refused naming the field and the
/// format (serde's own message says neither).
fn date_time<'de, D: Deserializer<'de>>(d: D, field: &str) -> Result<Option<DateTime<Utc>>, D::Error> {
    let refused = |got: &str| {
        serde::de::Error::custom(format!(
            "`{field}` must be an RFC 3339 date-time such as 2030-01-01T09:00:00Z, or null (got {got})"
        ))
    };
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(text) => text
            .parse::<DateTime<chrono::FixedOffset>>()
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|_| refused(&format!("{text:?}"))),
        other => Err(refused(&other.to_string())),
    }
}

fn start_at<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    date_time(d, "start_at")
}

fn end_at<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    date_time(d, "end_at")
}

fn present_start_at<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<DateTime<Utc>>>, D::Error> {
    date_time(d, "start_at").map(Some)
}

fn present_end_at<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<DateTime<Utc>>>, D::Error> {
    date_time(d, "end_at").map(Some)
}

#[derive(Serialize, ToSchema)]
pub struct ScheduleList {
    pub items: Vec<Schedule>,
    pub next_cursor: Option<String>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::Validation(message.into())
}

fn not_found(reference: &str) -> ApiError {
    ApiError::NotFound(format!("no schedule {reference:?}"))
}

/// The template, checked as `POST /v1/tickets` checks a ticket; errors name the field.
fn check_template(body: TicketTemplateBody) -> ApiResult<TicketTemplate> {
    let field = |e: String| invalid(format!("ticket.{e}"));
    transitions::check_task(&body.task).map_err(field)?;
    let labels = transitions::normalize_labels(body.labels).map_err(|e| invalid(format!("ticket.labels: {e}")))?;
    if let Some(schema) = &body.schema {
        transitions::check_schema(schema).map_err(field)?;
    }
    let metadata = match body.metadata {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(m) if m.is_object() => m,
        Some(_) => return Err(invalid("ticket.metadata must be a JSON object")),
    };
    let max_attempts = body.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if !(1..=100).contains(&max_attempts) {
        return Err(invalid("ticket.max_attempts must be from 1 to 100"));
    }
    if body
        .deadline_secs
        .is_some_and(|d| !(1..=MAX_DEADLINE_SECS).contains(&d))
    {
        return Err(invalid(format!(
            "ticket.deadline_secs must be from 1 to {MAX_DEADLINE_SECS}"
        )));
    }
    Ok(TicketTemplate {
        task: body.task,
        labels,
        priority: body.priority,
        schema: body.schema,
        metadata,
        max_attempts,
        deadline_secs: body.deadline_secs,
    })
}

fn parse_overlap(s: &str) -> ApiResult<Overlap> {
    Overlap::parse(s).ok_or_else(|| invalid(format!("overlap must be skip, allow or cancel_previous, not {s:?}")))
}

fn parse_catch_up(s: &str) -> ApiResult<CatchUp> {
    CatchUp::parse(s).ok_or_else(|| invalid(format!("catch_up must be skip or latest, not {s:?}")))
}

fn check_window(secs: i64) -> ApiResult<i64> {
    if secs < 0 {
        return Err(invalid("catch_up_window_secs must not be negative"));
    }
    Ok(secs)
}

fn conflict_or(err: sqlx::Error, name: Option<&str>) -> ApiError {
    if db::schedules::is_unique_violation(&err) {
        ApiError::Conflict(format!("a schedule named {:?} exists", name.unwrap_or_default()))
    } else {
        err.into()
    }
}

fn desk_error(err: DeskError) -> ApiError {
    match err {
        DeskError::Missing(m) => ApiError::NotFound(m),
        other => other.into(),
    }
}

/// Create a schedule
///
/// Fires one ticket per fire time, exactly once however many processes run, within 2 s of it.
#[utoipa::path(post, path = "/schedules", tag = "schedules", request_body = CreateSchedule,
    responses((status = 201, body = Schedule), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn create_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateSchedule>,
) -> ApiResult<(StatusCode, Json<Schedule>)> {
    if let Some(name) = &req.name {
        check_name(name).map_err(invalid)?;
    }
    let now = Utc::now();
    let schedule = Schedule {
        id: firing::new_id(),
        project: caller.project_id(),
        name: req.name,
        cron: req.cron.trim().to_owned(),
        timezone: req.timezone.unwrap_or_else(|| "UTC".into()),
        ticket: check_template(req.ticket)?,
        enabled: req.enabled.unwrap_or(true),
        start_at: req.start_at,
        end_at: req.end_at,
        overlap: req
            .overlap
            .as_deref()
            .map(parse_overlap)
            .transpose()?
            .unwrap_or_default(),
        catch_up: req
            .catch_up
            .as_deref()
            .map(parse_catch_up)
            .transpose()?
            .unwrap_or_default(),
        catch_up_window_secs: check_window(req.catch_up_window_secs.unwrap_or(DEFAULT_CATCH_UP_WINDOW_SECS))?,
        next_run_at: None,
        upcoming: vec![],
        last_run_at: None,
        last_ticket: None,
        created_at: now,
        updated_at: now,
    };
    let schedule = firing::reschedule(schedule, now).map_err(invalid)?;
    let created = db::schedules::insert(&state.pool, &schedule)
        .await
        .map_err(|e| conflict_or(e, schedule.name.as_deref()))?;
    Ok((StatusCode::CREATED, Json(created.with_upcoming())))
}

/// List schedules, oldest first
#[utoipa::path(get, path = "/schedules", tag = "schedules", params(IdPageQuery),
    responses((status = 200, body = ScheduleList), (status = 400, body = ErrorBody)))]
pub async fn list_schedules(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<IdPageQuery>,
) -> ApiResult<Json<ScheduleList>> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let after = page.after_id()?;
    let (items, more) = db::schedules::list(&state.pool, caller.project_id(), after, page.limit).await?;
    let next_cursor = next_cursor(more, &items, |s| Cursor::Name(s.id.to_string()));
    let items = items.into_iter().map(Schedule::with_upcoming).collect();
    Ok(Json(ScheduleList { items, next_cursor }))
}

/// Get a schedule (by id or name)
#[utoipa::path(get, path = "/schedules/{schedule}", tag = "schedules", params(("schedule" = String, Path)),
    responses((status = 200, body = Schedule), (status = 404, body = ErrorBody)))]
pub async fn get_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
) -> ApiResult<Json<Schedule>> {
    db::schedules::find(&state.pool, caller.project_id(), &reference)
        .await?
        .map(|s| Json(s.with_upcoming()))
        .ok_or_else(|| not_found(&reference))
}

/// Change a schedule (by id or name)
///
/// Sets what the body names; `enabled: false` pauses it, `true` resumes it from now.
#[utoipa::path(patch, path = "/schedules/{schedule}", tag = "schedules", request_body = PatchSchedule,
    params(("schedule" = String, Path)),
    responses((status = 200, body = Schedule), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn patch_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
    ApiJson(req): ApiJson<PatchSchedule>,
) -> ApiResult<Json<Schedule>> {
    // Under the row lock: a firing of this schedule waits for the edit, or the edit for it.
    let mut tx = state.pool.begin().await?;
    let mut s = db::schedules::lock(&mut tx, caller.project_id(), &reference)
        .await?
        .ok_or_else(|| not_found(&reference))?;
    let timing_before = (s.cron.clone(), s.timezone.clone(), s.start_at, s.end_at, s.enabled);
    if let Some(name) = req.name {
        if let Some(name) = &name {
            check_name(name).map_err(invalid)?;
        }
        s.name = name;
    }
    if let Some(cron) = req.cron {
        s.cron = cron.trim().to_owned();
    }
    if let Some(tz) = req.timezone {
        s.timezone = tz;
    }
    if let Some(patch) = req.ticket {
        let Value::Object(patch) = patch else {
            return Err(invalid("ticket must be a JSON object"));
        };
        let mut template = serde_json::to_value(&s.ticket).unwrap_or_default();
        if let Value::Object(current) = &mut template {
            current.extend(patch);
        }
        let body: TicketTemplateBody = serde_json::from_value(template).map_err(|e| invalid(format!("ticket: {e}")))?;
        s.ticket = check_template(body)?;
    }
    if let Some(enabled) = req.enabled {
        s.enabled = enabled;
    }
    if let Some(start_at) = req.start_at {
        s.start_at = start_at;
    }
    if let Some(end_at) = req.end_at {
        s.end_at = end_at;
    }
    if let Some(o) = req.overlap {
        s.overlap = parse_overlap(&o)?;
    }
    if let Some(c) = req.catch_up {
        s.catch_up = parse_catch_up(&c)?;
    }
    if let Some(w) = req.catch_up_window_secs {
        s.catch_up_window_secs = check_window(w)?;
    }
    let timing_after = (s.cron.clone(), s.timezone.clone(), s.start_at, s.end_at, s.enabled);
    s = if timing_before == timing_after {
        s.rule().map_err(invalid)?;
        s
    } else {
        firing::reschedule(s, Utc::now()).map_err(invalid)?
    };
    let saved = firing::save(&mut tx, &s).await.map_err(desk_error)?;
    tx.commit().await?;
    Ok(Json(saved.with_upcoming()))
}

/// Delete a schedule (by id or name); the tickets it created stay
#[utoipa::path(delete, path = "/schedules/{schedule}", tag = "schedules", params(("schedule" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody)))]
pub async fn delete_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
) -> ApiResult<StatusCode> {
    if db::schedules::delete(&state.pool, caller.project_id(), &reference).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&reference))
    }
}

/// Run a schedule now
///
/// Creates one ticket now, whatever `overlap` says (its `scheduled_for` is now); the schedule's
/// fire times do not move.
#[utoipa::path(post, path = "/schedules/{schedule}/run", tag = "schedules", params(("schedule" = String, Path)),
    responses((status = 201, body = Ticket), (status = 404, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn run_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
) -> ApiResult<(StatusCode, Json<Ticket>)> {
    // A ticket beyond the day's quota is refused, as any create is.
    super::projects::admit_ticket(&state.pool, &caller.project).await?;
    let ticket = firing::run_now(&state.pool, caller.project_id(), &reference)
        .await
        .map_err(desk_error)?;
    crate::telemetry::metric::schedule_firing("manual");
    state.hub.wake();
    state.hub.work_available();
    Ok((StatusCode::CREATED, Json(ticket)))
}

/// The tickets a schedule created, newest first
#[utoipa::path(get, path = "/schedules/{schedule}/tickets", tag = "schedules",
    params(("schedule" = String, Path), NumberPageQuery),
    responses((status = 200, body = TicketList), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody)))]
pub async fn list_schedule_tickets(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(reference): ApiPath<String>,
    ApiQuery(q): ApiQuery<NumberPageQuery>,
) -> ApiResult<Json<TicketList>> {
    let page = Page::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let before = match page.cursor {
        None => None,
        Some(c) => Some(c.as_number().ok_or_else(Page::bad_cursor)?),
    };
    let schedule = db::schedules::find(&state.pool, caller.project_id(), &reference)
        .await?
        .ok_or_else(|| not_found(&reference))?;
    let (items, more) = db::schedules::tickets(&state.pool, schedule.id, before, page.limit).await?;
    let next_cursor = next_cursor(more, &items, |(n, _)| Cursor::number(*n));
    Ok(Json(TicketList {
        items: items.into_iter().map(|(_, t)| t).collect(),
        next_cursor,
    }))
}
