//! `agentdesk ticket create|list|show|comment|cancel|retry|approve|deny|answer` (and `watch`, in
//! `watch.rs`).

use std::path::Path;

use serde_json::{json, Value};

use super::apply::read_document;
use super::client::{encode, CliError, Client};
use super::watch::{self, short};
use super::{exit, TicketCommand};

pub async fn run(client: &Client, command: TicketCommand) -> Result<u8, CliError> {
    match command {
        TicketCommand::Create {
            task,
            labels,
            priority,
            schema,
            watch,
        } => {
            let mut body = json!({ "task": task, "labels": labels });
            if let Some(p) = priority {
                body["priority"] = json!(p);
            }
            if let Some(file) = schema {
                body["schema"] = read_schema(&file)?;
            }
            let ticket = client.post("/v1/tickets", &body).await?;
            let key = ticket["key"].as_str().unwrap_or_default().to_owned();
            if watch {
                eprintln!("created {key}");
                return watch::run(client, &key).await;
            }
            println!("{key}");
            Ok(exit::OK)
        }
        TicketCommand::Watch { key } => watch::run(client, &key).await,
        TicketCommand::List { status, label, limit } => list(client, status, label, limit).await,
        TicketCommand::Show { key, json, comments } => show(client, &key, json, comments).await,
        TicketCommand::Comment { key, text } => {
            let comment = client
                .post(
                    &format!("/v1/tickets/{}/comments", encode(&key)),
                    &json!({ "text": text }),
                )
                .await?;
            let ticket = client.get(&format!("/v1/tickets/{}", encode(&key))).await?;
            println!(
                "commented on {} (comment {}); it is {}",
                ticket["key"].as_str().unwrap_or(&key),
                comment["seq"],
                short(&ticket["status"], 20)
            );
            Ok(exit::OK)
        }
        TicketCommand::Cancel { key } => transition(client, &key, "cancel").await,
        TicketCommand::Retry { key } => transition(client, &key, "retry").await,
        TicketCommand::Approve { key, call_id, reason } => decide(client, &key, call_id, true, reason).await,
        TicketCommand::Deny { key, call_id, reason } => decide(client, &key, call_id, false, reason).await,
        TicketCommand::Replay {
            key,
            agent,
            agent_version,
            provider,
            model,
            live,
        } => {
            let tools = if live { "live" } else { "recorded" };
            let body = json!({"agent": agent, "agent_version": agent_version, "provider": provider,
                              "model": model, "tools": tools});
            let replay = client
                .post(&format!("/v1/tickets/{}/replay", encode(&key)), &body)
                .await?;
            println!("{}", replay["key"].as_str().unwrap_or_default());
            Ok(exit::OK)
        }
        TicketCommand::Answer { key, answer, json } => {
            let answer: Value = if json {
                serde_json::from_str(&answer)
                    .map_err(|e| CliError::Usage(format!("--json: the answer is not JSON ({e})")))?
            } else {
                Value::String(answer)
            };
            let ticket = client.get(&format!("/v1/tickets/{}", encode(&key))).await?;
            let Some(id) = ticket["pending_question"]["id"].as_str() else {
                return Err(CliError::Usage(format!(
                    "{key} waits for no answer to a question (it is {})",
                    short(&ticket["status"], 20)
                )));
            };
            let path = format!("/v1/tickets/{}/questions/{}", encode(&key), encode(id));
            let ticket = client.post(&path, &json!({ "answer": answer })).await?;
            print_status(&ticket, &key);
            Ok(exit::OK)
        }
    }
}

/// `agentdesk agents versions NAME`: a line per version, newest first.
pub async fn agent_versions(client: &Client, name: &str) -> Result<u8, CliError> {
    let page = client
        .get(&format!("/v1/agents/{}/versions?limit=200", encode(name)))
        .await?;
    let rows: Vec<[String; 4]> = page["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            [
                short(&v["version"], 8),
                short(&v["model"], 40),
                short(&v["updated_at"], 32),
                short(&v["role"], 60),
            ]
        })
        .collect();
    print!("{}", table(["VERSION", "MODEL", "MADE", "ROLE"], &rows));
    Ok(exit::OK)
}

/// `agentdesk agents rollback NAME N`: a new version with version N's settings.
pub async fn rollback(client: &Client, name: &str, version: i32) -> Result<u8, CliError> {
    let agent = client
        .post(
            &format!("/v1/agents/{}/rollback", encode(name)),
            &json!({ "version": version }),
        )
        .await?;
    println!(
        "{name} is at version {} (with version {version}'s settings)",
        agent["version"]
    );
    Ok(exit::OK)
}

/// Approves or denies one waiting call, or every pending one.
async fn decide(
    client: &Client,
    key: &str,
    call_id: Option<String>,
    approve: bool,
    reason: Option<String>,
) -> Result<u8, CliError> {
    let ticket = match call_id {
        Some(call) => {
            let path = format!("/v1/tickets/{}/approvals/{}", encode(key), encode(&call));
            client
                .post(&path, &json!({ "approve": approve, "reason": reason }))
                .await?
        }
        None => {
            let all = if approve { "approve_all" } else { "deny_all" };
            let path = format!("/v1/tickets/{}/approvals", encode(key));
            client.post(&path, &json!({ all: true, "reason": reason })).await?
        }
    };
    print_status(&ticket, key);
    Ok(exit::OK)
}

fn print_status(ticket: &Value, key: &str) {
    println!(
        "{} is {}",
        ticket["key"].as_str().unwrap_or(key),
        short(&ticket["status"], 20)
    );
}

fn read_schema(file: &Path) -> Result<Value, CliError> {
    let schema = read_document(file)?;
    if !schema.is_object() && !schema.is_boolean() {
        return Err(CliError::Usage(format!(
            "{}: a JSON Schema is an object (or true/false)",
            file.display()
        )));
    }
    Ok(schema)
}

async fn transition(client: &Client, key: &str, action: &str) -> Result<u8, CliError> {
    let ticket = client
        .post(&format!("/v1/tickets/{}/{action}", encode(key)), &json!({}))
        .await?;
    print_status(&ticket, key);
    Ok(exit::OK)
}

async fn list(client: &Client, status: Option<String>, label: Option<String>, limit: u32) -> Result<u8, CliError> {
    if !(1..=200).contains(&limit) {
        return Err(CliError::Usage("--limit must be between 1 and 200".into()));
    }
    let mut path = format!("/v1/tickets?order=desc&limit={limit}");
    if let Some(s) = status {
        path.push_str(&format!("&status={}", encode(&s)));
    }
    if let Some(l) = label {
        path.push_str(&format!("&label={}", encode(&l)));
    }
    let page = client.get(&path).await?;
    let rows: Vec<[String; 4]> = page["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            [
                short(&t["key"], 20),
                short(&t["status"], 12),
                short(&t["agent"], 24),
                short(&t["task"], 60),
            ]
        })
        .collect();
    print!("{}", table(["KEY", "STATUS", "AGENT", "TASK"], &rows));
    Ok(exit::OK)
}

/// An amount of dollars as people write it: `$0.0042`, never in exponent form.
pub(super) fn dollars(amount: &Value) -> String {
    match amount.as_f64() {
        Some(n) => {
            let text = format!("{n:.8}");
            let text = text.trim_end_matches('0').trim_end_matches('.');
            format!("${text}")
        }
        None => "–".to_owned(),
    }
}

/// Columns padded to their widest cell; the last one is not padded.
pub(super) fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

async fn show(client: &Client, key: &str, as_json: bool, last: usize) -> Result<u8, CliError> {
    let ticket = client.get(&format!("/v1/tickets/{}", encode(key))).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&ticket).unwrap_or_default());
        return Ok(exit::OK);
    }
    // The transcript is listed oldest first: page through it, keeping the last ones.
    let mut comments: Vec<Value> = vec![];
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/tickets/{}/comments?limit=200", encode(key));
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", encode(c)));
        }
        let page = client.get(&path).await?;
        comments.extend(page["items"].as_array().into_iter().flatten().cloned());
        if comments.len() > last {
            comments.drain(..comments.len() - last);
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    print!("{}", render_ticket(&ticket, &comments));
    Ok(exit::OK)
}

fn render_ticket(t: &Value, comments: &[Value]) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: String| out.push_str(&format!("{name:<10} {value}\n"));
    field("key", short(&t["key"], 40));
    field("status", short(&t["status"], 20));
    field("agent", short(&t["agent"], 64));
    field("labels", short(&t["labels"], 200));
    field("priority", t["priority"].to_string());
    field("attempts", format!("{}/{}", t["attempts"], t["max_attempts"]));
    field("task", short(&t["task"], 2000));
    if !t["schema"].is_null() {
        field("schema", short(&t["schema"], 400));
    }
    if !t["result"].is_null() {
        field("result", short(&t["result"], 2000));
    }
    if !t["error"].is_null() {
        field(
            "error",
            format!(
                "{}: {}",
                short(&t["error"]["kind"], 40),
                short(&t["error"]["message"], 400)
            ),
        );
    }
    let usage = &t["usage"];
    field(
        "usage",
        format!(
            "{} requests, {} tool calls, {} tokens in, {} out",
            usage["requests"], usage["tool_calls"], usage["input_tokens"], usage["output_tokens"]
        ),
    );
    let cost = if usage["unpriced"] == true {
        "unknown (a model has no price)".to_owned()
    } else if usage["cost_usd"].is_number() {
        dollars(&usage["cost_usd"])
    } else {
        "–".to_owned()
    };
    let budget = t["budget_usd"]
        .as_f64()
        .map(|_| format!(" of a {} budget", dollars(&t["budget_usd"])))
        .unwrap_or_default();
    field("cost", format!("{cost}{budget}"));
    if let Some(why) = t["waiting_for"].as_str() {
        field("waits for", why.to_owned());
    }
    let question = &t["pending_question"];
    if question.is_object() {
        field("question", short(&question["question"], 500));
        if let Some(choices) = question["choices"].as_array() {
            let choices: Vec<String> = choices.iter().map(|c| short(c, 80)).collect();
            field("choices", choices.join(" | "));
        }
        if question["expires_at"].is_string() {
            field("answer by", short(&question["expires_at"], 40));
        }
    }
    for call in t["pending_approvals"].as_array().into_iter().flatten() {
        field(
            "approve?",
            format!(
                "{} {} (call {})",
                short(&call["tool_name"], 64),
                short(&call["input"], 200),
                short(&call["call_id"], 64)
            ),
        );
    }
    field("created", short(&t["created_at"], 40));
    field("updated", short(&t["updated_at"], 40));
    if !comments.is_empty() {
        out.push_str("\nlast comments:\n");
    }
    for c in comments {
        let author = c["author"].as_str().unwrap_or("?");
        for block in c["content"].as_array().into_iter().flatten() {
            let line = match block["type"].as_str() {
                Some("text") => short(&block["text"], 500),
                Some("tool_use") => format!("→ {} {}", short(&block["name"], 64), short(&block["input"], 200)),
                Some("tool_result") => {
                    let mark = if block["is_error"] == true { "✗" } else { "←" };
                    format!("{mark} {}", short(&block["output"], 200))
                }
                Some("thinking") => format!("(thinking) {}", short(&block["text"], 200)),
                _ => continue,
            };
            out.push_str(&format!("  #{} {author}: {line}\n", c["seq"]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_pads_all_but_the_last_column() {
        let rows = [["TICKET-1".to_owned(), "todo".to_owned(), "a longer task".to_owned()]];
        assert_eq!(
            table(["KEY", "STATUS", "TASK"], &rows),
            "KEY       STATUS  TASK\nTICKET-1  todo    a longer task\n"
        );
    }

    #[test]
    fn show_gives_the_cost_the_budget_and_what_a_ticket_waits_for() {
        let ticket = serde_json::json!({
            "key": "TICKET-3", "status": "waiting", "waiting_for": "budget", "budget_usd": 0.5,
            "usage": {"requests": 2, "tool_calls": 1, "input_tokens": 10, "output_tokens": 5,
                      "cost_usd": 0.00015, "unpriced": false}
        });
        let shown = render_ticket(&ticket, &[]);
        assert!(shown.contains("cost       $0.00015 of a $0.5 budget\n"), "{shown}");
        assert!(shown.contains("waits for  budget\n"), "{shown}");
        let unpriced = serde_json::json!({"key": "TICKET-4", "usage": {"cost_usd": null, "unpriced": true}});
        assert!(render_ticket(&unpriced, &[]).contains("cost       unknown (a model has no price)"));
    }
}
