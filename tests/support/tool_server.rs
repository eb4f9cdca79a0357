//! A real HTTP tool server on loopback for the HTTP tool tests: it records every request and
//! answers by path; and a server that never answers, to see a cancelled call close its connection.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

/// One request the tool server received.
#[derive(Clone, Debug)]
pub struct ToolRequest {
    pub method: String,
    /// As sent (still percent-encoded).
    pub path: String,
    pub query: String,
    /// Names lowercased.
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

/// Answers by path: `/fail` → 500, `/slow` → 200 after 3 s, `/huge` → a 300 KB body, anything
/// else → 200 with `{method, path, query, body}` (never the headers, which may hold a secret).
pub struct ToolServer {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<ToolRequest>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

pub const HUGE_BYTES: usize = 300_000;

impl ToolServer {
    pub async fn start() -> ToolServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the tool server");
        let addr = listener.local_addr().unwrap();
        let requests: Arc<Mutex<Vec<ToolRequest>>> = Arc::default();
        let recorded = requests.clone();
        let app = Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let recorded = recorded.clone();
            async move { answer(&recorded, method, uri, headers, body).await }
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ToolServer { addr, requests, server }
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn requests(&self) -> Vec<ToolRequest> {
        self.requests.lock().unwrap().clone()
    }
}

async fn answer(
    recorded: &Mutex<Vec<ToolRequest>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = ToolRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or("").to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    recorded.lock().unwrap().push(request.clone());
    match uri.path() {
        "/fail" => (StatusCode::INTERNAL_SERVER_ERROR, "boom: the database is down").into_response(),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            "late".into_response()
        }
        "/huge" => (0..)
            .map(|i| format!("line {i:08}\n"))
            .take(HUGE_BYTES / 14)
            .collect::<String>()
            .into_response(),
        _ => axum::Json(json!({
            "method": request.method, "path": request.path, "query": request.query, "body": request.body,
        }))
        .into_response(),
    }
}

/// A server that reads a request and never answers. `received` turns true when a request came,
/// `closed` when the client closed the connection afterwards.
pub struct HangingServer {
    pub addr: SocketAddr,
    pub received: watch::Receiver<bool>,
    pub closed: watch::Receiver<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for HangingServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl HangingServer {
    pub async fn start() -> HangingServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the hanging server");
        let addr = listener.local_addr().unwrap();
        let (received_tx, received) = watch::channel(false);
        let (closed_tx, closed) = watch::channel(false);
        let server = tokio::spawn(async move {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 4096];
            if matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {
                let _ = received_tx.send(true);
            }
            // Never answer; a read of 0 bytes (or an error) is the client going away.
            loop {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            let _ = closed_tx.send(true);
            std::future::pending::<()>().await;
        });
        HangingServer {
            addr,
            received,
            closed,
            server,
        }
    }
}

/// Waits (at most `timeout`) until the flag is true.
pub async fn wait_flag(flag: &mut watch::Receiver<bool>, timeout: Duration) -> bool {
    tokio::time::timeout(timeout, flag.wait_for(|v| *v))
        .await
        .is_ok_and(|r| r.is_ok())
}
