"""A stand-in desk for the unit tests: real HTTP on a real port, scripted answers, and event
streams that it can cut after any number of bytes, abruptly (the socket closes mid-body) or
cleanly (the chunked body ends properly)."""
from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

Cut = Tuple[str, int]  # ("abrupt" | "clean", bytes of the body sent before the cut)


def frame(event: Dict[str, Any], id: Optional[str]) -> bytes:
    head = f"id: {id}\n" if id is not None else ""
    return (head + "data: " + json.dumps(event) + "\n\n").encode()


def event(seq: Optional[int], kind: str, data: Optional[Dict[str, Any]] = None, key: str = "TICKET-1") -> Dict[str, Any]:
    return {
        "ticket_id": "0193aaaa-0000-7000-8000-000000000001",
        "ticket_key": key,
        "seq": seq,
        "kind": kind,
        "agent": "default",
        "at": "2026-01-01T00:00:00Z",
        "data": data or {},
    }


class Double:
    def __init__(self) -> None:
        self.ticket_events: List[Dict[str, Any]] = []  # deltas (seq None) and persisted events
        self.firehose: List[Tuple[str, Dict[str, Any]]] = []  # (cursor, event)
        self.cuts: List[Cut] = []  # one per stream connection, in order; then whole streams
        self.answers: Dict[Tuple[str, str], List[Tuple[int, Dict[str, str], Any]]] = {}
        self.requests: List[Tuple[str, str, Dict[str, str], bytes]] = []
        self.stream_connections = 0
        # Events before Last-Event-ID that a resumed ticket stream sends again (as a desk that
        # lost track might): the client must drop them.
        self.overlap = 0
        self.lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_any(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
                path = self.path.split("?", 1)[0]
                with double.lock:
                    double.requests.append((self.command, self.path, dict(self.headers.items()), body))
                if path.endswith("/events"):
                    return double.stream(self, path)
                with double.lock:
                    queue = double.answers.get((self.command, path), [])
                    answer = queue.pop(0) if len(queue) > 1 else (queue[0] if queue else None)
                if answer is None:
                    answer = (404, {}, {"error": {"code": "not_found", "message": f"no {path}"}})
                status, headers, payload = answer
                if callable(payload):
                    payload = payload(self)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = handle_any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, method: str, path: str, status: int, payload: Any, headers: Optional[Dict[str, str]] = None) -> None:
        """Queues an answer; the last one queued for a route repeats."""
        self.answers.setdefault((method, path), []).append((status, headers or {}, payload))

    def ticket_body(self, after: int, first: bool) -> Tuple[bytes, bool]:
        """What the desk would send after seq `after`: deltas only on the first connection (they
        are live, never replayed); whether the stream then ends (the ticket is finished and that
        was its latest event)."""
        out = b"retry: 10\n\n"
        for ev in self.ticket_events:
            if ev["seq"] is None:
                if first:
                    out += frame(ev, None)
            elif ev["seq"] > after:
                out += frame(ev, str(ev["seq"]))
        finished = any(e["kind"] in ("ticket.done", "ticket.failed", "ticket.cancelled") for e in self.ticket_events)
        return out, finished

    def stream(self, handler: BaseHTTPRequestHandler, path: str) -> None:
        last = handler.headers.get("last-event-id")
        with self.lock:
            n = self.stream_connections
            self.stream_connections += 1
            cut = self.cuts[n] if n < len(self.cuts) else None
            special = self.answers.get(("GET", path))
        if special:
            status, headers, payload = special.pop(0) if len(special) > 1 else special[0]
            if status != 200:
                data = json.dumps(payload).encode()
                handler.send_response(status)
                for k, v in headers.items():
                    handler.send_header(k, v)
                handler.send_header("content-length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)
                return
        if path == "/v1/events":
            body = b"retry: 10\n\n"
            seen = last is None
            for cursor, ev in self.firehose:
                if seen:
                    body += frame(ev, cursor)
                seen = seen or cursor == last
            ends = False
        else:
            body, ends = self.ticket_body(max(0, int(last or 0) - self.overlap), n == 0)
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        if cut is not None:
            mode, size = cut
            part = body[:size]
            if part:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            if mode == "clean":
                handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
            handler.close_connection = True
            try:
                handler.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
        handler.wfile.flush()
        if ends:
            handler.wfile.write(b"0\r\n\r\n")
            handler.close_connection = True
            return
        # An open stream that sends nothing more: held until the client goes away.
        handler.close_connection = True
        handler.connection.settimeout(30)
        try:
            handler.connection.recv(1)
        except OSError:
            pass


def ticket_json(key: str = "TICKET-1", status: str = "todo") -> Dict[str, Any]:
    return {
        "id": "0193aaaa-0000-7000-8000-000000000001",
        "key": key,
        "task": "t",
        "labels": [],
        "status": status,
        "reporter": "user",
        "priority": 0,
        "attempts": 0,
        "max_attempts": 3,
        "metadata": {},
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "cache_creation_tokens": 0,
            "requests": 0,
            "tool_calls": 0,
            "cost_usd": 0,
            "unpriced": False,
        },
        "budget_usd": None,
        "waiting_for": None,
        "agent_version": None,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "pending_approvals": [],
        "pending_question": None,
    }
