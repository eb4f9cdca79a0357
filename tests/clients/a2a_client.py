"""The desk's A2A agent driven by the official A2A SDK (a2a-sdk, protocol v1.0).

usage: python a2a_client.py BASE_URL TOKEN READ_TOKEN [JSONRPC|HTTP+JSON]

Run by tests/protocol_clients.rs against a desk whose agent closes every ticket with
"echo: <the last user message>", asks "Which colour should it be?" when the task contains
QUESTION, and never claims a ticket labelled "nobody". Exits 0 only when every check held.
"""

import asyncio
import sys

import httpx
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, create_client
from a2a.helpers import get_artifact_text, get_message_text, new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    UnsupportedOperationError,
)

TIMEOUT = httpx.Timeout(60.0)


def ok(what: str) -> None:
    print(f"ok   {what}", flush=True)


def state(task) -> str:
    return TaskState.Name(task.status.state)


def artifact_texts(task) -> list[str]:
    return [get_artifact_text(a) for a in task.artifacts]


def message(text: str, task_id: str | None = None, context_id: str | None = None, metadata=None):
    msg = new_text_message(text, role=Role.ROLE_USER, task_id=task_id, context_id=context_id)
    if metadata:
        msg.metadata.update(metadata)
    return SendMessageRequest(message=msg)


async def send(client, request):
    """A non-streaming send: the one task it answers with."""
    answers = [resp async for resp in client.send_message(request)]
    assert len(answers) == 1 and answers[0].HasField("task"), f"expected one task, got {answers}"
    return answers[0].task


async def expect_error(kind, call, what: str):
    try:
        result = await call
    except kind as err:
        ok(f"{what} -> {kind.__name__} ({getattr(err, 'message', err)})")
        return err
    raise AssertionError(f"{what}: expected {kind.__name__}, got {result!r}")


async def check_card(base_url: str, binding: str):
    # The card is public: fetched without a token.
    async with httpx.AsyncClient(timeout=TIMEOUT) as anonymous:
        card = await A2ACardResolver(anonymous, base_url).get_agent_card()
    skills = {skill.id: skill for skill in card.skills}
    assert "echo" in skills, f"the card has no echo skill: {list(skills)}"
    assert skills["echo"].description, "the echo skill has no description"
    bearer = card.security_schemes["bearer"] if "bearer" in card.security_schemes else None
    assert bearer is not None and bearer.HasField("http_auth_security_scheme"), (
        f"no bearer security scheme: {card.security_schemes}"
    )
    assert bearer.http_auth_security_scheme.scheme.lower() == "bearer", bearer
    interfaces = {i.protocol_binding: i for i in card.supported_interfaces}
    assert set(interfaces) >= {"JSONRPC", "HTTP+JSON"}, f"interfaces: {list(interfaces)}"
    for name, interface in interfaces.items():
        assert interface.protocol_version == "1.0", f"{name} speaks {interface.protocol_version!r}"
    assert interfaces["JSONRPC"].url == f"{base_url}/a2a/jsonrpc", interfaces["JSONRPC"].url
    assert interfaces["HTTP+JSON"].url == f"{base_url}/a2a", interfaces["HTTP+JSON"].url
    assert card.capabilities.streaming, "the card does not offer streaming"
    ok(f"agent card: skills {sorted(skills)}, bearer scheme, {binding} at {interfaces[binding].url}")
    return card


async def main(base_url: str, token: str, read_token: str, binding: str) -> None:
    base_url = base_url.rstrip("/")
    card = await check_card(base_url, binding)

    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)
    reader_http = httpx.AsyncClient(headers={"Authorization": f"Bearer {read_token}"}, timeout=TIMEOUT)

    def config(http_client, streaming=False, polling=False):
        return ClientConfig(
            streaming=streaming,
            polling=polling,
            httpx_client=http_client,
            supported_protocol_bindings=[binding],
        )

    unary = await create_client(base_url, client_config=config(http))
    streaming = await create_client(base_url, client_config=config(http, streaming=True))
    polling = await create_client(card, client_config=config(http, polling=True))
    reader = await create_client(card, client_config=config(reader_http))

    # A blocking send answers once the task is done.
    task = await send(unary, message("hello"))
    assert state(task) == "TASK_STATE_COMPLETED", f"send: {state(task)} {task}"
    assert artifact_texts(task) == ["echo: hello"], f"send: artifacts {artifact_texts(task)}"
    users = [get_message_text(m) for m in task.history if m.role == Role.ROLE_USER]
    assert "hello" in users, f"send: the history lacks the user's message: {task.history}"
    assert task.context_id, "send: no contextId"
    ok(f"send -> {state(task)}, artifact {artifact_texts(task)}, {len(task.history)} history messages")

    # A streaming send: the task first, its artifact, then the final status.
    events = [ev async for ev in streaming.send_message(message("stream me"))]
    kinds = [ev.WhichOneof("payload") for ev in events]
    assert kinds and kinds[0] == "task", f"stream: first event {kinds}"
    assert kinds[-1] == "status_update", f"stream: last event {kinds}"
    last = events[-1].status_update
    assert TaskState.Name(last.status.state) == "TASK_STATE_COMPLETED", f"stream: ends in {last}"
    assert "artifact_update" in kinds[1:-1], f"stream: no artifact update before the end: {kinds}"
    artifact = next(ev.artifact_update for ev in events if ev.WhichOneof("payload") == "artifact_update")
    assert get_artifact_text(artifact.artifact) == "echo: stream me", f"stream: artifact {artifact}"
    assert artifact.task_id == events[0].task.id == last.task_id, "stream: events of different tasks"
    ok(f"stream -> {kinds}")

    # Get, with at most one history message.
    got = await unary.get_task(GetTaskRequest(id=task.id, history_length=1))
    assert got.id == task.id and state(got) == "TASK_STATE_COMPLETED", f"get: {got}"
    assert len(got.history) <= 1, f"get: historyLength=1 gave {len(got.history)} messages"
    assert artifact_texts(got) == ["echo: hello"], f"get: artifacts {artifact_texts(got)}"
    ok(f"get (historyLength=1) -> {state(got)}, {len(got.history)} history message(s)")

    # List by context.
    listed = await unary.list_tasks(ListTasksRequest(context_id=task.context_id, page_size=10))
    assert task.id in [t.id for t in listed.tasks], f"list: {task.id} missing from {listed}"
    assert listed.total_size >= 1, f"list: totalSize {listed.total_size}"
    ok(f"list (contextId) -> {len(listed.tasks)} task(s), totalSize {listed.total_size}")

    # Errors.
    await expect_error(
        TaskNotCancelableError, unary.cancel_task(CancelTaskRequest(id=task.id)), "cancel of a completed task"
    )
    await expect_error(
        TaskNotFoundError,
        unary.get_task(GetTaskRequest(id="00000000-0000-4000-8000-000000000000")),
        "get of an unknown task",
    )

    async def subscribe_terminal():
        return [ev async for ev in streaming.subscribe(SubscribeToTaskRequest(id=task.id))]

    await expect_error(UnsupportedOperationError, subscribe_terminal(), "subscribe to a completed task")

    # A question: the task needs input, and a follow-up message answers it.
    asked = await send(unary, message("QUESTION: paint the shed"))
    assert state(asked) == "TASK_STATE_INPUT_REQUIRED", f"question: {state(asked)} {asked}"
    question = get_message_text(asked.status.message)
    assert "colour" in question, f"question: status message {question!r}"
    ok(f"question -> {state(asked)}: {question!r}")
    answered = await send(unary, message("blue", task_id=asked.id, context_id=asked.context_id))
    assert answered.id == asked.id, f"answer: a new task {answered.id} instead of {asked.id}"
    assert state(answered) == "TASK_STATE_COMPLETED", f"answer: {state(answered)} {answered}"
    assert artifact_texts(answered) == ["echo: blue"], f"answer: artifacts {artifact_texts(answered)}"
    ok(f"answer 'blue' -> {state(answered)}, artifact {artifact_texts(answered)}")

    # returnImmediately: a task nobody claims stays submitted, and can be cancelled.
    queued = await send(polling, message("wait for nobody", metadata={"labels": ["nobody"]}))
    assert state(queued) == "TASK_STATE_SUBMITTED", f"returnImmediately: {state(queued)} {queued}"
    ok(f"send (returnImmediately, labels [nobody]) -> {state(queued)}")
    cancelled = await unary.cancel_task(CancelTaskRequest(id=queued.id))
    assert state(cancelled) == "TASK_STATE_CANCELED", f"cancel: {state(cancelled)}"
    ok(f"cancel -> {state(cancelled)}")

    # A read token reads, and may not send.
    seen = await reader.get_task(GetTaskRequest(id=task.id))
    assert seen.id == task.id, f"read token: get {seen}"
    ok("read token: get works")
    err = await expect_error(A2AClientError, send(reader, message("not allowed")), "read token: send")
    assert "403" in str(err), f"read token: send failed without a 403: {err}"

    for client in (unary, streaming, polling, reader):
        await client.close()
    await http.aclose()
    await reader_http.aclose()
    print(f"all A2A checks passed over {binding}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "JSONRPC"))
