"""A JSON HTTP server on 127.0.0.1 for the API tests: a free port, a daemon thread per request,
and the one way its handlers answer (``JsonHandler.send_json``)."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet handler that answers with JSON bytes."""

    def log_message(self, *args):
        pass

    def send_json(self, code: int, data: bytes, headers: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


class Healthy(JsonHandler):
    """Answers every GET, ``/health`` included, with 200 and ``{}``."""

    def do_GET(self):
        self.send_json(200, b"{}")


class LocalServer:
    """Serves ``handler`` (a JsonHandler class) until ``close``; ``url`` is its /v1 base."""

    def __init__(self, handler: type[JsonHandler]):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
