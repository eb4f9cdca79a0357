//! Limits on what a peer on the network can make this process hold in memory: how much of a body
//! is read, and how large one server-sent event may grow before the stream is given up.

use bytes::Bytes;
use futures::{Stream, StreamExt};

/// Reads at most `limit` bytes of a body (the rest is left unread); `cut` says whether there was
/// more. For bodies only a prefix of which is wanted: error answers, messages.
pub async fn read_prefix(response: reqwest::Response, limit: usize) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut response = response;
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// The size of the server-sent event a body is in the middle of: the bytes since the last blank
/// line (line ends not counted).
#[derive(Debug)]
pub struct SseEventSize {
    current: usize,
    at_line_start: bool,
}

impl Default for SseEventSize {
    fn default() -> Self {
        SseEventSize {
            current: 0,
            at_line_start: true,
        }
    }
}

impl SseEventSize {
    /// Feeds the next piece of the body; `Err` once the current event is larger than `limit`.
    pub fn feed(&mut self, bytes: &[u8], limit: usize) -> Result<(), EventTooLarge> {
        for &b in bytes {
            match b {
                b'\n' => {
                    if self.at_line_start {
                        self.current = 0;
                    }
                    self.at_line_start = true;
                }
                b'\r' => {}
                _ => {
                    self.at_line_start = false;
                    self.current += 1;
                }
            }
        }
        if self.current > limit {
            return Err(EventTooLarge { limit });
        }
        Ok(())
    }
}

/// One server-sent event grew past the limit: the stream is given up rather than buffered.
#[derive(Debug, thiserror::Error)]
#[error("a server-sent event larger than {limit} bytes")]
pub struct EventTooLarge {
    pub limit: usize,
}

/// A body of server-sent events that ends with an error once one event is larger than `limit`.
pub fn limit_sse_events<E>(
    body: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
    limit: usize,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static
where
    E: std::error::Error + Send + Sync + 'static,
{
    let mut size = SseEventSize::default();
    let mut failed = false;
    body.map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        size.feed(&chunk, limit).map_err(std::io::Error::other)?;
        Ok(chunk)
    })
    // Nothing after the first error: the stream is over.
    .take_while(move |item| {
        let go = !failed;
        failed |= item.is_err();
        futures::future::ready(go)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_measured_from_the_last_blank_line_across_pieces() {
        let mut size = SseEventSize::default();
        assert!(size.feed(b"data: 12345\n", 12).is_ok(), "11 bytes");
        assert!(size.feed(b"\r\n", 12).is_ok(), "a blank line ends the event");
        assert!(size.feed(b"data: 1\r", 12).is_ok());
        assert!(
            size.feed(b"\ndata: 2\n", 12).is_err(),
            "two lines of one event: 14 bytes"
        );
        let mut size = SseEventSize::default();
        for _ in 0..1000 {
            assert!(size.feed(b"data: 1\n\n", 12).is_ok(), "many small events never add up");
        }
        assert!(size.feed(&[b'x'; 13], 12).is_err(), "one line without an end");
    }

    #[tokio::test]
    async fn the_stream_stops_at_the_first_oversized_event() {
        let pieces: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"data: a\n\n")),
            Ok(Bytes::from(vec![b'x'; 100])),
            Ok(Bytes::from_static(b"\n\ndata: b\n\n")),
        ];
        let out: Vec<_> = limit_sse_events(futures::stream::iter(pieces), 50).collect().await;
        assert_eq!(out.len(), 2);
        assert!(out[0].is_ok());
        assert!(out[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("larger than 50 bytes"));
    }
}
