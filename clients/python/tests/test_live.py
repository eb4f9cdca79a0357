"""Against a live desk whose model is scripts/fake-model.py (every request closes the ticket with
"ok"; one whose task says "slow" hangs): AGENTDESK_URL is the desk, AGENTDESK_CUT_URL the same desk
behind clients/cut-proxy.py, AGENTDESK_TOKEN its token. .ci/clients.sh sets them up."""
from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import urllib.request
import uuid
from typing import Dict, List, Set, Tuple

import pytest

from agentdesk import AgentDesk, AgentDeskError, ApiError, AsyncAgentDesk, Event

URL = os.environ.get("AGENTDESK_URL")
CUT_URL = os.environ.get("AGENTDESK_CUT_URL")
TOKEN = os.environ.get("AGENTDESK_TOKEN")
pytestmark = pytest.mark.skipif(not (URL and CUT_URL), reason="AGENTDESK_URL and AGENTDESK_CUT_URL are not set")

LABEL = f"py-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def desk() -> AgentDesk:
    d = AgentDesk(URL or "", token=TOKEN)
    # An agent of this suite's own, so that the firehose can be filtered to its tickets.
    d.request("PUT", f"/v1/agents/{LABEL}", json={"role": "Answer.", "model": "fake", "labels": [LABEL]})
    return d


def cuts(path: str, containing: str = "") -> int:
    """How many connections to `path` (with a query holding `containing`) the proxy cut."""
    with urllib.request.urlopen(f"{CUT_URL}/__stats") as r:
        stats: Dict[str, Dict[str, int]] = json.load(r)
    return sum(v["cuts"] for k, v in stats.items() if k.split("?")[0] == path and containing in k)


def check_seqs(events: List[Event]) -> None:
    seqs = [e.seq for e in events if e.seq is not None]
    assert seqs == list(range(1, len(seqs) + 1)), seqs


def test_a_ticket_through_the_model(desk: AgentDesk) -> None:
    t = desk.tickets.create(task="say ok", labels=[LABEL])
    assert t.status == "todo" and t.key
    events = list(desk.tickets.stream(t.key))
    check_seqs(events)
    assert events[-1].kind == "ticket.done" and events[-1].data == {"result": "ok"}
    # The model's text, when the stream was open while it streamed (deltas are live only).
    assert "".join(e.data["delta"] for e in events if e.kind == "text.delta") in ("", "Done. ")
    done = desk.tickets.get(t.key)
    assert (done.status, done.result) == ("done", "ok")
    assert t.key in [x.key for x in desk.tickets.list(status="done", label=LABEL)]
    assert [c.author for c in desk.tickets.comments(t.key)][:1] == ["user"]
    desk.tickets.comment(t.key, "Once more, please.")
    assert desk.tickets.get(t.key).status in ("todo", "in_progress", "done")
    with pytest.raises(ApiError) as caught:
        desk.tickets.get("TICKET-999999999")
    assert (caught.value.status, caught.value.code) == (404, "not_found")


def test_a_stream_cut_mid_ticket_yields_each_event_once(desk: AgentDesk) -> None:
    t = desk.tickets.create(task="slow: take your time", labels=[LABEL])
    cut = AgentDesk(CUT_URL or "", token=TOKEN, backoff_base=0.05)
    events: List[Event] = []
    for ev in cut.tickets.stream(t.key):
        events.append(ev)
        if ev.kind == "request.started":
            desk.tickets.cancel(t.key)  # the model hangs: only a cancel ends this ticket
    check_seqs(events)
    assert "ticket.cancelled" in [e.kind for e in events]
    whole = [(e.seq, e.kind) for e in desk.tickets.stream(t.key)]
    assert [(e.seq, e.kind) for e in events if e.seq is not None] == whole
    assert cuts(f"/v1/tickets/{t.key}/events") >= 2


def firehose_cursor(desk: AgentDesk) -> str:
    """A firehose cursor to resume from. Without one the firehose starts at "now", which a client
    cannot see it reach: read it while creating tickets until one shows up."""
    got: List[str] = []

    def read() -> None:
        for ev in desk.events.stream(kind="ticket.created", label=LABEL):
            got.append(ev.cursor or "")
            return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while not got:
        desk.tickets.create(task="say ok", labels=[LABEL])
        reader.join(0.5)
    return got[0]


def test_the_firehose_resumes_after_cuts(desk: AgentDesk) -> None:
    cursor = firehose_cursor(desk)
    cut = AgentDesk(CUT_URL or "", token=TOKEN, backoff_base=0.05)
    keys = [desk.tickets.create(task="say ok", labels=[LABEL]).key for _ in range(3)]
    seen: List[Tuple[str, int]] = []
    done: Set[str] = set()
    stream = cut.events.stream(kind="ticket.*", label=LABEL, cursor=cursor)
    for ev in stream:
        assert ev.cursor, ev
        seen.append((ev.ticket_key or "", ev.seq or 0))
        if ev.kind == "ticket.done":
            done.add(ev.ticket_key or "")
        if set(keys) <= done:
            break
    stream.close()  # type: ignore[attr-defined]
    assert len(seen) == len(set(seen)), seen
    for key in keys:
        mine = [s for k, s in seen if k == key]
        assert mine == sorted(mine) and len(mine) >= 3, (key, mine)
    assert cuts("/v1/events", LABEL) >= 2


def test_a_replay_an_experiment_and_answers_where_nothing_waits(desk: AgentDesk) -> None:
    t = desk.tickets.create(task="say ok", labels=[LABEL])
    list(desk.tickets.stream(t.key))
    replay = desk.tickets.replay(t.key, model="fake")
    assert replay.metadata["replay_of"] == t.key
    assert list(desk.tickets.stream(replay.key))[-1].kind == "ticket.done"
    x = desk.experiments.create("two arms", [{"name": "a"}, {"name": "b", "model": "fake"}], tickets=[t.key])
    deadline = time.monotonic() + 30
    while (shown := desk.experiments.get(x["id"]))["status"] != "done":
        assert time.monotonic() < deadline, shown
        time.sleep(0.1)
    assert [(a["name"], a["done"]) for a in shown["arms"]] == [("a", 1), ("b", 1)]
    assert x["id"] in [e["id"] for e in desk.experiments.list()]
    desk.experiments.delete(x["id"])
    with pytest.raises(AgentDeskError, match="waits for no answer"):
        desk.tickets.answer(t.key, "x")
    with pytest.raises(ApiError) as caught:
        desk.tickets.approve(t.key)
    assert caught.value.status == 409


def test_async_client_against_the_desk() -> None:
    async def run() -> None:
        async with AsyncAgentDesk(URL or "", token=TOKEN) as desk:
            t = await desk.tickets.create(task="say ok", labels=[LABEL])
            kinds = [e.kind async for e in desk.tickets.stream(t.key)]
            assert kinds[-1] == "ticket.done"
            assert (await desk.tickets.get(t.key)).status == "done"
            assert t.key in [x.key async for x in desk.tickets.list(status="done", label=LABEL)]

    asyncio.run(run())


def test_a_project_token_acts_in_its_project_with_limits_retried_and_quotas_raised(desk: AgentDesk) -> None:
    name = f"py-{uuid.uuid4().hex[:8]}"
    prefix = "PY" + "".join(chr(ord("A") + int(c, 16) % 26) for c in uuid.uuid4().hex[:6])
    desk.request(
        "POST",
        "/v1/projects",
        json={
            "name": name,
            "key_prefix": prefix,
            "rate_limit": {"requests_per_s": 5, "burst": 2},
            "quotas": {"tickets_per_day": 2},
        },
    )
    AgentDesk(URL or "", token=TOKEN, project=name).request("PUT", "/v1/agents/worker", json={"model": "fake"})
    created = desk.request("POST", f"/v1/projects/{name}/tokens", json={"name": "ci", "scopes": ["write"]})
    own = AgentDesk(URL or "", token=created["token"])
    t = own.tickets.create(task="say ok")
    assert t.key == f"{prefix}-1"
    events = list(own.tickets.stream(t.key))
    check_seqs(events)
    assert events[-1].kind == "ticket.done"
    # Past the burst of two the desk answers 429 with Retry-After: the client waits and goes on.
    for _ in range(6):
        assert own.tickets.get(t.key).status == "done"
    own.tickets.create(task="the day's second")
    # The day's quota is not waited out (its Retry-After runs to midnight): raised at once.
    with pytest.raises(ApiError) as caught:
        own.tickets.create(task="one too many")
    assert (caught.value.status, caught.value.code) == (429, "quota_exceeded")
    # Another project's ticket does not exist for it, and naming another project is refused.
    with pytest.raises(ApiError) as hidden:
        own.tickets.get("TICKET-1")
    assert hidden.value.status == 404
    with pytest.raises(ApiError) as refused:
        AgentDesk(URL or "", token=created["token"], project="default").tickets.get(t.key)
    assert (refused.value.status, refused.value.code) == (403, "forbidden")
