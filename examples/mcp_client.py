"""Hands a ticket to the desk through its MCP server (the official MCP Python SDK, `pip install
mcp`) and waits for the answer.

    python examples/mcp_client.py [URL] [TOKEN]     # default http://localhost:8080, no token
"""

import asyncio
import sys

import httpx2  # the HTTP client the MCP SDK is built on
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # The bearer header goes on the HTTP client; reads wait up to create_ticket's wait_secs.
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=120.0))
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as desk:
        tools = await desk.list_tools()
        print("tools:", ", ".join(tool.name for tool in tools.tools))
        result = await desk.call_tool(
            "create_ticket", {"task": "What is the boiling point of water at 2000 m?", "wait_secs": 60}
        )
        ticket = result.structured_content
        print(ticket["key"], ticket["status"], ticket["result"])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://localhost:8080", sys.argv[2] if len(sys.argv) > 2 else None))
