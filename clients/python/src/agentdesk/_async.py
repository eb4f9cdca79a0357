"""The asyncio client: the same names as AgentDesk, as coroutines and async iterators."""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, List, Optional, Union
from urllib.parse import quote

import httpx

from ._core import (
    AgentDeskError,
    ApiError,
    Event,
    FirehoseState,
    Params,
    Reconnects,
    Settings,
    SseParser,
    TicketStreamState,
    create_body,
    decision_request,
    json_object,
    present,
    question_id as pending_question_id,
    new_idempotency_key,
    params,
)
from .types import Comment, Ticket

StrList = Union[None, str, List[str]]


class AsyncAgentDesk:
    """A client of one desk: `async with AsyncAgentDesk("http://127.0.0.1:8080") as desk:`.

    `project` is sent as the `AgentDesk-Project` header, `token` as a bearer token. Keyword
    settings (`timeout`, `max_retries`, `stream_max_failures`, …) are those of `Settings`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        token: Optional[str] = None,
        project: Optional[str] = None,
        *,
        http_client: Optional[httpx.AsyncClient] = None,
        **settings: Any,
    ) -> None:
        self.settings = Settings(base_url, token, project, **settings)
        self._http = http_client or httpx.AsyncClient(timeout=self.settings.timeout)
        self._owns_http = http_client is None
        self.tickets = AsyncTickets(self)
        self.events = AsyncEvents(self)
        self.experiments = AsyncExperiments(self)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncAgentDesk:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Params] = None,
        json: Any = None,
        headers: Optional[Dict[str, str]] = None,
        safe_to_repeat: Optional[bool] = None,
    ) -> Any:
        """One API call (`path` from the root: `/v1/stats`), retried on 429 and 503 as the
        settings say; the decoded JSON answer, or ApiError."""
        s = self.settings
        repeat = method == "GET" if safe_to_repeat is None else safe_to_repeat
        attempt = 0
        while True:
            try:
                resp = await self._http.request(
                    method, s.base_url + path, params=params, json=json, headers={**s.headers(), **(headers or {})}
                )
            except httpx.RequestError as exc:
                delay = s.transport_retry_delay(attempt) if repeat else None
                if delay is None:
                    raise AgentDeskError(f"{method} {path}: {exc!r}") from exc
            else:
                if resp.status_code < 400:
                    return resp.json() if resp.content else None
                error = ApiError.from_response(resp.status_code, resp.headers, resp.content)
                delay = s.retry_delay(error, attempt)
                if delay is None:
                    raise error
            await asyncio.sleep(delay)
            attempt += 1

    async def _pages(self, path: str, query: Params) -> AsyncIterator[Dict[str, Any]]:
        query = dict(query)
        while True:
            page = await self.request("GET", path, params=query)
            for item in page["items"]:
                yield item
            cursor = page.get("next_cursor")
            if not cursor:
                return
            query["cursor"] = cursor

    async def _sse(
        self, path: str, query: Params, state: Union[TicketStreamState, FirehoseState]
    ) -> AsyncIterator[Event]:
        s = self.settings
        reconnects = Reconnects(s.stream_max_failures, s.backoff_base, s.backoff_cap)
        delay = 0.0
        while True:
            if delay > 0:
                await asyncio.sleep(delay)
            why: Optional[BaseException] = None
            try:
                headers = {**s.headers(), "Accept": "text/event-stream", **state.headers()}
                async with self._http.stream(
                    "GET", s.base_url + path, params=query, headers=headers, timeout=s.stream_timeout()
                ) as resp:
                    if resp.status_code != 200:
                        raise ApiError.from_response(resp.status_code, resp.headers, await resp.aread())
                    parser = SseParser()
                    async for chunk in resp.aiter_bytes():
                        for message in parser.feed(chunk):
                            reconnects.progress()
                            event = state.accept(message)
                            if event is not None:
                                yield event
            except (httpx.RequestError, ApiError) as exc:
                why = exc
            if isinstance(state, TicketStreamState):
                if state.ended(why is None):
                    return
                why = why or AgentDeskError("the stream ended before the ticket's final event")
            else:
                why = why or AgentDeskError("the stream ended")
            delay = reconnects.failed(why, f"GET {path}")


class AsyncTickets:
    def __init__(self, desk: AsyncAgentDesk) -> None:
        self._desk = desk

    async def create(
        self,
        task: Any,
        labels: Optional[List[str]] = None,
        *,
        idempotency_key: Optional[str] = None,
        priority: Optional[int] = None,
        schema: Any = None,
        parent: Optional[str] = None,
        metadata: Optional[Dict[str, Any]] = None,
        max_attempts: Optional[int] = None,
        **extra: Any,
    ) -> Ticket:
        """Creates a ticket. The `Idempotency-Key` (generated when not given) makes the retries
        safe: a repeat returns the first ticket."""
        body = create_body(task, labels, priority, schema, parent, metadata, max_attempts, extra)
        key = idempotency_key or new_idempotency_key()
        answer = await self._desk.request(
            "POST", "/v1/tickets", json=body, headers={"Idempotency-Key": key}, safe_to_repeat=True
        )
        return Ticket.from_json(answer)

    async def get(self, ticket: str) -> Ticket:
        return Ticket.from_json(await self._desk.request("GET", _ticket_path(ticket)))

    async def list(
        self,
        status: StrList = None,
        label: StrList = None,
        *,
        agent: StrList = None,
        parent: Optional[str] = None,
        q: Optional[str] = None,
        order: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[Ticket]:
        """Every matching ticket, page after page (`limit` is the page size)."""
        query = params(status=status, label=label, agent=agent, parent=parent, q=q, order=order, limit=limit)
        async for item in self._desk._pages("/v1/tickets", query):
            yield Ticket.from_json(item)

    async def update(self, ticket: str, **fields: Any) -> Ticket:
        return Ticket.from_json(await self._desk.request("PATCH", _ticket_path(ticket), json=fields))

    async def comment(self, ticket: str, text: str, author: Optional[str] = None) -> Comment:
        body: Dict[str, Any] = {"text": text}
        if author is not None:
            body["author"] = author
        return Comment.from_json(await self._desk.request("POST", _ticket_path(ticket) + "/comments", json=body))

    async def comments(self, ticket: str, *, limit: Optional[int] = None) -> AsyncIterator[Comment]:
        async for item in self._desk._pages(_ticket_path(ticket) + "/comments", params(limit=limit)):
            yield Comment.from_json(item)

    async def cancel(self, ticket: str) -> Ticket:
        return Ticket.from_json(await self._desk.request("POST", _ticket_path(ticket) + "/cancel"))

    async def retry(self, ticket: str) -> Ticket:
        return Ticket.from_json(await self._desk.request("POST", _ticket_path(ticket) + "/retry"))

    async def approve(self, ticket: str, call_id: Optional[str] = None, reason: Optional[str] = None) -> Ticket:
        """Approves a call that waits for approval, or (without `call_id`) every pending one."""
        path, body = decision_request(_ticket_path(ticket), True, call_id, reason)
        return Ticket.from_json(await self._desk.request("POST", path, json=body))

    async def deny(self, ticket: str, call_id: Optional[str] = None, reason: Optional[str] = None) -> Ticket:
        """Denies a call (the model gets `reason`), or (without `call_id`) every pending one."""
        path, body = decision_request(_ticket_path(ticket), False, call_id, reason)
        return Ticket.from_json(await self._desk.request("POST", path, json=body))

    async def answer(self, ticket: str, answer: Any, question_id: Optional[str] = None) -> Ticket:
        """Answers the question the ticket's agent asked (its `pending_question` unless
        `question_id` names it)."""
        qid = question_id or pending_question_id(await self._desk.request("GET", _ticket_path(ticket)))
        path = _ticket_path(ticket) + "/questions/" + quote(qid, safe="")
        return Ticket.from_json(await self._desk.request("POST", path, json={"answer": answer}))

    async def replay(
        self,
        ticket: str,
        *,
        agent: Optional[str] = None,
        agent_version: Optional[int] = None,
        provider: Optional[str] = None,
        model: Optional[str] = None,
        tools: Optional[str] = None,
    ) -> Ticket:
        """Runs the ticket again as a new one; `tools="recorded"` (the default) answers its calls
        from the original's."""
        body = present(agent=agent, agent_version=agent_version, provider=provider, model=model, tools=tools)
        return Ticket.from_json(await self._desk.request("POST", _ticket_path(ticket) + "/replay", json=body))

    def stream(self, ticket: str, after: Optional[int] = None) -> AsyncIterator[Event]:
        """The ticket's events from the first (or after seq `after`), then live; reconnects after
        a cut, yields every persisted event once in seq order, and ends after the final one."""
        return self._desk._sse(_ticket_path(ticket) + "/events", {}, TicketStreamState(after))


class AsyncExperiments:
    """Tickets replayed by several arms and compared (`/v1/experiments`); experiments as JSON."""

    def __init__(self, desk: AsyncAgentDesk) -> None:
        self._desk = desk

    async def create(
        self,
        name: str,
        arms: List[Dict[str, Any]],
        *,
        tickets: Optional[List[str]] = None,
        filter: Optional[Dict[str, Any]] = None,
        judge: Optional[Dict[str, Any]] = None,
        tools: Optional[str] = None,
    ) -> Dict[str, Any]:
        body = present(name=name, arms=arms, tickets=tickets, filter=filter, judge=judge, tools=tools)
        return json_object(await self._desk.request("POST", "/v1/experiments", json=body))

    async def get(self, experiment: str) -> Dict[str, Any]:
        return json_object(await self._desk.request("GET", _experiment_path(experiment)))

    async def list(self) -> List[Dict[str, Any]]:
        return [json_object(x) for x in (await self._desk.request("GET", "/v1/experiments"))["items"]]

    async def cancel(self, experiment: str) -> Dict[str, Any]:
        return json_object(await self._desk.request("POST", _experiment_path(experiment) + "/cancel"))

    async def delete(self, experiment: str) -> None:
        await self._desk.request("DELETE", _experiment_path(experiment))


class AsyncEvents:
    def __init__(self, desk: AsyncAgentDesk) -> None:
        self._desk = desk

    def stream(
        self,
        kind: StrList = None,
        cursor: Optional[str] = None,
        *,
        label: StrList = None,
        agent: StrList = None,
    ) -> AsyncIterator[Event]:
        """Every ticket's events (`GET /v1/events`): new ones, or those after `cursor` (an event's
        `.cursor`). Reconnects after a cut from the last cursor it delivered; never ends by
        itself."""
        return self._desk._sse("/v1/events", params(kind=kind, label=label, agent=agent), FirehoseState(cursor))


def _ticket_path(ticket: str) -> str:
    return "/v1/tickets/" + quote(ticket, safe="")


def _experiment_path(experiment: str) -> str:
    return "/v1/experiments/" + quote(experiment, safe="")



