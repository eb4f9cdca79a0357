"""The official Python client of agentdesk: `AgentDesk` (blocking) and `AsyncAgentDesk` (asyncio)."""
from __future__ import annotations

from ._async import AsyncAgentDesk
from ._core import FINAL_KINDS, AgentDeskError, ApiError, Event, Settings, StreamError
from ._sync import AgentDesk
from .types import Comment, Ticket

__all__ = [
    "AgentDesk",
    "AsyncAgentDesk",
    "AgentDeskError",
    "ApiError",
    "StreamError",
    "Event",
    "FINAL_KINDS",
    "Settings",
    "Ticket",
    "Comment",
]
__version__ = "0.1.0"
