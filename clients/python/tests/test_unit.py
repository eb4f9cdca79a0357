"""The client against a stand-in desk (tests/double.py): streams cut at every byte, retries,
errors, headers and pages."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Iterator, List

import pytest

from agentdesk import AgentDesk, ApiError, AsyncAgentDesk, StreamError
from agentdesk._core import SseParser

from double import Double, event, frame, ticket_json

FAST = dict(backoff_base=0.001, backoff_cap=0.01)


@pytest.fixture
def double() -> Iterator[Double]:
    d = Double()
    yield d
    d.close()


def done_ticket(d: Double) -> None:
    d.ticket_events = [
        event(1, "ticket.created"),
        event(2, "ticket.started", {"agent": "default", "attempt": 1}),
        event(3, "request.started", {"model": "m"}),
        event(None, "text.delta", {"delta": "Hel"}),
        event(None, "text.delta", {"delta": "lo"}),
        event(4, "request.finished", {"model": "m"}),
        event(5, "comment.created", {"comment": {}}),
        event(6, "ticket.done", {"result": "ok"}),
    ]


def full_length(d: Double) -> int:
    return len(d.ticket_body(0, True)[0])


def check_once_in_order(events: List[Any], last: int) -> None:
    seqs = [e.seq for e in events if e.seq is not None]
    assert seqs == list(range(1, last + 1)), seqs
    deltas = [e.data["delta"] for e in events if e.seq is None]
    assert len(deltas) == len(set(deltas)), deltas


@pytest.mark.parametrize("mode", ["abrupt", "clean"])
def test_ticket_stream_cut_at_every_byte(double: Double, mode: str) -> None:
    done_ticket(double)
    double.overlap = 2
    size = full_length(double)
    with AgentDesk(double.url, **FAST) as desk:
        for at in range(size + 1):
            double.cuts = [(mode, at)]
            double.stream_connections = 0
            events = list(desk.tickets.stream("TICKET-1"))
            check_once_in_order(events, 6)
            assert events[-1].kind == "ticket.done", (at, events[-1])
            # The cut connection and at most one more: a reconnect resumes, it does not restart.
            assert double.stream_connections <= 2, (at, double.stream_connections)


def test_ticket_stream_cut_twice_at_every_pair_of_frames(double: Double) -> None:
    done_ticket(double)
    body = double.ticket_body(0, True)[0]
    frames = [i + 2 for i in range(len(body)) if body[i : i + 2] == b"\n\n"]
    with AgentDesk(double.url, **FAST) as desk:
        for a in frames:
            for b in frames:
                double.cuts = [("abrupt", a), ("clean", b)]
                double.stream_connections = 0
                check_once_in_order(list(desk.tickets.stream("TICKET-1")), 6)


def test_a_cancel_followed_by_its_text_is_read_to_the_end(double: Double) -> None:
    """A cancelled ticket's stream may carry the assistant text the cancel kept after
    `ticket.cancelled`: a cut between them resumes and gets it."""
    double.ticket_events = [
        event(1, "ticket.created"),
        event(2, "ticket.started"),
        event(3, "ticket.cancelled"),
        event(4, "comment.created", {"comment": {"author": "assistant"}}),
    ]
    size = full_length(double)
    with AgentDesk(double.url, **FAST) as desk:
        for at in range(size + 1):
            double.cuts = [("abrupt", at)]
            double.stream_connections = 0
            events = list(desk.tickets.stream("TICKET-1"))
            check_once_in_order(events, 4)


def test_a_stream_resumes_from_after(double: Double) -> None:
    done_ticket(double)
    with AgentDesk(double.url, **FAST) as desk:
        events = list(desk.tickets.stream("TICKET-1", after=4))
    assert [e.seq for e in events if e.seq] == [5, 6]
    assert double.requests[-1][2].get("Last-Event-ID") == "4"


def test_async_ticket_stream_cut_at_every_seventh_byte(double: Double) -> None:
    done_ticket(double)
    double.overlap = 2
    size = full_length(double)

    async def run() -> None:
        async with AsyncAgentDesk(double.url, **FAST) as desk:
            for at in range(0, size + 1, 7):
                for mode in ("abrupt", "clean"):
                    double.cuts = [(mode, at)]
                    double.stream_connections = 0
                    events = [e async for e in desk.tickets.stream("TICKET-1")]
                    check_once_in_order(events, 6)

    asyncio.run(run())


def firehose(d: Double) -> None:
    d.firehose = [(f"7-{i}", event(1, "ticket.created", key=f"TICKET-{i}")) for i in range(1, 6)]


def test_firehose_resumes_from_its_cursor_at_every_byte(double: Double) -> None:
    firehose(double)
    body = b"retry: 10\n\n" + b"".join(frame(e, c) for c, e in double.firehose)
    with AgentDesk(double.url, **FAST, stream_read_timeout=5) as desk:
        for at in range(0, len(body) + 1, 3):
            for mode in ("abrupt", "clean"):
                double.cuts = [(mode, at)]
                double.stream_connections = 0
                got = []
                stream = desk.events.stream(kind="ticket.*")
                for ev in stream:
                    got.append((ev.cursor, ev.ticket_key))
                    if len(got) == 5:
                        break
                stream.close()  # type: ignore[attr-defined]
                assert got == [(c, e["ticket_key"]) for c, e in double.firehose], (at, mode, got)


def test_firehose_sends_the_cursor_given(double: Double) -> None:
    firehose(double)
    with AgentDesk(double.url, **FAST) as desk:
        stream = desk.events.stream(cursor="7-3")
        assert next(stream).cursor == "7-4"
        stream.close()  # type: ignore[attr-defined]
    method, path, headers, _ = double.requests[-1]
    assert headers.get("Last-Event-ID") == "7-3"


def test_a_stream_gives_up_after_consecutive_failures_and_says_why(double: Double) -> None:
    double.answer("GET", "/v1/tickets/TICKET-1/events", 503, {"error": {"code": "unavailable", "message": "down"}})
    with AgentDesk(double.url, stream_max_failures=3, **FAST) as desk:
        with pytest.raises(StreamError) as caught:
            list(desk.tickets.stream("TICKET-1"))
    assert caught.value.attempts == 4
    assert isinstance(caught.value.cause, ApiError) and caught.value.cause.status == 503
    assert double.stream_connections == 4


def test_a_stream_of_an_unknown_ticket_is_an_api_error(double: Double) -> None:
    double.answer("GET", "/v1/tickets/NOPE-1/events", 404, {"error": {"code": "not_found", "message": "no ticket"}})
    with AgentDesk(double.url, **FAST) as desk:
        with pytest.raises(ApiError) as caught:
            list(desk.tickets.stream("NOPE-1"))
    assert (caught.value.status, caught.value.code) == (404, "not_found")
    assert double.stream_connections == 1


def test_a_stream_that_cannot_connect_gives_up() -> None:
    with AgentDesk("http://127.0.0.1:9", stream_max_failures=2, **FAST) as desk:
        with pytest.raises(StreamError):
            list(desk.tickets.stream("TICKET-1"))


def test_create_sends_token_project_and_a_generated_idempotency_key(double: Double) -> None:
    double.answer("POST", "/v1/tickets", 201, ticket_json())
    with AgentDesk(double.url + "/", token="s3cret", project="ops") as desk:
        t = desk.tickets.create(task="hello", labels=["a"])
        desk.tickets.create(task="hello", idempotency_key="k-1")
    assert (t.id, t.key, t.status) == ("0193aaaa-0000-7000-8000-000000000001", "TICKET-1", "todo")
    first, second = double.requests[0][2], double.requests[1][2]
    assert first["Authorization"] == "Bearer s3cret"
    assert first["AgentDesk-Project"] == "ops"
    assert len(first["Idempotency-Key"]) == 36
    assert second["Idempotency-Key"] == "k-1"
    assert json.loads(double.requests[0][3]) == {"task": "hello", "labels": ["a"]}


def test_429_is_retried_after_retry_after_with_the_same_key(double: Double) -> None:
    double.answer("POST", "/v1/tickets", 429, {"error": {"code": "rate_limited", "message": "slow down"}}, {"Retry-After": "1"})
    double.answer("POST", "/v1/tickets", 201, ticket_json())
    with AgentDesk(double.url) as desk:
        started = time.monotonic()
        desk.tickets.create(task="x")
        assert time.monotonic() - started >= 0.95
    keys = {r[2]["Idempotency-Key"] for r in double.requests}
    assert len(double.requests) == 2 and len(keys) == 1


def test_503_is_retried_with_backoff_and_then_raised(double: Double) -> None:
    double.answer("GET", "/v1/tickets/TICKET-1", 503, {"error": {"code": "unavailable", "message": "busy"}})
    with AgentDesk(double.url, max_retries=2, **FAST) as desk:
        with pytest.raises(ApiError) as caught:
            desk.tickets.get("TICKET-1")
    assert (caught.value.status, caught.value.code, caught.value.message) == (503, "unavailable", "busy")
    assert len(double.requests) == 3


def test_a_retry_after_beyond_the_limit_is_raised_at_once(double: Double) -> None:
    double.answer("POST", "/v1/tickets", 429, {"error": {"code": "quota_exceeded", "message": "tomorrow"}}, {"Retry-After": "36000"})
    with AgentDesk(double.url) as desk:
        with pytest.raises(ApiError) as caught:
            desk.tickets.create(task="x")
    assert caught.value.code == "quota_exceeded" and caught.value.retry_after == 36000
    assert len(double.requests) == 1


def test_errors_carry_the_api_code(double: Double) -> None:
    double.answer("POST", "/v1/tickets/TICKET-1/retry", 409, {"error": {"code": "conflict", "message": "not failed"}})
    double.answer("GET", "/v1/tickets/TICKET-9", 500, b"plain text")
    with AgentDesk(double.url) as desk:
        with pytest.raises(ApiError) as caught:
            desk.tickets.retry("TICKET-1")
        assert (caught.value.status, caught.value.code, caught.value.message) == (409, "conflict", "not failed")
        with pytest.raises(ApiError) as caught:
            desk.tickets.get("TICKET-9")
        assert (caught.value.status, caught.value.code, caught.value.message) == (500, "http_500", "plain text")
    assert len(double.requests) == 2, "409 and 500 are not retried"


def test_list_follows_next_cursor(double: Double) -> None:
    def page(handler: Any) -> Any:
        after = "cursor=p2" in handler.path
        keys = ["TICKET-3"] if after else ["TICKET-1", "TICKET-2"]
        return {"items": [ticket_json(k, "done") for k in keys], "next_cursor": None if after else "p2"}

    double.answer("GET", "/v1/tickets", 200, page)
    with AgentDesk(double.url) as desk:
        keys = [t.key for t in desk.tickets.list(status=["done", "failed"], label="x")]
    assert keys == ["TICKET-1", "TICKET-2", "TICKET-3"]
    assert "status=done%2Cfailed" in double.requests[0][1] and "label=x" in double.requests[0][1]


def test_async_client_has_the_same_names(double: Double) -> None:
    double.answer("POST", "/v1/tickets", 201, ticket_json())
    double.answer("GET", "/v1/tickets", 200, {"items": [ticket_json()], "next_cursor": None})
    double.answer("POST", "/v1/tickets/TICKET-1/cancel", 200, ticket_json(status="cancelled"))
    double.answer(
        "POST",
        "/v1/tickets/TICKET-1/comments",
        201,
        {"id": "c", "ticket_id": "t", "seq": 1, "author": "user", "content": [{"type": "text", "text": "hi"}], "created_at": "x"},
    )
    double.answer("GET", "/v1/tickets/TICKET-1", 429, {"error": {"code": "rate_limited", "message": "m"}}, {"Retry-After": "0"})
    double.answer("GET", "/v1/tickets/TICKET-1", 200, ticket_json())

    async def run() -> None:
        async with AsyncAgentDesk(double.url, token="t", project="p") as desk:
            t = await desk.tickets.create(task="x")
            assert t.key == "TICKET-1"
            assert [x.key async for x in desk.tickets.list(status="todo")] == ["TICKET-1"]
            assert (await desk.tickets.get("TICKET-1")).key == "TICKET-1"
            assert (await desk.tickets.cancel("TICKET-1")).status == "cancelled"
            assert (await desk.tickets.comment("TICKET-1", "hi")).content[0]["text"] == "hi"

    asyncio.run(run())
    assert all(r[2].get("AgentDesk-Project") == "p" for r in double.requests)


def test_sse_parser_handles_every_line_ending_and_split() -> None:
    text = b": ping\r\nid: 1\r\ndata: a\r\ndata: b\r\n\r\nid: 2\rdata: c\r\rdata: d\n\n"
    for size in range(1, len(text) + 1):
        parser = SseParser()
        got = []
        for i in range(0, len(text), size):
            got.extend((m.id, m.data) for m in parser.feed(text[i : i + size]))
        assert got == [(None, None), ("1", "a\nb"), ("2", "c"), (None, "d")], size


def test_an_id_alone_is_the_firehose_position_to_resume_from() -> None:
    from agentdesk._core import FirehoseState

    parser = SseParser()
    messages = list(parser.feed(b"retry: 1000\n\nid: 7-3\n\n"))
    assert [(m.id, m.data) for m in messages] == [("7-3", None)]
    state = FirehoseState()
    assert state.accept(messages[0]) is None, "no event"
    assert state.headers() == {"Last-Event-ID": "7-3"}
