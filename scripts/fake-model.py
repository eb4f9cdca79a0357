#!/usr/bin/env python3
"""A stand-in model server (for trying the desk without a model account, and for
scripts/container-smoke.sh): the OpenAI chat completions API,
streamed, answering every request with a close_ticket tool call. A request whose body mentions
"slow" waits 120 s first, so a ticket stays in flight while the smoke test stops a container.

    python3 scripts/fake-model.py PORT
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("fake-model: " + (fmt % args) + "\n")

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        request = self.rfile.read(int(self.headers.get("content-length", "0")))
        if b"slow" in request:
            time.sleep(120)
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Done. "}}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "close_ticket", "arguments": "{\"result\": \"ok\"}"}}]}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
             "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}},
        ]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        try:
            for chunk in chunks:
                chunk.update({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake"})
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
        except BrokenPipeError:
            pass
        self.close_connection = True


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
