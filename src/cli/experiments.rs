//! `agentdesk experiment create|show|list|cancel`.

use serde_json::{json, Map, Value};

use super::client::{encode, CliError, Client};
use super::tickets::{dollars, table};
use super::watch::short;
use super::{exit, ExperimentCommand};

pub async fn run(client: &Client, command: ExperimentCommand) -> Result<u8, CliError> {
    match command {
        ExperimentCommand::Create {
            name,
            tickets,
            label,
            status,
            since,
            limit,
            arms,
            judge,
            criteria,
            live,
        } => {
            let arms = arms.iter().map(|a| arm(a)).collect::<Result<Vec<Value>, CliError>>()?;
            let mut body = json!({"name": name, "arms": arms, "tools": if live { "live" } else { "recorded" }});
            if tickets.is_empty() {
                body["filter"] = json!({"label": label, "status": status, "since": since, "limit": limit});
            } else {
                body["tickets"] = json!(tickets);
            }
            if let Some(agent) = judge {
                body["judge"] = json!({"agent": agent, "criteria": criteria});
            }
            let experiment = client.post("/v1/experiments", &body).await?;
            println!("{}", experiment["id"].as_str().unwrap_or_default());
            Ok(exit::OK)
        }
        ExperimentCommand::Show { id, json } => {
            let experiment = client.get(&format!("/v1/experiments/{}", encode(&id))).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&experiment).unwrap_or_default());
            } else {
                print!("{}", render(&experiment));
            }
            Ok(exit::OK)
        }
        ExperimentCommand::List => {
            let list = client.get("/v1/experiments").await?;
            let rows: Vec<[String; 4]> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| {
                    [
                        short(&x["id"], 36),
                        short(&x["status"], 10),
                        dollars(&x["cost_usd"]),
                        short(&x["name"], 60),
                    ]
                })
                .collect();
            print!("{}", table(["ID", "STATUS", "COST", "NAME"], &rows));
            Ok(exit::OK)
        }
        ExperimentCommand::Cancel { id } => {
            let x = client
                .post(&format!("/v1/experiments/{}/cancel", encode(&id)), &json!({}))
                .await?;
            println!("{} is {}", short(&x["name"], 60), short(&x["status"], 10));
            Ok(exit::OK)
        }
    }
}

/// `name=baseline,agent=writer,version=1,model=…,provider=…` as an arm.
fn arm(spec: &str) -> Result<Value, CliError> {
    let mut arm = Map::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = part.split_once('=') else {
            return Err(CliError::Usage(format!("--arm {spec:?}: {part:?} is not key=value")));
        };
        let (key, value) = match key.trim() {
            "name" | "agent" | "model" | "provider" => (key.trim(), json!(value.trim())),
            "version" | "agent_version" => match value.trim().parse::<i32>() {
                Ok(n) => ("agent_version", json!(n)),
                Err(_) => return Err(CliError::Usage(format!("--arm {spec:?}: version must be a number"))),
            },
            other => {
                return Err(CliError::Usage(format!(
                    "--arm {spec:?}: {other:?} is not one of name, agent, version, model, provider"
                )))
            }
        };
        arm.insert(key.to_owned(), value);
    }
    if !arm.contains_key("name") {
        return Err(CliError::Usage(format!("--arm {spec:?}: name=… is required")));
    }
    Ok(Value::Object(arm))
}

/// The arms' figures as a table, then each ticket's results by arm.
fn render(x: &Value) -> String {
    let mut out = format!(
        "{} ({}) · {} so far\n\n",
        short(&x["name"], 80),
        short(&x["status"], 10),
        dollars(&x["cost_usd"])
    );
    let none = || "–".to_owned();
    let rows: Vec<[String; 9]> = x["arms"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let judge = &a["judge"];
            [
                short(&a["name"], 24),
                a["done"].to_string(),
                a["failed"].to_string(),
                dollars(&a["cost_usd"]),
                a["duration_ms"]["p50"]
                    .as_i64()
                    .map_or_else(none, |ms| format!("{ms} ms")),
                a["duration_ms"]["p95"]
                    .as_i64()
                    .map_or_else(none, |ms| format!("{ms} ms")),
                a["schema_valid"]
                    .as_f64()
                    .map_or_else(none, |v| format!("{:.0}%", v * 100.0)),
                if judge.is_object() {
                    format!("{}/{}/{}", judge["wins"], judge["losses"], judge["ties"])
                } else {
                    none()
                },
                judge["mean_score"].as_f64().map_or_else(none, |s| format!("{s:.1}")),
            ]
        })
        .collect();
    out.push_str(&table(
        ["ARM", "DONE", "FAILED", "COST", "P50", "P95", "VALID", "W/L/T", "SCORE"],
        &rows,
    ));
    for t in x["tickets"].as_array().into_iter().flatten() {
        out.push_str(&format!("\n{}\n", short(&t["ticket"], 20)));
        for (arm, r) in t["results"].as_object().into_iter().flatten() {
            out.push_str(&format!(
                "  {arm}: {} {} {}\n",
                short(&r["key"], 20),
                short(&r["status"], 12),
                short(&r["result"], 200)
            ));
        }
    }
    out
}
