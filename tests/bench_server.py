"""The benchmark's HTTP app under a real uvicorn in a thread, with the settings `serve()` adds."""

from __future__ import annotations

import socket
import threading
import time

from presdep.bench import http_api


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class UvicornServer:
    """create_app(**kw) on a free loopback port; ``read_timeout_s`` as `presdep bench serve` sets it."""

    def __init__(self, **kw):
        import uvicorn

        self.port = free_port()
        read_timeout = kw.pop("read_timeout_s", http_api.DEFAULT_READ_TIMEOUT_S)
        cfg = uvicorn.Config(http_api.create_app(**kw), host="127.0.0.1", port=self.port, log_level="warning",
                             **http_api.uvicorn_options(read_timeout))
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            time.sleep(0.05)
        raise RuntimeError("uvicorn did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)
