//! An incremental parser of the `text/event-stream` format (the HTML standard's rules): lines end
//! in LF, CRLF or CR; `:` starts a comment; `data:` lines join with `\n`; an empty line dispatches.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The last event ID as of this event (it persists across events, as the standard says).
    pub id: Option<String>,
    /// Whether this event itself carried an `id:` line.
    pub has_id: bool,
    pub event: Option<String>,
    pub data: String,
}

#[derive(Default)]
pub struct Parser {
    buffer: Vec<u8>,
    data: Option<String>,
    event: Option<String>,
    has_id: bool,
    /// The `id:` read so far; it becomes `last_id` when its event is dispatched.
    id_buffer: Option<String>,
    last_id: Option<String>,
    /// The `retry:` hint, in milliseconds.
    pub retry_ms: Option<u64>,
    /// Comments seen (pings).
    pub comments: usize,
}

impl Parser {
    pub fn new() -> Parser {
        Parser::default()
    }

    /// The last event ID seen: the cursor to resume from.
    pub fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Starts a new connection that resumes after `last_id` (a half-read event is dropped).
    pub fn reset_connection(&mut self) {
        self.buffer.clear();
        self.data = None;
        self.event = None;
        self.has_id = false;
        self.id_buffer.clone_from(&self.last_id);
    }

    /// Feeds bytes; returns the events they complete.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Frame> {
        self.buffer.extend_from_slice(chunk);
        let mut frames = vec![];
        let mut start = 0;
        let mut i = 0;
        while i < self.buffer.len() {
            let b = self.buffer[i];
            if b != b'\n' && b != b'\r' {
                i += 1;
                continue;
            }
            // A CR at the end of the buffer may be the first half of a CRLF: wait for more.
            if b == b'\r' && i + 1 == self.buffer.len() {
                break;
            }
            let line = String::from_utf8_lossy(&self.buffer[start..i]).into_owned();
            i += if b == b'\r' && self.buffer[i + 1] == b'\n' {
                2
            } else {
                1
            };
            start = i;
            if let Some(frame) = self.line(&line) {
                frames.push(frame);
            }
        }
        self.buffer.drain(..start);
        frames
    }

    fn line(&mut self, line: &str) -> Option<Frame> {
        if line.is_empty() {
            let has_id = std::mem::take(&mut self.has_id);
            self.last_id.clone_from(&self.id_buffer);
            let event = self.event.take();
            return self.data.take().map(|data| Frame {
                id: self.last_id.clone(),
                has_id,
                event,
                data,
            });
        }
        if line.starts_with(':') {
            self.comments += 1;
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => self.event = Some(value.to_owned()),
            // An id holding NUL is ignored; an empty one clears the cursor.
            "id" if !value.contains('\0') => {
                self.has_id = true;
                self.id_buffer = Some(value.to_owned()).filter(|v| !v.is_empty());
            }
            "retry" => {
                if let Ok(ms) = value.parse() {
                    self.retry_ms = Some(ms);
                }
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> (Parser, Vec<Frame>) {
        let mut parser = Parser::new();
        let mut frames = vec![];
        for chunk in chunks {
            frames.extend(parser.feed(chunk));
        }
        (parser, frames)
    }

    #[test]
    fn events_ids_comments_and_retry() {
        let (parser, frames) = all(&[b"retry: 2000\n\n: ping\n\nid: 1\ndata: {\"a\":1}\n\ndata: live\n\n"]);
        assert_eq!(parser.retry_ms, Some(2000));
        assert_eq!(parser.comments, 1);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].data, "{\"a\":1}");
        assert_eq!((frames[0].id.as_deref(), frames[0].has_id), (Some("1"), true));
        // The cursor persists; this event had no id line of its own.
        assert_eq!((frames[1].id.as_deref(), frames[1].has_id), (Some("1"), false));
        assert_eq!(parser.last_id(), Some("1"));
    }

    #[test]
    fn multi_line_data_and_every_line_ending_across_chunks() {
        let (_, frames) = all(&[
            b"data: one\r",
            b"\ndata:two\r\rdata: x\r\n",
            b"\r\nid: 7\n",
            b"data: y\n\n",
        ]);
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0].data, "one\ntwo");
        assert_eq!(frames[1].data, "x");
        assert_eq!((frames[2].data.as_str(), frames[2].id.as_deref()), ("y", Some("7")));
    }

    #[test]
    fn a_half_read_event_waits_and_a_reset_drops_it() {
        let mut parser = Parser::new();
        assert!(parser.feed(b"id: 3\ndata: {\"par").is_empty());
        assert!(parser.feed(b"tial\":true}").is_empty());
        let frames = parser.feed(b"\n\n");
        assert_eq!(frames[0].data, "{\"partial\":true}");
        assert!(parser.feed(b"id: 4\ndata: cut").is_empty());
        parser.reset_connection();
        assert_eq!(parser.last_id(), Some("3"), "an id counts once its event is complete");
        assert!(parser.feed(b"\n\n").is_empty(), "the half event is gone");
    }

    #[test]
    fn fields_without_a_colon_or_an_event_name() {
        let (_, frames) = all(&[b"event: note\ndata\n\n"]);
        assert_eq!(frames[0].event.as_deref(), Some("note"));
        assert_eq!(frames[0].data, "");
    }
}
