"""Stand-in HTTP servers on 127.0.0.1 that answer with recorded bytes, for clients' error paths."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def raw_http_server(*responses: bytes) -> Iterator[str]:
    """Answer the n-th connection with ``responses[n]`` (the last one repeats) verbatim, then
    close it (an empty response: close without answering); yields the base URL."""
    queue = list(responses)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                read_request(conn)
                conn.sendall(queue.pop(0) if len(queue) > 1 else queue[0])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=5)


def read_request(conn: socket.socket) -> None:
    """Read one HTTP request (headers and a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if not (part := conn.recv(65536)):
            return
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length and (part := conn.recv(65536)):
        body += part


def sse_response(*events: str) -> bytes:
    """An HTTP/1.0 Server-Sent Events answer carrying ``events`` (``data: ...`` lines)."""
    body = "".join(f"{e}\n\n" for e in events).encode()
    return b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + body
