"""A local stand-in for the Hugging Face hub on 127.0.0.1, for the calls llama.cpp (build
11434, common/hf-cache.cpp and download.cpp) and moetune make:

- ``GET /api/models/{repo}/refs`` -> ``{"branches": [{"name": "main", "targetCommit": …}]}``
  with an ETag (If-None-Match -> 304);
- ``GET /api/models/{repo}/tree/{rev}?recursive=true`` -> entries with ``type``, ``oid``,
  ``size``, ``path`` and, for ``.gguf`` files, ``lfs`` (sha256 oid, size), like the real one;
- ``GET|HEAD /{repo}/resolve/{rev}/{path}`` -> 302 to a pretend CDN: a second server on
  another port (another origin, so tests can tell where a token went), which answers Range
  with 206, ``Content-Range``, ``Accept-Ranges`` and an ETag.

A gated repository answers 401 (``X-Error-Code: GatedRepo``) without its token. Misbehaviour
on demand: ``ignore_range`` (200 with the whole body), ``redirect_loop``, ``not_gguf`` (an
HTML page instead of the bytes). Every request is recorded (:class:`Seen`), and the body
bytes served per path are counted.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")
HTML = b"<!doctype html><html><body>Sign in to continue</body></html>" * 40


class Seen(NamedTuple):
    """One request as a server saw it."""

    server: str  # "hub" or "cdn"
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class FakeRepo:
    name: str
    files: dict[str, Path]  # repo path -> file on disk
    commit: str
    token: str | None = None  # a gated repository's token

    def oid(self, path: str) -> str:
        size = self.files[path].stat().st_size
        return hashlib.sha256(f"{self.name}/{path}/{size}".encode()).hexdigest()


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    bytes_served: Counter[str] = field(default_factory=Counter)
    ignore_range: bool = False
    redirect_loop: bool = False
    not_gguf: bool = False
    hub_port: int = 0
    cdn_port: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.hub_port}"

    @property
    def cdn(self) -> str:
        return f"http://127.0.0.1:{self.cdn_port}"

    def add_repo(self, name: str, files: dict[str, Path], token: str | None = None) -> FakeRepo:
        commit = hashlib.sha1(name.encode()).hexdigest()
        self.repos[name] = FakeRepo(name, dict(files), commit, token)
        return self.repos[name]

    def reset(self) -> None:
        with self._lock:
            self.seen.clear()
            self.bytes_served.clear()
        self.ignore_range = self.redirect_loop = self.not_gguf = False

    def requests(self, server: str | None = None, method: str | None = None) -> list[Seen]:
        with self._lock:
            return [
                s
                for s in self.seen
                if (server is None or s.server == server) and (method is None or s.method == method)
            ]

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def count_bytes(self, path: str, n: int) -> None:
        with self._lock:
            self.bytes_served[path] += n


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub
    role: str

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def _route(self, method: str) -> None:
        seen = Seen(
            self.role,
            method,
            self.path,
            self.headers.get("Range"),
            self.headers.get("Authorization"),
        )
        self.hub.record(seen)
        path = unquote(urlsplit(self.path).path)
        try:
            if self.role == "cdn":
                self._cdn(method, path)
            else:
                self._api(method, path)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # --- answers ------------------------------------------------------------------------

    def _send(self, status: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data: Any, status: int = 200, **headers: str) -> None:
        self._send(status, json.dumps(data).encode(), Content_Type="application/json", **headers)

    def _repo(self, name: str) -> FakeRepo | None:
        repo = self.hub.repos.get(name)
        if repo is None:
            self._json({"error": "Repository not found"}, 404, X_Error_Code="RepoNotFound")
            return None
        if repo.token and self.headers.get("Authorization") != f"Bearer {repo.token}":
            status = 403 if self.headers.get("Authorization") else 401
            self._json(
                {"error": f"Access to model {name} is restricted."},
                status,
                X_Error_Code="GatedRepo",
            )
            return None
        return repo

    def _api(self, method: str, path: str) -> None:
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/refs", path):
            if repo := self._repo(m[1]):
                etag = f'W/"{repo.commit[:12]}"'
                if self.headers.get("If-None-Match") == etag:
                    self._send(304, ETag=etag)
                    return
                branch = {"name": "main", "ref": "refs/heads/main", "targetCommit": repo.commit}
                self._json({"branches": [branch], "converts": [], "tags": []}, ETag=etag)
        elif m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)", path):
            if repo := self._repo(m[1]):
                self._json(_tree(repo))
        elif m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            if repo := self._repo(m[1]):
                self._resolve(repo, m[2], m[3])
        else:
            self._json({"error": "not found"}, 404)

    def _resolve(self, repo: FakeRepo, rev: str, file: str) -> None:
        if file not in repo.files or rev not in (repo.commit, "main"):
            self._json({"error": "Entry not found"}, 404, X_Error_Code="EntryNotFound")
            return
        if self.hub.redirect_loop:
            self._send(302, Location=self.path)
            return
        size = str(repo.files[file].stat().st_size)
        target = f"{self.hub.cdn}/cdn/{repo.name}/{file}?sig=pretend-signature"
        self._send(
            302,
            Location=target,
            X_Linked_Size=size,
            X_Repo_Commit=repo.commit,
            X_Linked_Etag=f'"{repo.oid(file)}"',
        )

    def _cdn(self, method: str, path: str) -> None:
        m = re.fullmatch(r"/cdn/([^/]+/[^/]+)/(.+)", path)
        repo = self.hub.repos.get(m[1]) if m else None
        if m is None or repo is None or m[2] not in repo.files:
            self._send(404, b"NoSuchKey")
            return
        if self.hub.not_gguf:
            self._send(200, HTML, Content_Type="text/html")
            return
        self._serve_file(repo.files[m[2]], f'"{repo.oid(m[2])}"', path)

    def _serve_file(self, file: Path, etag: str, path: str) -> None:
        size = file.stat().st_size
        wanted = _RANGE.fullmatch(self.headers.get("Range", ""))
        if wanted is None or self.hub.ignore_range:
            start, end, status = 0, size - 1, 200
        else:
            start = int(wanted[1])
            end = min(int(wanted[2]) if wanted[2] else size - 1, size - 1)
            status = 206
            if start >= size:
                self._send(416, Content_Range=f"bytes */{size}")
                return
        self.send_response(status)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        with file.open("rb") as handle:
            handle.seek(start)
            left = end - start + 1
            while left > 0:
                chunk = handle.read(min(left, 1 << 16))
                if not chunk:
                    break
                self.wfile.write(chunk)
                self.hub.count_bytes(path, len(chunk))
                left -= len(chunk)


def _tree(repo: FakeRepo) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    dirs = sorted(
        {"/".join(p.split("/")[:i]) for p in repo.files for i in range(1, p.count("/") + 1)}
    )
    entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in dirs]
    for path in sorted(repo.files):
        size = repo.files[path].stat().st_size
        entry: dict[str, Any] = {
            "type": "file",
            "oid": hashlib.sha1(path.encode()).hexdigest(),
            "size": size,
            "path": path,
        }
        if path.endswith(".gguf"):
            entry["lfs"] = {"oid": repo.oid(path), "size": size, "pointerSize": 134}
        entries.append(entry)
    return entries


def _server(hub: FakeHub, role: str) -> ThreadingHTTPServer:
    handler = type(f"{role}Handler", (_Handler,), {"hub": hub, "role": role})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextmanager
def fake_hub() -> Iterator[FakeHub]:
    """A running fake hub and its pretend CDN; add repositories with ``add_repo``."""
    hub = FakeHub()
    servers = [_server(hub, "hub"), _server(hub, "cdn")]
    hub.hub_port, hub.cdn_port = (s.server_address[1] for s in servers)
    try:
        yield hub
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
