"""A real HTTP server on 127.0.0.1 for metrics-URL tests: pages, and servers that misbehave.

Each path is a route: a page (bytes, status, headers), or a behaviour a hostile or broken server
has (a byte a second, gigabytes of headers or body, a redirect elsewhere). The server counts the
requests on each path and the bytes it managed to send, so a test can say a URL was never
fetched or a cap held. Run in threads of this process; ``close`` stops trickling at once.
"""

from __future__ import annotations

import http.server
import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Route:
    """What the server does on one path."""

    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    # "page" | "trickle_body" | "trickle_headers" | "endless_body" | "endless_headers" | "endless_header_line"
    # | "cut" (Content-Length promises more than is sent, then the connection closes)
    behaviour: str = "page"


class MetricsServer:
    """``with MetricsServer() as server: server.route("/metrics", Route(page)); server.url("/metrics")``."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.hits: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()  # bytes written per path before the client went away
        self.stop = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                owner.hits[path] += 1
                route = owner.routes.get(path, Route(b"not found", status=404))
                try:
                    owner._answer(self, path, route)
                except OSError:
                    pass  # the client closed the connection: what a deadline or a cap does

            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, path: str = "/metrics") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def route(self, path: str, route: Route | bytes) -> str:
        """Serve ``route`` (or a page of these bytes) on ``path``; returns its URL."""
        self.routes[path] = route if isinstance(route, Route) else Route(route)
        return self.url(path)

    def __enter__(self) -> MetricsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _write(self, handler, path: str, data: bytes) -> None:
        handler.wfile.write(data)
        handler.wfile.flush()
        self.sent[path] += len(data)

    def _answer(self, handler, path: str, route: Route) -> None:
        behaviour = route.behaviour
        if behaviour == "trickle_headers":
            # The status line itself, one byte a second: never a whole answer.
            for byte in b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" * 1000:
                self._write(handler, path, bytes([byte]))
                if self.stop.wait(1.0):
                    return
            return
        if behaviour in ("endless_headers", "endless_header_line"):
            self._write(handler, path, b"HTTP/1.0 200 OK\r\n")
            line = b"X-Filler: " + b"a" * 1000 + b"\r\n"
            if behaviour == "endless_header_line":
                self._write(handler, path, b"X-Filler: ")
                line = b"a" * 65536
            while not self.stop.is_set() and self.sent[path] < (4 << 30):
                self._write(handler, path, line)
            return
        handler.send_response(route.status)
        for name, value in route.headers.items():
            handler.send_header(name, value)
        if behaviour == "endless_body":
            handler.send_header("Content-Length", str(4 << 30))
            handler.end_headers()
            chunk = b"0" * (1 << 16)
            while not self.stop.is_set() and self.sent[path] < (4 << 30):
                self._write(handler, path, chunk)
            return
        if behaviour == "cut":
            handler.send_header("Content-Length", str(len(route.body) * 2 + 10))
            handler.end_headers()
            self._write(handler, path, route.body)
            return
        handler.send_header("Content-Type", "text/plain; version=0.0.4")
        handler.send_header("Content-Length", str(len(route.body)))
        handler.end_headers()
        if behaviour == "trickle_body":
            for byte in route.body:
                self._write(handler, path, bytes([byte]))
                if self.stop.wait(1.0):
                    return
            return
        self._write(handler, path, route.body)
