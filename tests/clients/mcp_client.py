"""The desk's MCP server driven by the official MCP Python SDK (`mcp`), over streamable HTTP, at
each revision the desk serves: 2025-06-18 and 2025-11-25 (initialize and a session) and
2026-07-28 (stateless, found with `server/discover`).

usage: python mcp_client.py BASE_URL TOKEN READ_TOKEN

Run by tests/protocol_clients.rs against a desk whose agent closes every ticket with
"echo: <the last user message>", asks "Which colour should it be?" when the task contains
QUESTION, and never claims a ticket labelled "nobody". Exits 0 only when every check held.
"""

import asyncio
import contextlib
import json
import sys
import time
import uuid

import httpx2
import mcp.client.session
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

REVISIONS = ["2025-06-18", "2025-11-25", "2026-07-28"]
HANDSHAKE = {"2025-06-18", "2025-11-25"}
TOOLS = {
    "create_ticket", "get_ticket", "list_tickets", "comment_ticket",
    "cancel_ticket", "retry_ticket", "answer_approval",
}
READ_TOOLS = {"get_ticket", "list_tickets"}


def ok(revision: str, what: str) -> None:
    print(f"ok   [{revision}] {what}", flush=True)


@contextlib.asynccontextmanager
async def connect(base_url: str, token: str | None, revision: str, statuses: list[int] | None = None):
    """A client speaking `revision`. The SDK's `initialize` offers its newest handshake revision
    (2025-11-25) and has no setting for another, so an older one is pinned by setting the
    module's default; 2026-07-28 is what `mode="auto"` finds with `server/discover`."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0, read=300.0))
    if statuses is not None:
        async def record(response):
            statuses.append(response.status_code)

        http.event_hooks["response"].append(record)
    mode = "legacy" if revision in HANDSHAKE else "auto"
    saved = mcp.client.session.LATEST_HANDSHAKE_VERSION
    if revision in HANDSHAKE:
        mcp.client.session.LATEST_HANDSHAKE_VERSION = revision
    try:
        async with http, Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode=mode) as client:
            assert client.protocol_version == revision, (
                f"asked for {revision}, the session speaks {client.protocol_version}"
            )
            if revision not in HANDSHAKE:
                assert client.session.discover_result is not None, "2026-07-28 without server/discover"
            yield client
    finally:
        mcp.client.session.LATEST_HANDSHAKE_VERSION = saved


async def call(client: Client, tool: str, **arguments):
    """A tool's structuredContent, after checking that the text content holds the same JSON."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}({arguments}) failed: {result.content}"
    return structured(result, tool)


def structured(result, tool: str):
    assert result.structured_content is not None, f"{tool}: no structuredContent"
    texts = [block.text for block in result.content if block.type == "text"]
    assert texts, f"{tool}: no text content"
    assert json.loads(texts[0]) == result.structured_content, f"{tool}: the text differs from structuredContent"
    return result.structured_content


async def expect_tool_error(client: Client, code: str, tool: str, **arguments) -> None:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool}({arguments}) should fail with {code}, got {result.structured_content}"
    error = structured(result, tool).get("error") or {}
    assert error.get("code") == code, f"{tool}({arguments}): expected {code}, got {error}"


async def until_done(client: Client, key: str, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while True:
        ticket = await call(client, "get_ticket", ticket=key)
        if ticket["status"] not in ("todo", "in_progress") or time.monotonic() > deadline:
            return ticket
        await asyncio.sleep(0.2)


async def full_token(base_url: str, token: str, revision: str) -> None:
    async with connect(base_url, token, revision) as client:
        tools = (await client.list_tools()).tools
        names = {tool.name for tool in tools}
        assert names == TOOLS, f"tools: {sorted(names)}"
        for tool in tools:
            assert tool.input_schema.get("type") == "object", f"{tool.name}: inputSchema {tool.input_schema}"
        ok(revision, f"tools/list -> {len(tools)} tools, each with an object inputSchema")

        marker = uuid.uuid4().hex[:8]
        task = f"hello {marker}"
        ticket = await call(client, "create_ticket", task=task, wait_secs=60)
        assert ticket["status"] == "done", f"create_ticket: {ticket}"
        assert ticket["result"] == f"echo: {task}", f"create_ticket: result {ticket['result']!r}"
        key = ticket["key"]
        ok(revision, f"create_ticket (wait_secs) -> {key} done, {ticket['result']!r}")

        got = await call(client, "get_ticket", ticket=key)
        assert got["id"] == ticket["id"] and got["status"] == "done", f"get_ticket: {got}"
        assert isinstance(got.get("comments"), list) and got["comments"], f"get_ticket: comments {got.get('comments')}"
        ok(revision, f"get_ticket -> {len(got['comments'])} comments")

        listed = await call(client, "list_tickets", q=marker, limit=10)
        assert "next_cursor" in listed, f"list_tickets: {listed}"
        assert [t["key"] for t in listed["items"]] == [key], f"list_tickets q={marker}: {listed['items']}"
        everything = await call(client, "list_tickets")
        assert everything["items"] and everything["items"][0]["key"] == key, "list_tickets: not newest first"
        ok(revision, f"list_tickets -> {key} (by q), newest first")

        asked = await call(client, "create_ticket", task=f"QUESTION {marker}: paint the shed", wait_secs=60)
        assert asked["status"] == "waiting", f"QUESTION ticket: {asked}"
        ok(revision, f"create_ticket QUESTION -> {asked['key']} waiting")
        comment = await call(client, "comment_ticket", ticket=asked["key"], text="blue")
        assert comment["ticket_id"] == asked["id"] and comment["author"] == "user", f"comment_ticket: {comment}"
        answered = await until_done(client, asked["key"])
        assert answered["status"] == "done" and answered["result"] == "echo: blue", f"after the answer: {answered}"
        ok(revision, f"comment_ticket 'blue' -> done, {answered['result']!r}")

        idle = await call(client, "create_ticket", task=f"nobody {marker}", labels=["nobody"])
        assert idle["status"] == "todo", f"nobody ticket: {idle}"
        cancelled = await call(client, "cancel_ticket", ticket=idle["key"])
        assert cancelled["status"] == "cancelled", f"cancel_ticket: {cancelled}"
        retried = await call(client, "retry_ticket", ticket=idle["key"])
        assert retried["status"] == "todo", f"retry_ticket: {retried}"
        ok(revision, f"cancel_ticket -> cancelled, retry_ticket -> todo ({idle['key']})")
        await call(client, "cancel_ticket", ticket=idle["key"])

        await expect_tool_error(
            client, "not_found", "answer_approval", ticket=idle["key"], call_id="call_nope", approve=True
        )
        ok(revision, "answer_approval of an unknown call -> isError, not_found")
        await expect_tool_error(client, "not_found", "get_ticket", ticket="TICKET-999999")
        ok(revision, "get_ticket TICKET-999999 -> isError, not_found")

        templates = (await client.list_resource_templates()).resource_templates
        uris = [t.uri_template for t in templates]
        assert "agentdesk://tickets/{ticket}" in uris, f"resource templates: {uris}"
        read = await client.read_resource(f"agentdesk://tickets/{key}")
        assert len(read.contents) == 1, f"resources/read: {read.contents}"
        body = json.loads(read.contents[0].text)
        assert body["key"] == key and body["result"] == ticket["result"], f"resources/read: {body}"
        assert isinstance(body.get("comments"), list) and body["comments"], f"resources/read: comments {body}"
        ok(revision, f"resources/templates/list and resources/read {key} -> {len(body['comments'])} comments")


async def read_token(base_url: str, token: str, revision: str) -> None:
    async with connect(base_url, token, revision) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == READ_TOOLS, f"read token: tools {sorted(names)}"
        listed = await call(client, "list_tickets", limit=1)
        assert listed["items"], "read token: list_tickets shows nothing"
        await call(client, "get_ticket", ticket=listed["items"][0]["key"])
        await expect_tool_error(client, "forbidden", "create_ticket", task="not allowed")
        ok(revision, "read token: 2 tools, get/list work, create_ticket -> isError, forbidden")


async def refused(base_url: str, token: str | None, revision: str) -> None:
    """Connecting fails. The SDK reports an HTTP error without a JSON-RPC body only as "Server
    returned an error response" (-32603), so the HTTP status is read off the responses."""
    statuses: list[int] = []
    try:
        async with connect(base_url, token, revision, statuses) as client:
            await client.list_tools()
    except Exception as err:  # the SDK's task groups may wrap it in an ExceptionGroup
        assert statuses and set(statuses) == {401}, f"token {token!r}: answered {statuses} ({describe(err)})"
        return
    raise AssertionError(f"connecting with token {token!r} worked")


def describe(err: BaseException) -> str:
    if isinstance(getattr(err, "exceptions", None), (list, tuple)):  # an exception group
        return "; ".join(describe(e) for e in err.exceptions)
    return f"{type(err).__name__}: {err}"


async def raw_unauthorized(base_url: str) -> None:
    """The 401 itself, as plain HTTP."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient(timeout=30) as http:
        for headers in ({}, {"Authorization": "Bearer wrong-token"}):
            response = await http.post(
                f"{base_url}/mcp", json=body,
                headers={**headers, "Accept": "application/json, text/event-stream"},
            )
            assert response.status_code == 401, f"POST /mcp with {headers}: {response.status_code}"


async def main(base_url: str, token: str, read: str) -> None:
    base_url = base_url.rstrip("/")
    for revision in REVISIONS:
        await full_token(base_url, token, revision)
        await read_token(base_url, read, revision)
        await refused(base_url, None, revision)
        await refused(base_url, "wrong-token", revision)
        ok(revision, "no token and a wrong token -> refused (401)")
    await raw_unauthorized(base_url)
    print(f"all MCP checks passed at {', '.join(REVISIONS)}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
