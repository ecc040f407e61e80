"""HTTP for the hub layer: the one module that imports httpx.

- Redirects are followed by hand (at most :data:`MAX_REDIRECTS`, a URL seen twice is a loop):
  the hub answers ``resolve`` with a 302 to a CDN on another host.
- ``HF_TOKEN`` goes as ``Authorization: Bearer`` to the hub endpoint's own origin (scheme,
  host, port) only, never to a host a redirect points to; it is never logged or stored.
- One session (:class:`Http`) is one step of a command (a listing, one model's headers) and
  ends within :func:`~moetune.hub.env.hub_timeout` seconds in all: every connect, write and
  read of its sockets waits at most until that deadline (httpx's own timeouts restart on
  every byte, so a server sending one byte a second would never time out).
- A JSON answer is read up to :data:`MAX_JSON_BYTES`.
- Every failure becomes one :mod:`moetune.errors` line that names the host.
"""

from __future__ import annotations

import json
import re
import ssl
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx

from moetune import __version__
from moetune.errors import HubAuthError, HubNotFoundError, NetworkError
from moetune.hub.env import hub_endpoint, hub_timeout, hub_token

MAX_REDIRECTS = 8
MAX_JSON_BYTES = 64 << 20
TIMEOUT = httpx.Timeout(30.0, connect=10.0)  # each operation's own limit, under the deadline
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def host_of(url: str) -> str:
    return urlsplit(url).netloc.rsplit("@", 1)[-1] or url


def shown(url: str) -> str:
    """A URL without its query (signed CDN URLs carry credentials there)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{host_of(url)}{parts.path}"


class Json(NamedTuple):
    status: int  # 200, or 304 when the ETag given still holds
    data: Any
    etag: str | None
    next_url: str | None  # the Link rel="next" page, if any


class Part(NamedTuple):
    data: bytes
    total: int  # the whole file's size
    url: str  # where the bytes came from, after redirects (ask there next time)
    etag: str | None


# --- the deadline -------------------------------------------------------------------------


class Deadline:
    """When a session must be done (a monotonic time), and how long an operation may wait."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def left(self, limit: float | None, error: type[Exception]) -> float:
        """The time an operation may wait (its own ``limit`` at most); ``error`` once the
        deadline has passed."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise error(f"past the {self.seconds:g} s deadline")
        return left if limit is None else min(limit, left)


class _Stream(httpcore.NetworkStream):
    """A socket stream whose every operation waits at most until the deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._inner, self._deadline = inner, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        wait = self._deadline.left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, wait), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's sockets, every connection's operations bounded by the session's deadline."""

    def __init__(self, deadline: Deadline) -> None:
        self._inner, self._deadline = httpcore.SyncBackend(), deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        wait = self._deadline.left(timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, wait, local_address, socket_options)
        return _Stream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        wait = self._deadline.left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, wait, socket_options), self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _client(deadline: Deadline) -> httpx.Client:
    """An httpx client (proxies from the environment as usual) on the deadline's sockets."""
    client = httpx.Client(timeout=TIMEOUT, follow_redirects=False)
    backend = _Backend(deadline)
    transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if not isinstance(pool, httpcore.ConnectionPool):  # httpx changed: a bug to fix here
            raise TypeError(f"no httpcore pool in {type(transport).__name__}")
        pool._network_backend = backend
    return client


class Http:
    """One session with the hub, one step of a command: an httpx client made on the first
    request, every request done by the session's deadline (``timeout`` seconds from now,
    default :func:`~moetune.hub.env.hub_timeout`)."""

    def __init__(self, repo: str | None = None, timeout: float | None = None) -> None:
        self.repo = repo  # the repository asked about, for the model page in auth errors
        self.endpoint = hub_endpoint()
        self.deadline = Deadline(hub_timeout() if timeout is None else timeout)
        self._token = hub_token()
        self._client: httpx.Client | None = None

    def __enter__(self) -> Http:
        return self

    def __exit__(self, *_: object) -> None:
        if self._client is not None:
            self._client.close()

    @property
    def has_token(self) -> bool:
        return self._token is not None

    def _headers(self, url: str, extra: dict[str, str]) -> dict[str, str]:
        headers = {"User-Agent": f"moetune/{__version__}", **extra}
        if self._token and _origin(url) == _origin(self.endpoint):
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    @contextmanager
    def open(self, method: str, url: str, what: str, **extra: str) -> Iterator[httpx.Response]:
        """Send, follow redirects by hand, and yield the final response with its body unread
        (closed afterwards; reading it is bounded by the deadline too). Status errors are
        raised here; 200/206/304 are the caller's."""
        if self._client is None:
            self._client = _client(self.deadline)
        seen: set[str] = set()
        for _ in range(MAX_REDIRECTS + 1):
            seen.add(url)
            with self._failures(url, what):
                request = self._client.build_request(method, url, headers=self._headers(url, extra))
                response = self._client.send(request, stream=True)
                try:
                    if response.status_code not in _REDIRECTS or "location" not in response.headers:
                        self._check(response, url, what)
                        yield response
                        return
                finally:
                    response.close()
            target = _redirect_target(url, response.headers["location"], what)
            if target in seen:
                raise NetworkError(
                    f"redirect loop: {host_of(url)} sends {what} back to {shown(target)}"
                )
            url = target
        raise NetworkError(f"more than {MAX_REDIRECTS} redirects for {what} (last {shown(url)})")

    @contextmanager
    def _failures(self, url: str, what: str) -> Iterator[None]:
        """httpx's errors, sending or reading, as one NETWORK line naming the host."""
        host = host_of(url)
        try:
            yield
        except httpx.TimeoutException as exc:
            limit = (
                f"{self.deadline.seconds:g} s, --timeout"
                if self.deadline.passed
                else type(exc).__name__
            )
            raise NetworkError(
                f"{host} did not answer in time for {what} ({limit})",
                hint="check the network, or try again (--timeout SECONDS waits longer)",
            ) from None
        except httpx.InvalidURL as exc:
            raise NetworkError(f"cannot ask {host} for {what}: {_one_line(exc)}") from None
        except httpx.HTTPError as exc:
            reason = _one_line(exc) or type(exc).__name__
            raise NetworkError(
                f"cannot reach {host} for {what}: {reason}",
                hint="check the network, or set MODEL_ENDPOINT/HF_ENDPOINT",
            ) from None

    def _check(self, response: httpx.Response, url: str, what: str) -> None:
        status, host = response.status_code, host_of(url)
        if status in (200, 206, 304):
            return
        code = response.headers.get("x-error-code", "")
        if status in (401, 403) and code != "RepoNotFound":
            raise self._auth_error(status, host, what, gated=code == "GatedRepo")
        if status in (401, 403, 404):
            raise HubNotFoundError(
                f"no {what} on {host} ({status})",
                hint="check the name; a private repository needs HF_TOKEN"
                if status != 404
                else None,
            )
        raise NetworkError(f"{host} answered {status} for {what}")

    def _auth_error(self, status: int, host: str, what: str, *, gated: bool) -> HubAuthError:
        kind = "gated" if gated else "gated or private"
        page = f"{self.endpoint}/{self.repo}" if self.repo else "the model page"
        if self._token:
            return HubAuthError(
                f"{host} refused HF_TOKEN for {what} ({status}, {kind}): the token cannot read "
                "it; for a gated model, accept its license on the model page",
                hint=f"log in on {self.endpoint}, open the model page ({page}) and accept",
            )
        return HubAuthError(
            f"{what} is {kind} ({status} from {host}): set HF_TOKEN to a token that can read "
            "it, and for a gated model accept its license on the model page",
            hint=f"create a token on {self.endpoint}/settings/tokens",
        )

    def get_json(self, url: str, what: str, etag: str | None = None) -> Json:
        extra = {"Accept": "application/json"}
        if etag:
            extra["If-None-Match"] = etag
        with self.open("GET", url, what, **extra) as response:
            if response.status_code == 304:
                return Json(304, None, response.headers.get("etag") or etag, None)
            body = _read_at_most(response, MAX_JSON_BYTES, what)
            try:
                data = json.loads(body)
                next_link = response.links.get("next", {}).get("url")
                next_url = _redirect_target(url, next_link, what) if next_link else None
            except (ValueError, RecursionError):
                raise NetworkError(
                    f"{host_of(url)} answered {what} with something that is not JSON"
                ) from None
            return Json(200, data, response.headers.get("etag"), next_url)

    def head_etag(self, url: str, what: str) -> str | None:
        with self.open("HEAD", url, what) as response:
            etag = response.headers.get("etag")
            return str(etag) if etag is not None else None

    def get_range(self, url: str, start: int, end: int, what: str) -> Part:
        """Bytes ``start..end`` (inclusive) of the file at ``url``; a 200 with more than that
        (a server ignoring Range) is refused without reading its body."""
        wanted = end - start + 1
        with self.open("GET", url, what, Range=f"bytes={start}-{end}") as response:
            final, etag = str(response.url), response.headers.get("etag")
            if response.status_code == 206:
                total = _content_range(response, start, what)
                return Part(_read_at_most(response, wanted, what), total, final, etag)
            length = response.headers.get("content-length", "")
            if (
                response.status_code == 200
                and start == 0
                and length.isdigit()
                and int(length) <= wanted
            ):
                data = _read_at_most(response, wanted, what)  # the whole (small) file
                return Part(data, len(data), final, etag)
            raise NetworkError(
                f"{host_of(final)} ignores Range requests (answered {response.status_code} "
                f"with the whole of {what}); moetune reads headers only and will not "
                "download the file",
                hint="use the hub itself or a server that answers Range with 206",
            )


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _redirect_target(url: str, location: str, what: str) -> str:
    """``location`` (a redirect's or a Link's) made absolute against ``url``."""
    try:
        target = urljoin(url, location)
    except ValueError:
        raise NetworkError(f"{host_of(url)} points {what} to a malformed URL") from None
    if urlsplit(target).scheme.lower() not in ("http", "https"):
        raise NetworkError(f"{host_of(url)} points {what} to {shown(target)}, not http(s)")
    return target


def _content_range(response: httpx.Response, start: int, what: str) -> int:
    match = _CONTENT_RANGE.fullmatch(response.headers.get("content-range", "").strip())
    if match is None or int(match[1]) != start or match[3] == "*":
        raise NetworkError(f"{host_of(str(response.url))} sent a bad Content-Range for {what}")
    return int(match[3])


def _read_at_most(response: httpx.Response, limit: int, what: str) -> bytes:
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise NetworkError(
                f"{host_of(str(response.url))} sent more than {limit} bytes for {what}"
            )
    return b"".join(chunks)
