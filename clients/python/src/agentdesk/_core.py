"""What the sync and async clients share: errors, the SSE parser, the rules of both streams,
retry delays and request building. No I/O here."""
from __future__ import annotations

import email.utils
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote

import httpx

FINAL_KINDS = frozenset({"ticket.done", "ticket.failed", "ticket.cancelled"})
"""A ticket's final events: its stream ends after the last of them."""
_REOPENING_KINDS = frozenset({"ticket.created", "ticket.started", "ticket.requeued", "ticket.waiting"})

PROJECT_HEADER = "AgentDesk-Project"


class AgentDeskError(Exception):
    """Every error the client raises."""


class ApiError(AgentDeskError):
    """The API answered with an error: `status` (HTTP), `code` (the API's snake_case code) and
    `message`."""

    def __init__(self, status: int, code: str, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after

    @classmethod
    def from_response(cls, status: int, headers: Mapping[str, str], body: bytes) -> ApiError:
        code, message = f"http_{status}", body[:500].decode("utf-8", "replace").strip()
        try:
            error = json.loads(body)["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            pass
        return cls(status, code, message or f"HTTP {status}", retry_after(headers))


class StreamError(AgentDeskError):
    """A stream gave up after too many consecutive failed connections; `cause` is the last one."""

    def __init__(self, message: str, cause: BaseException, attempts: int) -> None:
        super().__init__(f"{message} after {attempts} attempts: {cause}")
        self.cause = cause
        self.attempts = attempts


@dataclass
class Event:
    """One event of a stream. `seq` is None for live-only events (`text.delta` …), which are never
    replayed; `cursor` is the firehose's resume point (None on ticket streams and live events)."""

    kind: str
    data: Dict[str, Any]
    seq: Optional[int]
    ticket_id: Optional[str]
    ticket_key: Optional[str]
    agent: Optional[str]
    at: Optional[str]
    cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_final(self) -> bool:
        return self.kind in FINAL_KINDS

    @classmethod
    def from_json(cls, d: Dict[str, Any], cursor: Optional[str] = None) -> Event:
        data = d.get("data")
        return cls(
            kind=str(d.get("kind", "")),
            data=data if isinstance(data, dict) else {},
            seq=d.get("seq"),
            ticket_id=d.get("ticket_id"),
            ticket_key=d.get("ticket_key"),
            agent=d.get("agent"),
            at=d.get("at"),
            cursor=cursor,
            raw=d,
        )


@dataclass
class SseMessage:
    data: Optional[str]  # None for a comment (`: ping`)
    id: Optional[str] = None
    event: str = "message"


class SseParser:
    """Incremental `text/event-stream` parser: feed bytes, get complete messages. A message cut
    short by the connection is never returned."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: List[str] = []
        self._id: Optional[str] = None
        self._event = ""
        self.retry_ms: Optional[int] = None

    def feed(self, chunk: bytes) -> Iterator[SseMessage]:
        self._buf += chunk
        while True:
            cut = _line_end(self._buf)
            if cut is None:
                return
            end, after = cut
            line = self._buf[:end].decode("utf-8", "replace")
            self._buf = self._buf[after:]
            message = self._line(line)
            if message is not None:
                yield message

    def _line(self, line: str) -> Optional[SseMessage]:
        if line == "":
            if not self._data:
                # An `id:` alone (the firehose's starting position): a place to resume from.
                id_only = self._id
                self._id, self._event = None, ""
                return None if id_only is None else SseMessage(None, id_only)
            message = SseMessage("\n".join(self._data), self._id, self._event or "message")
            self._data, self._id, self._event = [], None, ""
            return message
        if line.startswith(":"):
            return SseMessage(None)
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "event":
            self._event = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None


def _line_end(buf: bytes) -> Optional[tuple[int, int]]:
    """Where the first line of `buf` ends and the next begins (CRLF, LF or CR); None until known.
    A CR at the very end waits for the next byte, which may be its LF."""
    lf, cr = buf.find(b"\n"), buf.find(b"\r")
    if cr == -1 or (lf != -1 and lf < cr):
        return None if lf == -1 else (lf, lf + 1)
    if cr + 1 == len(buf):
        return None
    return (cr, cr + 2) if buf[cr + 1 : cr + 2] == b"\n" else (cr, cr + 1)


def parse_event(message: SseMessage, cursor: Optional[str] = None) -> Optional[Event]:
    if message.data is None:
        return None
    try:
        d = json.loads(message.data)
    except ValueError:
        return None
    return Event.from_json(d, cursor) if isinstance(d, dict) else None


class TicketStreamState:
    """A ticket stream across connections: yields each persisted event once, in seq order, and
    knows when the stream is over."""

    def __init__(self, after: Optional[int] = None) -> None:
        self.last = after or 0
        # Whether the latest status event seen is final. The server ends the stream once it has
        # sent everything the finished ticket logged (a cancel may be followed by the text it
        # kept), so a clean end in this state is the end, and any other end is a cut.
        self.finished = False

    def headers(self) -> Dict[str, str]:
        return {"Last-Event-ID": str(self.last)} if self.last > 0 else {}

    def accept(self, message: SseMessage) -> Optional[Event]:
        event = parse_event(message)
        if event is None:
            return None
        if event.seq is None:
            return event  # live-only: passed through, never replayed
        if event.seq <= self.last:
            return None
        self.last = event.seq
        if event.kind in FINAL_KINDS:
            self.finished = True
        elif event.kind in _REOPENING_KINDS:
            self.finished = False
        return event

    def ended(self, clean: bool) -> bool:
        return clean and self.finished


class FirehoseState:
    """The firehose across connections: resumes after the last cursor it delivered."""

    def __init__(self, cursor: Optional[str] = None) -> None:
        self.cursor = cursor

    def headers(self) -> Dict[str, str]:
        return {"Last-Event-ID": self.cursor} if self.cursor else {}

    def accept(self, message: SseMessage) -> Optional[Event]:
        # A stream opened without a cursor starts with its position, so a cut before the first
        # event loses nothing either.
        if message.data is None and message.id:
            self.cursor = message.id
            return None
        event = parse_event(message, message.id)
        if event is not None and message.id:
            self.cursor = message.id
        return event


class Reconnects:
    """Counts consecutive failed connections and says how long to wait before the next one:
    exponential backoff with jitter, bounded, and never shorter than the server's Retry-After."""

    def __init__(self, max_failures: int, base: float, cap: float) -> None:
        self.max_failures = max_failures
        self.base = base
        self.cap = cap
        self.failures = 0

    def progress(self) -> None:
        self.failures = 0

    def failed(self, why: BaseException, what: str) -> float:
        """Records a failure; the delay before the next try, or StreamError when it is time to
        stop. A 4xx other than 429 is not worth retrying and is raised as it is."""
        if isinstance(why, ApiError) and why.status < 500 and why.status != 429:
            raise why
        self.failures += 1
        if self.failures > self.max_failures:
            raise StreamError(f"{what}: gave up", why, self.failures) from why
        delay = min(self.cap, self.base * 2.0 ** (self.failures - 1)) * random.uniform(0.5, 1.0)
        if isinstance(why, ApiError) and why.retry_after is not None:
            delay = max(delay, why.retry_after)
        return delay

    def first_delay(self) -> float:
        """Before reconnecting after a connection that delivered events: none."""
        return 0.0


def retry_after(headers: Mapping[str, str]) -> Optional[float]:
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


Params = Dict[str, Union[str, int]]


def comma(value: Union[None, str, List[str]]) -> Optional[str]:
    if value is None:
        return None
    return value if isinstance(value, str) else ",".join(value)


def params(**kw: Union[None, str, int, List[str]]) -> Params:
    out: Params = {}
    for k, v in kw.items():
        if isinstance(v, list):
            v = comma(v)
        if v is not None:
            out[k] = v
    return out


def create_body(
    task: Any,
    labels: Optional[List[str]],
    priority: Optional[int],
    schema: Any,
    parent: Optional[str],
    metadata: Optional[Dict[str, Any]],
    max_attempts: Optional[int],
    extra: Mapping[str, Any],
) -> Dict[str, Any]:
    body: Dict[str, Any] = {"task": task}
    for k, v in (
        ("labels", labels),
        ("priority", priority),
        ("schema", schema),
        ("parent", parent),
        ("metadata", metadata),
        ("max_attempts", max_attempts),
    ):
        if v is not None:
            body[k] = v
    body.update(extra)
    return body


def present(**fields: Any) -> Dict[str, Any]:
    """The fields that were given (not None), as a request body."""
    return {k: v for k, v in fields.items() if v is not None}


def decision_request(ticket_path: str, approve: bool, call_id: Optional[str], reason: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    """One call's answer, or (without `call_id`) every pending call's: the path and the body."""
    if call_id is not None:
        return ticket_path + "/approvals/" + quote(call_id, safe=""), present(approve=approve, reason=reason)
    return ticket_path + "/approvals", present(**{"approve_all" if approve else "deny_all": True}, reason=reason)


def json_object(value: Any) -> Dict[str, Any]:
    """An answer that must be a JSON object (an experiment)."""
    if not isinstance(value, dict):
        raise AgentDeskError(f"expected a JSON object, got {type(value).__name__}")
    return value


def question_id(ticket: Mapping[str, Any]) -> str:
    """The id of the ticket's waiting question; AgentDeskError when none waits."""
    pending = ticket.get("pending_question")
    if not pending:
        raise AgentDeskError(f"{ticket.get('key')} waits for no answer to a question")
    return str(pending["id"])


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


@dataclass
class Settings:
    """Connection settings shared by both clients."""

    base_url: str
    token: Optional[str] = None
    project: Optional[str] = None
    timeout: float = 30.0
    max_retries: int = 3
    """Retries of a request answered 429 or 503 (or not answered at all, when repeating it is safe)."""
    max_retry_wait: float = 60.0
    """A Retry-After longer than this is not waited out: the error is raised at once."""
    stream_max_failures: int = 8
    """Consecutive failed connections after which a stream raises StreamError."""
    backoff_base: float = 0.5
    backoff_cap: float = 10.0
    stream_read_timeout: float = 60.0
    """A stream that sends nothing this long (the desk pings every 15 s) is reconnected."""

    def __post_init__(self) -> None:
        base = self.base_url.rstrip("/")
        self.base_url = base[: -len("/v1")] if base.endswith("/v1") else base

    def headers(self) -> Dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": "agentdesk-python"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if self.project:
            h[PROJECT_HEADER] = self.project
        return h

    def stream_timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=self.stream_read_timeout)

    def retry_delay(self, error: ApiError, attempt: int) -> Optional[float]:
        """How long to wait before repeating a request that got `error`; None: raise it."""
        if error.status not in (429, 503) or attempt >= self.max_retries:
            return None
        delay = error.retry_after
        if delay is None:
            delay = min(self.backoff_cap, self.backoff_base * 2.0**attempt)
        return delay if delay <= self.max_retry_wait else None

    def transport_retry_delay(self, attempt: int) -> Optional[float]:
        if attempt >= self.max_retries:
            return None
        return min(self.backoff_cap, self.backoff_base * 2.0**attempt)
