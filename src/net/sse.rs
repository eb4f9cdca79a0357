//! The one parser of the `text/event-stream` format (the HTML standard's rules), for every stream
//! the desk reads: a model's streamed response, the client's `watch`, the tests' readers.
//!
//! Bytes arrive in arbitrary network-sized pieces: lines (and multi-byte UTF-8 characters) may be
//! split anywhere, so only complete lines are decoded. Lines end in LF, CRLF or CR; `:` starts a
//! comment; `data:` lines join with `\n`; an empty line dispatches the event.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The last event ID as of this event (it persists across events, as the standard says).
    pub id: Option<String>,
    /// Whether this event itself carried an `id:` line.
    pub has_id: bool,
    /// The `event:` field, when the server sent one (Anthropic does, OpenAI does not).
    pub event: Option<String>,
    pub data: String,
}

#[derive(Default)]
pub struct Parser {
    buffer: Vec<u8>,
    /// How much of `buffer` was searched for a line end already: only new bytes are searched (a
    /// long unfinished line searched again on every piece would cost time quadratic in its
    /// length).
    searched: usize,
    data: Option<String>,
    event: Option<String>,
    has_id: bool,
    /// The `id:` read so far; it becomes `last_id` when its event is dispatched.
    id_buffer: Option<String>,
    last_id: Option<String>,
    /// The `retry:` hint, in milliseconds.
    pub retry_ms: Option<u64>,
    /// Comments seen (pings, keep-alives).
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
        self.searched = 0;
        self.data = None;
        self.event = None;
        self.has_id = false;
        self.id_buffer.clone_from(&self.last_id);
    }

    /// Feeds a piece of the body; adds the events it completes to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Frame>) {
        // Taken out while its lines are read, so a line is borrowed from it, not copied.
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.extend_from_slice(chunk);
        let (mut start, mut at) = (0, self.searched);
        let mut cr_at_end = false;
        while let Some(offset) = buffer[at..].iter().position(|&b| b == b'\n' || b == b'\r') {
            let end = at + offset;
            let width = match (buffer[end], buffer.get(end + 1)) {
                (b'\r', Some(b'\n')) => 2,
                // A CR that ends the piece may be the first half of a CRLF: wait for more.
                (b'\r', None) => {
                    (at, cr_at_end) = (end, true);
                    break;
                }
                _ => 1,
            };
            self.line(&String::from_utf8_lossy(&buffer[start..end]), out);
            start = end + width;
            at = start;
        }
        if !cr_at_end {
            at = buffer.len();
        }
        buffer.drain(..start);
        self.searched = at - start;
        self.buffer = buffer;
    }

    /// End of the body: a last event without its terminating blank line still counts.
    pub fn finish(&mut self, out: &mut Vec<Frame>) {
        let rest = std::mem::take(&mut self.buffer);
        self.searched = 0;
        if !rest.is_empty() {
            let rest = rest.strip_suffix(b"\r").unwrap_or(&rest);
            self.line(&String::from_utf8_lossy(rest), out);
        }
        self.line("", out);
    }

    fn line(&mut self, line: &str, out: &mut Vec<Frame>) {
        if line.is_empty() {
            let has_id = std::mem::take(&mut self.has_id);
            self.last_id.clone_from(&self.id_buffer);
            let event = self.event.take();
            if let Some(data) = self.data.take() {
                out.push(Frame {
                    id: self.last_id.clone(),
                    has_id,
                    event,
                    data,
                });
            }
            return;
        }
        if line.starts_with(':') {
            self.comments += 1;
            return;
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> (Parser, Vec<Frame>) {
        let mut parser = Parser::new();
        let mut frames = vec![];
        for chunk in chunks {
            parser.feed(chunk, &mut frames);
        }
        (parser, frames)
    }

    fn finished(chunks: &[&[u8]]) -> Vec<Frame> {
        let (mut parser, mut frames) = all(chunks);
        parser.finish(&mut frames);
        frames
    }

    fn frame(event: Option<&str>, data: &str) -> Frame {
        Frame {
            id: None,
            has_id: false,
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn splits_anywhere_and_handles_crlf_and_comments() {
        let body = "event: ping\r\ndata: {\"a\":1}\r\n\r\n: keep-alive\n\ndata: é\ndata: x\r\rdata: [DONE]";
        let bytes = body.as_bytes();
        let whole = finished(&[bytes]);
        assert_eq!(
            whole,
            vec![
                frame(Some("ping"), "{\"a\":1}"),
                frame(None, "é\nx"),
                frame(None, "[DONE]"),
            ]
        );
        for split in 1..bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(finished(&[a, b]), whole, "split at {split}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(finished(&singles), whole);
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
    fn an_id_without_data_moves_the_cursor() {
        let (parser, frames) = all(&[b"id: 5\n\n"]);
        assert!(frames.is_empty());
        assert_eq!(parser.last_id(), Some("5"));
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
        let mut frames = vec![];
        parser.feed(b"id: 3\ndata: {\"par", &mut frames);
        parser.feed(b"tial\":true}", &mut frames);
        assert!(frames.is_empty());
        parser.feed(b"\n\n", &mut frames);
        assert_eq!(frames[0].data, "{\"partial\":true}");
        frames.clear();
        parser.feed(b"id: 4\ndata: cut", &mut frames);
        assert!(frames.is_empty());
        parser.reset_connection();
        assert_eq!(parser.last_id(), Some("3"), "an id counts once its event is complete");
        parser.feed(b"\n\n", &mut frames);
        assert!(frames.is_empty(), "the half event is gone");
    }

    #[test]
    fn fields_without_a_colon_or_an_event_name() {
        let (_, frames) = all(&[b"event: note\ndata\n\n"]);
        assert_eq!(frames[0].event.as_deref(), Some("note"));
        assert_eq!(frames[0].data, "");
    }
}
