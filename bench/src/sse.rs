//! A deliberately small SSE client over a raw TCP stream: one GET, then the chunked body decoded
//! into lines. Thousands of these cost the bench little (no HTTP client state per connection).

use std::net::SocketAddr;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One `data:` line of the stream, with the few fields the bench looks at.
#[derive(Debug)]
pub struct SseEvent {
    pub kind: String,
    /// The event's `at` as Unix microseconds.
    pub at_us: Option<i64>,
}

pub struct SseConn {
    reader: BufReader<TcpStream>,
    chunked: bool,
    /// Bytes left in the current chunk.
    chunk_left: usize,
    line: Vec<u8>,
    /// HTTP chunks read so far: how many writes the server made for the events received.
    pub chunks: usize,
}

impl SseConn {
    /// Opens `GET path` and reads the response head; fails unless it is 200.
    pub async fn connect(addr: SocketAddr, path: &str) -> Result<SseConn> {
        let mut stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut reader = BufReader::with_capacity(16 * 1024, stream);
        let mut head = String::new();
        reader.read_line(&mut head).await?;
        if !head.starts_with("HTTP/1.1 200") {
            bail!("GET {path} answered {:?}", head.trim_end());
        }
        let mut chunked = false;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await? == 0 {
                bail!("GET {path}: the connection closed in the response head");
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
        }
        Ok(SseConn {
            reader,
            chunked,
            chunk_left: 0,
            line: Vec::with_capacity(256),
            chunks: 0,
        })
    }

    /// Fills the buffer; returns how many buffered bytes belong to the body (decoding the chunked
    /// framing), 0 at the end of the stream.
    async fn fill(&mut self) -> Result<usize> {
        if !self.chunked {
            return Ok(self.reader.fill_buf().await?.len());
        }
        if self.chunk_left == 0 {
            let mut size_line = String::new();
            if self.reader.read_line(&mut size_line).await? == 0 {
                return Ok(0);
            }
            if size_line.trim().is_empty() {
                // The CRLF closing the previous chunk.
                size_line.clear();
                if self.reader.read_line(&mut size_line).await? == 0 {
                    return Ok(0);
                }
            }
            let size_text = size_line.trim();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or(""), 16)
                .with_context(|| format!("bad chunk size {size_text:?}"))?;
            if size == 0 {
                return Ok(0);
            }
            self.chunk_left = size;
            self.chunks += 1;
        }
        let available = self.reader.fill_buf().await?.len();
        Ok(available.min(self.chunk_left))
    }

    fn consume(&mut self, n: usize) {
        use tokio::io::AsyncBufRead;
        std::pin::Pin::new(&mut self.reader).consume(n);
        if self.chunked {
            self.chunk_left -= n;
        }
    }

    /// The next event (a `data:` line); None when the server ends the stream.
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>> {
        loop {
            let available = self.fill().await?;
            if available == 0 {
                return Ok(None);
            }
            let (n, complete) = {
                let bytes = &self.reader.buffer()[..available];
                match memchr::memchr(b'\n', bytes) {
                    Some(i) => {
                        self.line.extend_from_slice(&bytes[..i]);
                        (i + 1, true)
                    }
                    None => {
                        self.line.extend_from_slice(bytes);
                        (bytes.len(), false)
                    }
                }
            };
            self.consume(n);
            if complete {
                let event = self.line.strip_prefix(b"data: ").map(parse_event);
                self.line.clear();
                if let Some(event) = event {
                    return Ok(Some(event));
                }
            }
        }
    }
}

/// Pulls `kind` and `at` out of an event's JSON without parsing all of it: at 10 000 subscribers
/// a full parse per receipt would make the bench, not the server, the bottleneck.
fn parse_event(json: &[u8]) -> SseEvent {
    use std::sync::LazyLock;
    static KIND: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new(br#""kind":""#));
    static AT: LazyLock<memchr::memmem::Finder<'static>> = LazyLock::new(|| memchr::memmem::Finder::new(br#""at":""#));
    // The event's own fields come before its `data`, so the searches stop early.
    let field = |key: &memchr::memmem::Finder| -> Option<&str> {
        let start = key.find(json)? + key.needle().len();
        let len = memchr::memchr(b'"', &json[start..])?;
        std::str::from_utf8(&json[start..start + len]).ok()
    };
    SseEvent {
        kind: field(&KIND).unwrap_or("").to_string(),
        at_us: field(&AT)
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.timestamp_micros()),
    }
}

/// Now as Unix microseconds (the same clock Postgres stamps `at` with, on this machine).
pub fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_kind_and_time() {
        let e = parse_event(
            br#"{"ticket_id":"x","ticket_key":"TICKET-1","seq":1,"kind":"ticket.created","agent":null,"at":"2025-01-02T03:04:05.123456Z","data":{"ticket":{"created_at":"2020-01-01T00:00:00Z"}}}"#,
        );
        assert_eq!(e.kind, "ticket.created");
        assert_eq!(e.at_us, Some(1_735_787_045_123_456));
    }
}
