"""A local HTTP(S) server on 127.0.0.1 in a daemon thread, for the fake clouds."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LocalServer:
    """``handler`` served on an ephemeral port; ``with`` starts and stops it.
    With ``tls`` (a server-side SSLContext) it speaks HTTPS."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], *, tls: ssl.SSLContext | None = None) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        host, port = self._server.server_address[:2]
        self.endpoint = f"{'https' if tls else 'http'}://{host}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
