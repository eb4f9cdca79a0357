//! The fire-time rules, at given instants: no clock, no waiting.

use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn rule(cron: &str, tz: &str) -> Rule {
    Rule::new(cron, tz, None, None).unwrap()
}

fn times(ts: &[DateTime<Utc>]) -> Vec<String> {
    ts.iter()
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .collect()
}

#[test]
fn five_and_six_fields_names_ranges_and_steps() {
    let r = rule("0 9 * * mon-fri", "UTC");
    // Friday 2026-11-27 10:00: next is Monday 09:00.
    assert_eq!(
        times(&r.upcoming(utc("2026-11-27T10:00:00Z"), 3)),
        ["2026-11-30T09:00:00Z", "2026-12-01T09:00:00Z", "2026-12-02T09:00:00Z"]
    );
    let r = rule("*/20 * * * * *", "UTC");
    assert_eq!(
        times(&r.upcoming(utc("2026-01-01T00:00:05Z"), 3)),
        ["2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"]
    );
    let r = rule("30 8 1 jan,jul *", "UTC");
    assert_eq!(
        times(&r.upcoming(utc("2026-03-01T00:00:00Z"), 2)),
        ["2026-07-01T08:30:00Z", "2027-01-01T08:30:00Z"]
    );
    let r = rule("0 0-12/6 * * SUN", "UTC");
    assert_eq!(
        times(&r.upcoming(utc("2026-11-28T00:00:00Z"), 3)),
        ["2026-11-29T00:00:00Z", "2026-11-29T06:00:00Z", "2026-11-29T12:00:00Z"]
    );
    // Strictly after: a fire time equal to `after` is not next.
    assert_eq!(
        r.next_after(utc("2026-11-29T06:00:00Z")),
        Some(utc("2026-11-29T12:00:00Z"))
    );
}

#[test]
fn bad_expressions_and_zones_are_refused_by_field() {
    for bad in [
        "",
        "* * * *",
        "0 0 0 * * * 2026",
        "61 * * * *",
        "* * * * funday",
        "every day",
    ] {
        let err = Rule::new(bad, "UTC", None, None).unwrap_err();
        assert!(err.starts_with("cron"), "{bad:?}: {err}");
    }
    for bad in ["Europe/Nowhere", "", "+02:00", "CEST "] {
        let err = Rule::new("* * * * *", bad, None, None).unwrap_err();
        assert!(err.starts_with("timezone"), "{bad:?}: {err}");
    }
    let t = utc("2026-01-01T00:00:00Z");
    let err = Rule::new("* * * * *", "UTC", Some(t), Some(t)).unwrap_err();
    assert!(err.starts_with("end_at"), "{err}");
    assert!(check_name("daily-digest_2").is_ok());
    assert!(check_name("").is_err() && check_name("a b").is_err() && check_name(&"a".repeat(65)).is_err());
}

#[test]
fn europe_spring_forward_fires_at_the_first_instant_after_the_gap() {
    // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC); 02:30 does not exist.
    let r = rule("30 2 * * *", "Europe/Berlin");
    assert_eq!(
        times(&r.upcoming(utc("2026-03-28T12:00:00Z"), 3)),
        ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"]
    );
    assert_eq!(
        r.local_rfc3339(utc("2026-03-29T01:00:00Z")),
        "2026-03-29T03:00:00+02:00"
    );
    // Every quarter hour: the times in the gap all fire at its end, once; nothing else moves.
    let r = rule("*/15 * * * *", "Europe/Berlin");
    assert_eq!(
        times(&r.upcoming(utc("2026-03-29T00:40:00Z"), 4)),
        [
            "2026-03-29T00:45:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:15:00Z",
            "2026-03-29T01:30:00Z"
        ]
    );
}

#[test]
fn europe_fall_back_fires_a_repeated_time_once_the_first_time() {
    // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC); 02:30 happens twice.
    let r = rule("30 2 * * *", "Europe/Berlin");
    assert_eq!(
        times(&r.upcoming(utc("2026-10-24T12:00:00Z"), 2)),
        ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    );
    // Asked from inside the repeated hour (the second 02:10), the first 02:30 is behind: not again.
    assert_eq!(
        r.next_after(utc("2026-10-25T01:10:00Z")),
        Some(utc("2026-10-26T01:30:00Z"))
    );
    let r = rule("0 * * * *", "Europe/Berlin");
    assert_eq!(
        times(&r.upcoming(utc("2026-10-24T23:30:00Z"), 3)),
        ["2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"]
    );
}

#[test]
fn america_spring_forward_and_fall_back() {
    // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC).
    let r = rule("30 2 * * *", "America/New_York");
    assert_eq!(
        times(&r.upcoming(utc("2026-03-07T12:00:00Z"), 3)),
        ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"]
    );
    // 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00 UTC); 01:30 happens twice, fires once.
    let r = rule("30 1 * * *", "America/New_York");
    assert_eq!(
        times(&r.upcoming(utc("2026-10-31T12:00:00Z"), 3)),
        ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z", "2026-11-03T06:30:00Z"]
    );
    assert_eq!(
        r.local_rfc3339(utc("2026-11-01T05:30:00Z")),
        "2026-11-01T01:30:00-04:00"
    );
    // An every-minute schedule over the repeated hour: its local times each fire once, so the
    // second pass through 01:00–01:59 fires nothing.
    let r = rule("* * * * *", "America/New_York");
    assert_eq!(
        r.next_after(utc("2026-11-01T05:59:00Z")),
        Some(utc("2026-11-01T07:00:00Z"))
    );
}

#[test]
fn end_of_month_and_leap_days() {
    let r = rule("0 12 L * *", "UTC");
    assert_eq!(
        times(&r.upcoming(utc("2028-01-15T00:00:00Z"), 3)),
        ["2028-01-31T12:00:00Z", "2028-02-29T12:00:00Z", "2028-03-31T12:00:00Z"]
    );
    let r = rule("0 0 31 * *", "UTC");
    assert_eq!(
        times(&r.upcoming(utc("2026-04-01T00:00:00Z"), 2)),
        ["2026-05-31T00:00:00Z", "2026-07-31T00:00:00Z"]
    );
    let r = rule("0 6 29 2 *", "Europe/Berlin");
    assert_eq!(
        times(&r.upcoming(utc("2026-01-01T00:00:00Z"), 2)),
        ["2028-02-29T05:00:00Z", "2032-02-29T05:00:00Z"]
    );
    // A date that never comes: no fire time, quickly.
    let r = rule("0 0 30 2 *", "UTC");
    let started = std::time::Instant::now();
    assert_eq!(r.next_after(utc("2026-01-01T00:00:00Z")), None);
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

#[test]
fn start_at_and_end_at_bound_the_fire_times() {
    let start = utc("2026-06-01T09:00:00Z");
    let end = utc("2026-06-03T09:00:00Z");
    let r = Rule::new("0 9 * * *", "UTC", Some(start), Some(end)).unwrap();
    // Fire times start at start_at (a fire time on it counts) and stop at end_at (inclusive).
    assert_eq!(
        times(&r.upcoming(utc("2026-01-01T00:00:00Z"), 5)),
        ["2026-06-01T09:00:00Z", "2026-06-02T09:00:00Z", "2026-06-03T09:00:00Z"]
    );
    assert_eq!(r.next_after(end), None);
    assert_eq!(r.latest_at_or_before(utc("2026-07-01T00:00:00Z")), Some(end));
    assert_eq!(r.latest_at_or_before(utc("2026-05-31T00:00:00Z")), None);
    let r = Rule::new("0 9 * * *", "UTC", Some(utc("2026-06-01T09:00:01Z")), None).unwrap();
    assert_eq!(
        r.next_after(utc("2026-01-01T00:00:00Z")),
        Some(utc("2026-06-02T09:00:00Z"))
    );
}

#[test]
fn a_due_time_on_time_fires_and_a_missed_one_follows_catch_up() {
    let r = rule("0 * * * *", "UTC");
    let due = utc("2026-01-01T10:00:00Z");
    // On time (within 2 s): fires.
    let p = plan(&r, due, utc("2026-01-01T10:00:01.500Z"), CatchUp::Skip, 3600);
    assert_eq!(p.fire, Some(due));
    assert!(!p.missed);
    assert_eq!(p.next_run_at, Some(utc("2026-01-01T11:00:00Z")));
    // Down from 10:00 to 13:20: skip fires none; the next is 14:00.
    let now = utc("2026-01-01T13:20:00Z");
    let p = plan(&r, due, now, CatchUp::Skip, 3600);
    assert_eq!((p.fire, p.missed), (None, true));
    assert_eq!(p.next_run_at, Some(utc("2026-01-01T14:00:00Z")));
    // latest: one ticket, for 13:00, inside the window.
    let p = plan(&r, due, now, CatchUp::Latest, 3600);
    assert_eq!(p.fire, Some(utc("2026-01-01T13:00:00Z")));
    assert_eq!(p.next_run_at, Some(utc("2026-01-01T14:00:00Z")));
    // ... but not when the newest missed time is outside it.
    let p = plan(&r, due, now, CatchUp::Latest, 600);
    assert_eq!(p.fire, None);
    // An every-second schedule after a day down: still at most one.
    let r = rule("* * * * * *", "UTC");
    let p = plan(&r, due, utc("2026-01-02T10:00:00Z"), CatchUp::Latest, 3600);
    assert_eq!(p.fire, Some(utc("2026-01-02T09:59:58Z")));
    assert_eq!(p.next_run_at, Some(utc("2026-01-02T09:59:59Z")));
}

#[test]
fn the_template_placeholders_and_metadata() {
    let task = serde_json::json!({"text": "digest for {scheduled_for}; before: {previous_result}", "n": [1, "{scheduled_for}"]});
    let out = render_task(&task, "2026-01-01T10:00:00+01:00", "null");
    assert_eq!(
        out,
        serde_json::json!({"text": "digest for 2026-01-01T10:00:00+01:00; before: null", "n": [1, "2026-01-01T10:00:00+01:00"]})
    );
    let id = Uuid::nil();
    let meta = ticket_metadata(
        &serde_json::json!({"team": "ops"}),
        id,
        Some("d"),
        utc("2026-01-01T09:00:00Z"),
    );
    assert_eq!(
        meta,
        serde_json::json!({"team": "ops", "schedule": {"id": id, "name": "d", "scheduled_for": "2026-01-01T09:00:00Z"}})
    );
}
