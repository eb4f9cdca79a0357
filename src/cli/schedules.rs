//! `agentdesk schedule create|list|show|pause|resume|run|delete`: recurring tickets.

use serde_json::{json, Value};

use super::client::{encode, CliError, Client};
use super::tickets::table;
use super::watch::short;
use super::{exit, ScheduleCommand};

pub async fn run(client: &Client, command: ScheduleCommand) -> Result<u8, CliError> {
    match command {
        ScheduleCommand::Create {
            cron,
            task,
            name,
            timezone,
            labels,
            priority,
            overlap,
            catch_up,
            catch_up_window_secs,
            start_at,
            end_at,
            paused,
        } => {
            let mut body = json!({
                "cron": cron, "ticket": {"task": task, "labels": labels}, "enabled": !paused,
            });
            let mut set = |key: &str, value: Option<Value>| {
                if let Some(v) = value {
                    body[key] = v;
                }
            };
            set("name", name.map(Value::from));
            set("timezone", timezone.map(Value::from));
            set("overlap", overlap.map(Value::from));
            set("catch_up", catch_up.map(Value::from));
            set("catch_up_window_secs", catch_up_window_secs.map(Value::from));
            set("start_at", start_at.map(Value::from));
            set("end_at", end_at.map(Value::from));
            if let Some(p) = priority {
                body["ticket"]["priority"] = json!(p);
            }
            let s = client.post("/v1/schedules", &body).await?;
            println!("{} next run {}", reference(&s), short(&s["next_run_at"], 40));
            Ok(exit::OK)
        }
        ScheduleCommand::List { limit } => {
            if !(1..=200).contains(&limit) {
                return Err(CliError::Usage("--limit must be between 1 and 200".into()));
            }
            let page = client.get(&format!("/v1/schedules?limit={limit}")).await?;
            let rows: Vec<[String; 6]> = page["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| {
                    [
                        reference(s),
                        short(&s["cron"], 30),
                        short(&s["timezone"], 30),
                        if s["enabled"] == true {
                            "enabled".into()
                        } else {
                            "paused".into()
                        },
                        short(&s["next_run_at"], 30),
                        short(&s["last_ticket"], 20),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(
                    ["SCHEDULE", "CRON", "TIMEZONE", "STATE", "NEXT RUN", "LAST TICKET"],
                    &rows
                )
            );
            Ok(exit::OK)
        }
        ScheduleCommand::Show { schedule, json } => {
            let s = client.get(&format!("/v1/schedules/{}", encode(&schedule))).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
            } else {
                print!("{}", render(&s));
            }
            Ok(exit::OK)
        }
        ScheduleCommand::Pause { schedule } => set_enabled(client, &schedule, false).await,
        ScheduleCommand::Resume { schedule } => set_enabled(client, &schedule, true).await,
        ScheduleCommand::Run { schedule } => {
            let ticket = client
                .post(&format!("/v1/schedules/{}/run", encode(&schedule)), &json!({}))
                .await?;
            println!("{}", short(&ticket["key"], 40));
            Ok(exit::OK)
        }
        ScheduleCommand::Delete { schedule } => {
            client
                .call(
                    reqwest::Method::DELETE,
                    &format!("/v1/schedules/{}", encode(&schedule)),
                    None,
                )
                .await?;
            println!("deleted {schedule}");
            Ok(exit::OK)
        }
    }
}

/// Its name, or its id when it has none.
fn reference(s: &Value) -> String {
    match s["name"].as_str() {
        Some(name) => name.to_owned(),
        None => short(&s["id"], 40),
    }
}

async fn set_enabled(client: &Client, schedule: &str, enabled: bool) -> Result<u8, CliError> {
    let s = client
        .call(
            reqwest::Method::PATCH,
            &format!("/v1/schedules/{}", encode(schedule)),
            Some(&json!({ "enabled": enabled })),
        )
        .await?;
    let state = if enabled { "resumed" } else { "paused" };
    println!("{} {state}; next run {}", reference(&s), short(&s["next_run_at"], 40));
    Ok(exit::OK)
}

fn render(s: &Value) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: String| out.push_str(&format!("{name:<10} {value}\n"));
    field("id", short(&s["id"], 40));
    field("name", short(&s["name"], 64));
    field("cron", short(&s["cron"], 100));
    field("timezone", short(&s["timezone"], 64));
    field(
        "state",
        if s["enabled"] == true {
            "enabled".into()
        } else {
            "paused".into()
        },
    );
    field("overlap", short(&s["overlap"], 20));
    field(
        "catch_up",
        format!("{} (window {} s)", short(&s["catch_up"], 20), s["catch_up_window_secs"]),
    );
    field("task", short(&s["ticket"]["task"], 2000));
    field("labels", short(&s["ticket"]["labels"], 200));
    field("next run", short(&s["next_run_at"], 40));
    let upcoming: Vec<String> = s["upcoming"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| short(t, 40))
        .collect();
    field("upcoming", upcoming.join(", "));
    field("last run", short(&s["last_run_at"], 40));
    field("last", short(&s["last_ticket"], 40));
    out
}
