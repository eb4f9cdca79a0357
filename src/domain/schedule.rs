//! Schedules: recurring tickets from a cron expression in an IANA time zone, and the pure rules of
//! their fire times. Every rule here is a function of the schedule and a given `now`, so it is
//! tested in milliseconds; the scheduler loop only asks these functions.
//!
//! Cron expressions are parsed by `croner` (5 fields, or 6 with seconds first; names of days and
//! months, ranges, steps, `L`, `#`, `W`); zones come from `chrono-tz` (the IANA database compiled
//! in). croner is asked only for wall-clock matches (in UTC, which has no daylight saving); this
//! module maps each wall-clock time to an instant with the contract's rules: a local time that
//! does not exist (clocks go forward) fires at the first instant after the gap; one that occurs
//! twice (clocks go back) fires once, the first time.

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// The fire times `upcoming` shows.
pub const UPCOMING: usize = 5;
/// A fire time more than this past when a scheduler reaches it was missed (see `catch_up`).
pub const MISSED_AFTER: Duration = Duration::seconds(2);
pub const DEFAULT_CATCH_UP_WINDOW_SECS: i64 = 3600;
pub const MAX_NAME_LEN: usize = 64;
/// Wall-clock matches looked at for one answer before giving up (an expression that matches
/// nothing for years, like `0 0 30 2 *`, ends here instead of scanning to the year 5000).
const MAX_STEPS: usize = 20_000;
/// Fire times one backward search walks over at most.
const MAX_WALK: usize = 200_000;
/// How far back a search for the newest fire time looks (about 11 years).
const MAX_LOOK_BACK: Duration = Duration::days(4000);

/// What a schedule does when a fire time comes while its previous ticket is unfinished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Fire nothing; `schedule.skipped` on the unfinished ticket.
    #[default]
    Skip,
    /// Fire anyway.
    Allow,
    /// Cancel the unfinished ticket, then fire.
    CancelPrevious,
}

/// What a scheduler does, when it starts, about fire times missed while no process ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Fire none of them.
    #[default]
    Skip,
    /// Fire one ticket for the newest, when it lies within `catch_up_window_secs` of now.
    Latest,
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Allow => "allow",
            Overlap::CancelPrevious => "cancel_previous",
        }
    }

    pub fn parse(s: &str) -> Option<Overlap> {
        [Overlap::Skip, Overlap::Allow, Overlap::CancelPrevious]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

impl CatchUp {
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Skip => "skip",
            CatchUp::Latest => "latest",
        }
    }

    pub fn parse(s: &str) -> Option<CatchUp> {
        [CatchUp::Skip, CatchUp::Latest].into_iter().find(|c| c.as_str() == s)
    }
}

/// The ticket each firing creates (the body of `POST /v1/tickets`, without `parent`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TicketTemplate {
    /// Any JSON but null or a blank string; `{scheduled_for}` and `{previous_result}` in its
    /// strings are replaced at each firing.
    pub task: Value,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Value>,
    /// A JSON object; the ticket's `metadata` is this plus `schedule`.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    pub metadata: Value,
    #[serde(default = "default_max_attempts")]
    pub max_attempts: i32,
    #[serde(default)]
    pub deadline_secs: Option<i32>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

fn default_max_attempts() -> i32 {
    3
}

/// A schedule as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Schedule {
    pub id: Uuid,
    /// The project whose tickets it creates (not shown).
    #[serde(skip, default = "crate::domain::project::default_project")]
    pub project: crate::domain::ProjectId,
    /// Unique, 1 to 64 of `[a-zA-Z0-9_-]`; null when none was given.
    pub name: Option<String>,
    #[schema(example = "0 9 * * mon-fri")]
    pub cron: String,
    #[schema(example = "Europe/Berlin")]
    pub timezone: String,
    pub ticket: TicketTemplate,
    pub enabled: bool,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    pub catch_up_window_secs: i64,
    /// The next fire time (UTC); null when it will not fire again (or is paused).
    pub next_run_at: Option<DateTime<Utc>>,
    /// The next five fire times (UTC); empty while paused.
    pub upcoming: Vec<DateTime<Utc>>,
    /// The fire time of its last ticket.
    pub last_run_at: Option<DateTime<Utc>>,
    /// The key of its last ticket.
    pub last_ticket: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Schedule {
    /// When it fires.
    pub fn rule(&self) -> Result<Rule, String> {
        Rule::new(&self.cron, &self.timezone, self.start_at, self.end_at)
    }

    /// With `upcoming` filled: `next_run_at` and the four fire times after it.
    pub fn with_upcoming(mut self) -> Schedule {
        self.upcoming = match (self.next_run_at, self.rule()) {
            (Some(next), Ok(rule)) => std::iter::once(next).chain(rule.upcoming(next, UPCOMING - 1)).collect(),
            _ => vec![],
        };
        self
    }
}

/// Names: 1 to 64 of `[a-zA-Z0-9_-]`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "name {name:?} must be 1 to {MAX_NAME_LEN} characters of [a-zA-Z0-9_-]"
        ))
    }
}

/// When a schedule fires: its expression in its zone, between its bounds.
#[derive(Clone, Debug)]
pub struct Rule {
    cron: croner::Cron,
    tz: Tz,
    start_at: Option<DateTime<Utc>>,
    end_at: Option<DateTime<Utc>>,
}

/// A cron expression: 5 fields, or 6 with seconds first (no year field).
pub fn parse_cron(expr: &str) -> Result<croner::Cron, String> {
    let fields = expr.split_whitespace().count();
    if !(expr.trim_start().starts_with('@') || fields == 5 || fields == 6) {
        return Err(format!(
            "cron {expr:?} must have 5 fields, or 6 with seconds first (it has {fields})"
        ));
    }
    croner::Cron::new(expr)
        .with_seconds_optional()
        .parse()
        .map_err(|err| format!("cron {expr:?} is not a cron expression: {err}"))
}

/// An IANA time zone name (`Europe/Berlin`, `UTC`).
pub fn parse_timezone(name: &str) -> Result<Tz, String> {
    name.parse::<Tz>()
        .map_err(|_| format!("timezone {name:?} is not an IANA time zone name"))
}

impl Rule {
    /// The rule of these settings; the error names the field that is wrong.
    pub fn new(
        cron: &str,
        timezone: &str,
        start_at: Option<DateTime<Utc>>,
        end_at: Option<DateTime<Utc>>,
    ) -> Result<Rule, String> {
        let cron = parse_cron(cron)?;
        let tz = parse_timezone(timezone)?;
        if let (Some(start), Some(end)) = (start_at, end_at) {
            if end <= start {
                return Err("end_at must be after start_at".into());
            }
        }
        Ok(Rule {
            cron,
            tz,
            start_at,
            end_at,
        })
    }

    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// The instant a wall-clock time of the zone fires at: itself; the first of two (clocks go
    /// back); the first instant after the gap when it does not exist (clocks go forward).
    /// Monotonic: a later wall-clock time never fires earlier.
    fn instant(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self.tz.from_local_datetime(&wall) {
            LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
            LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
            LocalResult::None => self.gap_end(wall),
        }
    }

    /// The first instant whose wall-clock time is after `wall` (inside a gap: the gap's end),
    /// found by bisection over whole seconds around it.
    fn gap_end(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        let wall_utc = wall.and_utc();
        let mut lo = (wall_utc - Duration::hours(30)).timestamp();
        let mut hi = (wall_utc + Duration::hours(30)).timestamp();
        let local = |secs: i64| DateTime::from_timestamp(secs, 0).map(|t| t.with_timezone(&self.tz).naive_local());
        // Invariant: local(lo) < wall <= local(hi).
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if local(mid)? < wall {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        DateTime::from_timestamp(hi, 0)
    }

    fn wall(&self, t: DateTime<Utc>) -> NaiveDateTime {
        t.with_timezone(&self.tz).naive_local()
    }

    fn within_end(&self, t: DateTime<Utc>) -> bool {
        self.end_at.is_none_or(|end| t <= end)
    }

    /// The first fire time strictly after `after` (and at or after `start_at`, at or before
    /// `end_at`); None when it will not fire again.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let after = match self.start_at {
            // A fire time at `start_at` itself counts: start there.
            Some(start) if start > after => start - Duration::nanoseconds(1),
            _ => after,
        };
        // `instant` is monotonic and maps `wall(after)` to `after` or earlier, so only wall-clock
        // times after `wall(after)` can fire after `after`; inside a repeated hour the first ones
        // map to its first pass (before `after`) and are passed over.
        let from = whole_seconds(self.wall(after)).and_utc();
        for wall in self.cron.iter_after(from).take(MAX_STEPS) {
            let t = self.instant(wall.naive_utc())?;
            if t > after {
                return self.within_end(t).then_some(t);
            }
        }
        None
    }

    /// The newest fire time at or before `at` (and at or after `start_at`); None when there is
    /// none. Found by walking forward (the only direction the cron parser walks) from ever
    /// earlier points, each four times further back: a few short walks whatever the expression.
    pub fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let at = match self.end_at {
            Some(end) if end < at => end,
            _ => at,
        };
        let mut span = Duration::minutes(1);
        loop {
            let from = at - span;
            let mut latest = None;
            let mut cursor = from;
            for _ in 0..MAX_WALK {
                match self.next_after(cursor) {
                    Some(t) if t <= at => {
                        latest = Some(t);
                        cursor = t;
                    }
                    _ => break,
                }
            }
            let before_start = self.start_at.is_some_and(|start| from < start);
            if latest.is_some() || before_start || span > MAX_LOOK_BACK {
                return latest;
            }
            span = span * 4;
        }
    }

    /// The first `n` fire times after `now`.
    pub fn upcoming(&self, now: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(n);
        let mut at = now;
        while out.len() < n {
            match self.next_after(at) {
                Some(t) => {
                    out.push(t);
                    at = t;
                }
                None => break,
            }
        }
        out
    }

    /// `scheduled_for` as the task shows it: RFC 3339 in the schedule's zone, in whole seconds
    /// (as fire times are; a "run now" happens at any fraction of one).
    pub fn local_rfc3339(&self, t: DateTime<Utc>) -> String {
        t.with_timezone(&self.tz)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }
}

fn whole_seconds(t: NaiveDateTime) -> NaiveDateTime {
    t.with_nanosecond(0).unwrap_or(t)
}

/// What a scheduler does with a schedule whose `next_run_at` (`due`) has come.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The fire time to make a ticket for, if any.
    pub fire: Option<DateTime<Utc>>,
    /// Missed fire times passed over without a ticket.
    pub missed: bool,
    /// The schedule's next `next_run_at`.
    pub next_run_at: Option<DateTime<Utc>>,
}

/// The decision for a due schedule at `now`: an on-time fire time fires; a missed one (more than
/// `MISSED_AFTER` past) is handled with `catch_up` for the newest missed time, never more than one.
pub fn plan(rule: &Rule, due: DateTime<Utc>, now: DateTime<Utc>, catch_up: CatchUp, window_secs: i64) -> Plan {
    if now - due <= MISSED_AFTER {
        return Plan {
            fire: Some(due),
            missed: false,
            next_run_at: rule.next_after(due),
        };
    }
    // The newest missed time (`due` itself is one, so there is one at or after it).
    let newest = rule
        .latest_at_or_before(now - MISSED_AFTER)
        .filter(|t| *t >= due)
        .unwrap_or(due);
    let in_window = now - newest <= Duration::seconds(window_secs);
    let fire = (catch_up == CatchUp::Latest && in_window).then_some(newest);
    Plan {
        fire,
        missed: true,
        next_run_at: rule.next_after(newest),
    }
}

/// Replaces `{scheduled_for}` and `{previous_result}` in every string of the task.
pub fn render_task(task: &Value, scheduled_for: &str, previous_result: &str) -> Value {
    match task {
        Value::String(s) => Value::String(
            s.replace("{scheduled_for}", scheduled_for)
                .replace("{previous_result}", previous_result),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| render_task(v, scheduled_for, previous_result))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), render_task(v, scheduled_for, previous_result)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The ticket's metadata: the template's keys plus `schedule: {id, name, scheduled_for}`.
pub fn ticket_metadata(template: &Value, id: Uuid, name: Option<&str>, scheduled_for: DateTime<Utc>) -> Value {
    let mut map = template.as_object().cloned().unwrap_or_default();
    map.insert(
        "schedule".into(),
        serde_json::json!({
            "id": id,
            "name": name,
            "scheduled_for": scheduled_for.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        }),
    );
    Value::Object(map)
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
