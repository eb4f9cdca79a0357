#!/usr/bin/env python3
"""A proxy in front of a desk that cuts event streams: the Nth connection to a given stream URL
(path and query) is closed abruptly after CUTS[N] bytes of the answer; later ones pass whole.
Other requests pass through. `GET /__stats` answers {url: {"connections", "cuts"}}. Each request
gets a connection of its own (`Connection: close` upstream), so every reconnect is seen.

    python3 clients/cut-proxy.py LISTEN_PORT UPSTREAM_PORT [CUTS, default 400,1500,2600]
"""
from __future__ import annotations

import asyncio
import json
import sys
from typing import Dict, List

STATS: Dict[str, Dict[str, int]] = {}


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int = -1) -> bool:
    """Copies until EOF, or until `limit` bytes (then returns True: cut)."""
    sent = 0
    while True:
        size = 65536 if limit < 0 else min(65536, limit - sent)
        if size == 0:
            return True
        data = await reader.read(size)
        if not data:
            return False
        writer.write(data)
        await writer.drain()
        sent += len(data)


async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, upstream: int, cuts: List[int]) -> None:
    try:
        head = await client_r.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        client_w.close()
        return
    lines = head.decode("latin-1").split("\r\n")
    method, url = lines[0].split(" ")[:2]
    if url == "/__stats":
        body = json.dumps(STATS).encode()
        client_w.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        await client_w.drain()
        client_w.close()
        return
    kept = [l for l in lines[1:] if l and not l.lower().startswith("connection:")]
    head = ("\r\n".join([lines[0], *kept, "Connection: close"]) + "\r\n\r\n").encode("latin-1")
    limit = -1
    if method == "GET" and "/events" in url.split("?")[0]:
        stats = STATS.setdefault(url, {"connections": 0, "cuts": 0})
        n = stats["connections"]
        stats["connections"] += 1
        if n < len(cuts):
            limit = cuts[n]
    try:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream)
    except OSError:
        client_w.close()
        return
    up_w.write(head)
    to_upstream = asyncio.ensure_future(pipe(client_r, up_w))
    try:
        cut = await pipe(up_r, client_w, limit)
    except (ConnectionError, OSError):
        cut = False
    to_upstream.cancel()
    if cut:
        STATS[url]["cuts"] += 1
        client_w.transport.abort()
    else:
        client_w.close()
    up_w.transport.abort()


async def main() -> None:
    port, upstream = int(sys.argv[1]), int(sys.argv[2])
    cuts = [int(c) for c in (sys.argv[3] if len(sys.argv) > 3 else "400,1500,2600").split(",")]
    server = await asyncio.start_server(lambda r, w: handle(r, w, upstream, cuts), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
