//! `agentdesk ticket watch KEY`: follows the ticket's event stream, prints the model's text as it
//! streams and one line per other event, resumes a dropped stream with `Last-Event-ID`, and exits
//! with the ticket's outcome.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::client::{encode, CliError, Client};
use super::exit;
use crate::net::backoff::Backoff;
use crate::net::sse::{Frame, Parser};

/// Consecutive failed connections before giving up.
const MAX_RECONNECTS: u32 = 8;
/// The wait before a reconnect: 0.4 s, doubling, at most 5 s.
const RECONNECT: Backoff = Backoff::doubling(Duration::from_millis(400), Duration::from_secs(5));
/// The server pings at least every 15 s: a stream silent this long is dead.
const IDLE_LIMIT: Duration = Duration::from_secs(45);
/// A `ticket.waiting` with nothing after it this long is the latest event (a replay sends what
/// follows it at once).
const WAITING_SETTLE: Duration = Duration::from_millis(300);

/// Follows the ticket until it is done (0), failed (1), cancelled (2) or waiting (3).
pub async fn run(client: &Client, key: &str) -> Result<u8, CliError> {
    let mut printer = Printer::new();
    let code = follow(client, key, &mut printer).await;
    printer.flush_held();
    code
}

/// The exit code a terminal event (or status) means.
fn outcome(kind_or_status: &str) -> Option<u8> {
    match kind_or_status {
        "ticket.done" | "done" => Some(exit::OK),
        "ticket.failed" | "failed" => Some(exit::FAILED),
        "ticket.cancelled" | "cancelled" => Some(exit::CANCELLED),
        _ => None,
    }
}

async fn ticket_status(client: &Client, key: &str) -> Result<String, CliError> {
    let ticket = client.get(&format!("/v1/tickets/{}", encode(key))).await?;
    Ok(ticket["status"].as_str().unwrap_or_default().to_owned())
}

/// Why one connection's stream stopped.
enum Stopped {
    /// The watch is over, with this exit code.
    Exit(u8),
    /// The connection ended or broke; resume.
    Dropped,
}

async fn follow(client: &Client, key: &str, printer: &mut Printer) -> Result<u8, CliError> {
    let path = format!("/v1/tickets/{}/events", encode(key));
    let mut parser = Parser::new();
    let mut failures = 0u32;
    // The exit code of the last persisted event when it was terminal.
    let mut terminal: Option<u8> = None;
    let mut connected = false;
    loop {
        match client.open_stream(&path, parser.last_id()).await {
            Ok(response) => {
                connected = true;
                parser.reset_connection();
                let mut received = false;
                match read(
                    client,
                    key,
                    response,
                    &mut parser,
                    printer,
                    &mut terminal,
                    &mut received,
                )
                .await?
                {
                    Stopped::Exit(code) => return Ok(code),
                    Stopped::Dropped => {}
                }
                if received {
                    failures = 0;
                }
                // The server ends a stream right after a terminal latest event; a break after one
                // is settled by the ticket's status.
                if let Some(code) = terminal {
                    match ticket_status(client, key).await {
                        Ok(status) if outcome(&status) == Some(code) => return Ok(code),
                        _ => {}
                    }
                }
            }
            // A service that was never reached is an error at once; a lost one is waited for.
            Err(err @ CliError::Connection { .. }) if connected && failures < MAX_RECONNECTS => {
                note(printer, &format!("{err}; retrying"));
            }
            Err(err) => return Err(err),
        }
        failures += 1;
        if failures > MAX_RECONNECTS {
            return Err(CliError::Connection {
                url: client.base_url().to_owned(),
                detail: format!("the event stream of {key} broke off {MAX_RECONNECTS} times"),
            });
        }
        tokio::time::sleep(RECONNECT.delay(failures)).await;
    }
}

fn note(printer: &mut Printer, message: &str) {
    printer.end_line();
    eprintln!("agentdesk: {message}");
}

async fn read(
    client: &Client,
    key: &str,
    response: reqwest::Response,
    parser: &mut Parser,
    printer: &mut Printer,
    terminal: &mut Option<u8>,
    received: &mut bool,
) -> Result<Stopped, CliError> {
    let mut bytes = response.bytes_stream();
    let mut waiting = false;
    loop {
        let wait = if waiting { WAITING_SETTLE } else { IDLE_LIMIT };
        let chunk = match tokio::time::timeout(wait, bytes.next()).await {
            Ok(Some(Ok(chunk))) => chunk,
            Ok(Some(Err(_)) | None) => return Ok(Stopped::Dropped),
            Err(_) if waiting => {
                waiting = false;
                if ticket_status(client, key).await? == "waiting" {
                    return Ok(Stopped::Exit(exit::WAITING));
                }
                continue;
            }
            Err(_) => return Ok(Stopped::Dropped),
        };
        let mut frames = vec![];
        parser.feed(&chunk, &mut frames);
        for frame in frames {
            *received = true;
            let Some(event) = parse(&frame) else { continue };
            let kind = event["kind"].as_str().unwrap_or_default();
            if !kind.ends_with(".delta") {
                *terminal = outcome(kind);
                waiting = kind == "ticket.waiting";
            }
            printer.event(&event);
        }
    }
}

fn parse(frame: &Frame) -> Option<Value> {
    serde_json::from_str::<Value>(&frame.data).ok().filter(Value::is_object)
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Open {
    None,
    Text,
    Thinking,
}

/// Writes events to stdout: deltas inline and flushed, everything else one line each.
struct Printer {
    color: bool,
    open: Open,
    /// Text streamed since the last assistant comment (which then need not be printed again).
    streamed: bool,
    /// Whether the model request that deltas belong to has shown its `request.started` line.
    /// Deltas travel live while that event comes from the log, so they may arrive first: they
    /// are held until it comes.
    requesting: bool,
    held: Vec<(Open, String)>,
    out: std::io::Stdout,
}

impl Printer {
    fn new() -> Printer {
        let out = std::io::stdout();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Printer {
            color: out.is_terminal() && !no_color,
            open: Open::None,
            streamed: false,
            requesting: false,
            held: vec![],
            out,
        }
    }

    fn end_line(&mut self) {
        if self.open != Open::None {
            let _ = writeln!(self.out);
            let _ = self.out.flush();
            self.open = Open::None;
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn inline(&mut self, open: Open, delta: &str) {
        if self.open != open {
            self.end_line();
            if open == Open::Thinking {
                let label = self.paint("2", "thinking: ");
                let _ = write!(self.out, "{label}");
            }
            self.open = open;
        }
        let text = if open == Open::Thinking {
            self.paint("2", delta)
        } else {
            delta.to_owned()
        };
        let _ = write!(self.out, "{text}");
        let _ = self.out.flush();
    }

    fn event(&mut self, event: &Value) {
        let kind = event["kind"].as_str().unwrap_or_default();
        let data = &event["data"];
        let open = match kind {
            "text.delta" => Open::Text,
            "thinking.delta" => Open::Thinking,
            k if k.ends_with(".delta") => return,
            _ => Open::None,
        };
        if open != Open::None {
            self.streamed |= open == Open::Text;
            let delta = data["delta"].as_str().unwrap_or_default();
            if self.requesting {
                self.inline(open, delta);
            } else {
                self.held.push((open, delta.to_owned()));
            }
            return;
        }
        match kind {
            "request.started" => self.requesting = true,
            "request.finished" | "request.failed" | "ticket.requeued" => self.requesting = false,
            _ => {}
        }
        self.line(kind, event);
        if self.requesting {
            for (open, delta) in std::mem::take(&mut self.held) {
                self.inline(open, &delta);
            }
        }
    }

    /// Prints deltas still held when the stream ends (their request's line never came).
    fn flush_held(&mut self) {
        for (open, delta) in std::mem::take(&mut self.held) {
            self.inline(open, &delta);
        }
        self.end_line();
    }

    /// An event's line (events not worth one print nothing).
    fn line(&mut self, kind: &str, event: &Value) {
        let data = &event["data"];
        let Some(facts) = describe(kind, data, &mut self.streamed) else {
            return;
        };
        self.end_line();
        let color = match kind {
            "ticket.done" => "1;32",
            "ticket.failed" | "request.failed" | "tool.failed" | "compaction.failed" | "policy.violated" => "1;31",
            "ticket.cancelled" | "request.retried" | "schema.retried" => "33",
            "ticket.waiting" | "tool.approval_requested" | "question.asked" => "1;35",
            _ => "36",
        };
        let seq = event["seq"].as_i64().map(|s| format!("{s:>3} ")).unwrap_or_default();
        let agent = event["agent"]
            .as_str()
            .map(|a| format!(" {}", self.paint("2", &format!("[{a}]"))))
            .unwrap_or_default();
        let kind = self.paint(color, kind);
        let facts = if facts.is_empty() { facts } else { format!(" {facts}") };
        let _ = writeln!(self.out, "{seq}{kind}{agent}{facts}");
        let _ = self.out.flush();
    }
}

/// The key facts of an event in a few words; None for an event not worth a line.
pub fn describe(kind: &str, data: &Value, streamed: &mut bool) -> Option<String> {
    let s = |v: &Value| short(v, 100);
    let text = match kind {
        "ticket.created" => {
            let ticket = &data["ticket"];
            let labels = ticket["labels"].as_array().filter(|l| !l.is_empty());
            let labels = labels.map(|l| format!(" labels={}", short(&Value::Array(l.clone()), 60)));
            format!("{}{}", s(&ticket["task"]), labels.unwrap_or_default())
        }
        "ticket.started" => format!("attempt {}", data["attempt"]),
        "ticket.done" => format!("result: {}", short(&data["result"], 400)),
        "ticket.failed" => error(&data["error"]),
        "ticket.waiting" => "waiting for a human: answer with `agentdesk ticket comment KEY TEXT`".into(),
        "ticket.requeued" => format!("reason={}", s(&data["reason"])),
        "comment.created" => return comment(&data["comment"], streamed),
        "request.started" => format!("model={}", s(&data["model"])),
        "request.finished" => {
            let usage = &data["usage"];
            let cost = if data["unpriced"] == true {
                " unpriced".to_owned()
            } else if data["cost_usd"].is_number() {
                format!(" cost=${}", data["cost_usd"])
            } else {
                String::new()
            };
            format!(
                "model={} stop={} tokens in={} out={}{cost}",
                s(&data["model"]),
                s(&data["stop_reason"]),
                usage["input_tokens"].as_i64().unwrap_or(0),
                usage["output_tokens"].as_i64().unwrap_or(0)
            )
        }
        "budget.exhausted" => format!(
            "{} {} has spent ${} of ${}: waiting until it is raised (or its day rolls over)",
            s(&data["scope"]),
            s(&data["name"]),
            data["spent_usd"],
            data["limit_usd"]
        ),
        "budget.threshold" => format!("{} {} at {}%", s(&data["scope"]), s(&data["name"]), data["percent"]),
        "budget.unpriced" => format!(
            "{} has no price and a budget applies: waiting for PUT /v1/prices/{}",
            s(&data["model"]),
            s(&data["model"])
        ),
        "request.retried" => format!(
            "attempt {}/{} {} (retrying in {} ms)",
            data["attempt"],
            data["max_attempts"],
            error(data),
            data["delay_ms"]
        ),
        "request.failed" => error(data),
        "request.queued" => format!(
            "waiting for a slot of {} (max_concurrent {}, {} ahead)",
            s(&data["provider"]),
            data["max_concurrent"],
            data["ahead"]
        ),
        "tool.started" | "tool.approval_requested" => format!("{} {}", s(&data["tool_name"]), s(&data["input"])),
        "tool.finished" => format!("{} → {}", s(&data["tool_name"]), s(&data["output"])),
        "question.asked" => s(&data["question"]),
        "question.answered" => format!("{} (by {})", s(&data["answer"]), s(&data["by"])),
        "tool.failed" => format!("{} {}", s(&data["tool_name"]), error(data)),
        "schema.retried" => format!(
            "attempt {}/{} {}",
            data["attempt"],
            data["max_attempts"],
            s(&data["message"])
        ),
        "policy.violated" => format!("{} limit={}", s(&data["kind"]), data["limit"]),
        "compaction.finished" => format!(
            "{} tokens {} → {}",
            s(&data["reason"]),
            data["tokens_before"],
            data["tokens_after"]
        ),
        "context.limit_exceeded" => format!(
            "estimated {} tokens, threshold {}",
            data["estimated_tokens"], data["threshold_tokens"]
        ),
        _ => match data.as_object() {
            Some(o) if o.is_empty() => String::new(),
            None => String::new(),
            Some(_) => s(data),
        },
    };
    Some(text)
}

fn error(e: &Value) -> String {
    format!("{}: {}", short(&e["kind"], 40), short(&e["message"], 300))
}

/// A comment's text: the humans' always, the assistant's only when it was not streamed (a replay).
fn comment(comment: &Value, streamed: &mut bool) -> Option<String> {
    let author = comment["author"].as_str().unwrap_or_default();
    let text: Vec<&str> = comment["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|block| block["type"] == "text")
        .filter_map(|block| block["text"].as_str())
        .collect();
    if author == "assistant" && std::mem::take(streamed) {
        return None;
    }
    if text.is_empty() {
        return None;
    }
    let text = text.join("\n");
    let limit = if author == "assistant" { 4000 } else { 300 };
    Some(format!("{author}: {}", short(&Value::String(text), limit)))
}

/// A value in at most `max` characters on one line (strings without quotes).
pub fn short(v: &Value, max: usize) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_read_as_short_lines() {
        let mut streamed = false;
        let line = |kind: &str, data: Value| describe(kind, &data, &mut false).unwrap();
        assert_eq!(
            line(
                "tool.started",
                json!({"tool_name": "close_ticket", "input": {"result": 42}})
            ),
            "close_ticket {\"result\":42}"
        );
        assert_eq!(
            line(
                "ticket.failed",
                json!({"error": {"kind": "provider_error", "message": "bad\nkey"}})
            ),
            "provider_error: bad key"
        );
        assert_eq!(line("ticket.cancelled", json!({})), "");
        assert_eq!(
            line(
                "request.finished",
                json!({"model": "m", "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 2},
                       "cost_usd": 0.0004, "unpriced": false})
            ),
            "model=m stop=end_turn tokens in=3 out=2 cost=$0.0004"
        );
        assert_eq!(
            line(
                "budget.exhausted",
                json!({"scope": "agent", "name": "researcher", "limit_usd": 2, "spent_usd": 1.99})
            ),
            "agent researcher has spent $1.99 of $2: waiting until it is raised (or its day rolls over)"
        );
        let assistant = json!({"comment": {"author": "assistant", "content": [{"type": "text", "text": "Hi"}]}});
        assert_eq!(
            describe("comment.created", &assistant, &mut streamed).as_deref(),
            Some("assistant: Hi")
        );
        streamed = true;
        assert_eq!(describe("comment.created", &assistant, &mut streamed), None);
        assert!(!streamed);
        assert_eq!(short(&json!("abcdef"), 4), "abc…");
    }

    #[test]
    fn outcomes() {
        assert_eq!(outcome("ticket.done"), Some(0));
        assert_eq!(outcome("failed"), Some(1));
        assert_eq!(outcome("ticket.cancelled"), Some(2));
        assert_eq!(outcome("ticket.waiting"), None);
    }
}
