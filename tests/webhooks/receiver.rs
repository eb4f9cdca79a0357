//! A webhook receiver on loopback: a real HTTP server that records every request and answers as
//! its script says, and a signature check written apart from the service's (ring's HMAC).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::Value;
use tokio::time::Instant;

/// How the receiver answers one request.
#[derive(Clone, Debug)]
pub enum Answer {
    Status(u16),
    /// A status with a `Retry-After` header.
    RetryAfter(u16, &'static str),
    /// Answers 200 after a while.
    Slow(Duration),
    /// Never answers.
    Hang,
}

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Received {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: Bytes,
    pub at: Instant,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    pub fn kind(&self) -> String {
        self.json()["type"].as_str().unwrap_or_default().to_owned()
    }
}

#[derive(Default)]
struct Inner {
    received: Mutex<Vec<Received>>,
    /// Answers for the next requests, in order; 200 when empty.
    script: Mutex<VecDeque<Answer>>,
}

#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    inner: Arc<Inner>,
}

impl Receiver {
    pub async fn start(script: Vec<Answer>) -> Receiver {
        let inner = Arc::new(Inner {
            received: Mutex::new(vec![]),
            script: Mutex::new(script.into()),
        });
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://127.0.0.1:{}/hook", listener.local_addr().unwrap().port());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, inner }
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.received.lock().unwrap().clone()
    }

    /// Waits until `n` requests arrived (at most `timeout`) and returns them all.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let received = self.received();
            if received.len() >= n || Instant::now() >= deadline {
                return received;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn receive(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    inner.received.lock().unwrap().push(Received {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body,
        at: Instant::now(),
    });
    let answer = inner.script.lock().unwrap().pop_front().unwrap_or(Answer::Status(200));
    match answer {
        Answer::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
        Answer::RetryAfter(code, after) => {
            (StatusCode::from_u16(code).unwrap(), [("retry-after", after)]).into_response()
        }
        Answer::Slow(delay) => {
            tokio::time::sleep(delay).await;
            StatusCode::OK.into_response()
        }
        Answer::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK.into_response()
        }
    }
}

/// Verifies a Standard Webhooks signature header with ring's HMAC-SHA256 (not the service's code).
pub fn verify(secret: &str, id: &str, timestamp: &str, body: &[u8], signature_header: &str) -> bool {
    let key = BASE64
        .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
        .expect("base64");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    let mut message = format!("{id}.{timestamp}.").into_bytes();
    message.extend_from_slice(body);
    let expected = format!("v1,{}", BASE64.encode(ring::hmac::sign(&key, &message).as_ref()));
    signature_header.split(' ').any(|s| s == expected)
}
