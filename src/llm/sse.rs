//! Incremental Server-Sent Events parser.
//!
//! Bytes arrive in arbitrary network-sized pieces: lines (and multi-byte UTF-8 characters) may be
//! split anywhere, so only complete lines are decoded.

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field, when the server sent one (Anthropic does, OpenAI does not).
    pub event: Option<String>,
    pub data: String,
}

#[derive(Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a piece of the body; returns the events completed by it.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        // Only the new bytes are searched for a line end: the rest of a long unfinished line
        // was searched already (rescanning it on every piece would make one long line cost
        // time quadratic in its length).
        let mut search_from = self.buf.len();
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(pos) = self.buf[search_from..].iter().position(|&b| b == b'\n') {
            let end = search_from + pos;
            let mut line = &self.buf[start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            self.line(&line, out);
            start = end + 1;
            search_from = start;
        }
        self.buf.drain(..start);
    }

    /// End of body: a final event without its terminating blank line still counts.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let line = String::from_utf8_lossy(&rest);
            let line = line.trim_end_matches('\r').to_string();
            self.line(&line, out);
        }
        self.dispatch(out);
    }

    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            // Comment, e.g. ": keep-alive" or ": OPENROUTER PROCESSING".
            return;
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {} // id, retry and unknown fields carry nothing for us
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if let Some(data) = self.data.take() {
            out.push(SseEvent { event, data });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_pieces(pieces: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for piece in pieces {
            p.feed(piece, &mut out);
        }
        p.finish(&mut out);
        out
    }

    #[test]
    fn splits_anywhere_and_handles_crlf_and_comments() {
        let body = "event: ping\r\ndata: {\"a\":1}\r\n\r\n: keep-alive\n\ndata: é\ndata: x\n\ndata: [DONE]";
        let bytes = body.as_bytes();
        let whole = parse_pieces(&[bytes]);
        assert_eq!(
            whole,
            vec![
                SseEvent {
                    event: Some("ping".into()),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: None,
                    data: "é\nx".into()
                },
                SseEvent {
                    event: None,
                    data: "[DONE]".into()
                },
            ]
        );
        for split in 1..bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(parse_pieces(&[a, b]), whole, "split at {split}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(parse_pieces(&singles), whole);
    }
}
