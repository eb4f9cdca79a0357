"""Hands a task to the desk as an A2A agent (the official A2A Python SDK, `pip install a2a-sdk`)
and prints what comes back: the task, then its status and artifact as they change.

    python examples/a2a_client.py [URL] [TOKEN]     # default http://localhost:8080, no token
"""

import asyncio
import sys

import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest


async def main(url: str, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # A send waits for the task to finish (up to 300 s) unless it asks to return at once.
    async with httpx.AsyncClient(headers=headers, timeout=300) as http:
        client = await create_client(url, client_config=ClientConfig(httpx_client=http, streaming=True))
        request = SendMessageRequest(message=new_text_message("Summarise RFC 9110 in one line", role=Role.ROLE_USER))
        async for event in client.send_message(request):
            print(event)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://localhost:8080", sys.argv[2] if len(sys.argv) > 2 else None))
