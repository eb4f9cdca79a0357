//! One delivery attempt: the Standard Webhooks request (body, `webhook-*` headers, signature) sent
//! through the address guard, and what came of it.

use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, CONTENT_TYPE, RETRY_AFTER};
use reqwest::StatusCode;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::domain::webhook::sign;
use crate::net::{is_forbidden, AddressGuard};

/// The longest `Retry-After` honoured: a receiver cannot park an endpoint for longer.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);
/// How much of an answer's body is read (so its connection can be reused) before it is dropped.
const MAX_ANSWER_BODY: usize = 64 * 1024;

/// The delivered body: `{"type", "timestamp", "data"}`.
#[derive(Serialize)]
struct Payload<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    timestamp: DateTime<Utc>,
    data: &'a RawValue,
}

/// The body of an event's delivery; `data` is the event as the SSE streams send it.
pub fn body(kind: &str, at: DateTime<Utc>, data: &RawValue) -> Bytes {
    // A struct of a string, a time and raw JSON serialises without fail.
    Bytes::from(
        serde_json::to_vec(&Payload {
            kind,
            timestamp: at,
            data,
        })
        .expect("payload serialises"),
    )
}

/// What one attempt came to.
#[derive(Debug)]
pub struct Attempt {
    pub status: Option<StatusCode>,
    /// None when answered with 2xx.
    pub error: Option<String>,
    /// The receiver's `Retry-After`, when it sent one.
    pub retry_after: Option<Duration>,
    pub duration: Duration,
}

impl Attempt {
    pub fn succeeded(&self) -> bool {
        self.error.is_none()
    }

    pub fn gone(&self) -> bool {
        self.status == Some(StatusCode::GONE)
    }
}

/// Sends deliveries: one client (connection pool) per process, redirects not followed.
pub struct Sender {
    client: reqwest::Client,
    guard: AddressGuard,
}

impl Sender {
    pub fn new(allow_private: bool, timeout: Duration) -> Sender {
        let guard = AddressGuard { allow_private };
        let client = guard
            .client_builder()
            // A redirect is an answer like any other non-2xx: a failure, retried later.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .user_agent(concat!("agentdesk-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Sender { client, guard }
    }

    /// POSTs `body` to `url`, signed with `key`, as message `msg_id`.
    pub async fn send(&self, url: &str, key: &[u8], msg_id: &str, body: Bytes) -> Attempt {
        let started = Instant::now();
        let failed = |error: String| Attempt {
            status: None,
            error: Some(error),
            retry_after: None,
            duration: started.elapsed(),
        };
        let Ok(parsed) = reqwest::Url::parse(url) else {
            return failed("invalid url".into());
        };
        if self.guard.check_url(&parsed).is_err() {
            return failed("forbidden_address".into());
        }
        let timestamp = Utc::now().timestamp();
        let signature = sign(key, msg_id, timestamp, &body);
        let sent = self
            .client
            .post(parsed)
            .header(CONTENT_TYPE, "application/json")
            .header("webhook-id", msg_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await;
        let mut response = match sent {
            Ok(r) => r,
            Err(err) if is_forbidden(&err) => return failed("forbidden_address".into()),
            Err(err) if err.is_timeout() => return failed("timeout".into()),
            Err(err) => return failed(format!("connection: {}", error_chain(&err.without_url()))),
        };
        let status = response.status();
        let retry_after = retry_after(response.headers());
        // Read a little of the answer so the connection can serve the next delivery; a body that
        // is slow or large is cut off here (the timeout still bounds the whole attempt).
        let mut read = 0;
        let mut timed_out = false;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) if read + chunk.len() <= MAX_ANSWER_BODY => read += chunk.len(),
                Ok(_) => break,
                Err(err) => {
                    timed_out = err.is_timeout();
                    break;
                }
            }
        }
        let error = if timed_out {
            Some("timeout".to_string())
        } else if status.is_success() {
            None
        } else {
            Some(format!("status {}", status.as_u16()))
        };
        Attempt {
            status: Some(status),
            error,
            retry_after,
            duration: started.elapsed(),
        }
    }
}

/// An error and its causes, `a: b: c`.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// `Retry-After` as seconds or an HTTP date; capped at a day.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let delay = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = DateTime::parse_from_rfc2822(value).ok()?.with_timezone(&Utc);
            (at - Utc::now()).to_std().unwrap_or(Duration::ZERO)
        }
    };
    Some(delay.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(RETRY_AFTER, "999999999".parse().unwrap());
        assert_eq!(retry_after(&h), Some(MAX_RETRY_AFTER));
        h.insert(RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        let soon = (Utc::now() + chrono::Duration::seconds(100)).to_rfc2822();
        h.insert(RETRY_AFTER, soon.parse().unwrap());
        let d = retry_after(&h).unwrap();
        assert!(d > Duration::from_secs(95) && d <= Duration::from_secs(100), "{d:?}");
        h.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn the_body_holds_the_event_as_streamed() {
        let data = RawValue::from_string(r#"{"ticket_key":"TICKET-1","seq":3}"#.into()).unwrap();
        let at = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
            .unwrap()
            .with_timezone(&Utc);
        let body = body("ticket.done", at, &data);
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            r#"{"type":"ticket.done","timestamp":"2026-01-02T03:04:05Z","data":{"ticket_key":"TICKET-1","seq":3}}"#
        );
    }
}
