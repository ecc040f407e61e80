"""HTTP for the hub layer: the one module that imports httpx.

- Redirects are followed by hand (at most :data:`MAX_REDIRECTS`, a URL seen twice is a loop):
  the hub answers ``resolve`` with a 302 to a CDN on another host.
- ``HF_TOKEN`` goes as ``Authorization: Bearer`` to the hub endpoint's own origin (scheme,
  host, port) only, never to a host a redirect points to; it is never logged or stored.
- Every failure becomes one :mod:`moetune.errors` line that names the host.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple
from urllib.parse import urljoin, urlsplit

import httpx

from moetune import __version__
from moetune.errors import HubAuthError, HubNotFoundError, NetworkError
from moetune.hub.env import hub_endpoint, hub_token

MAX_REDIRECTS = 8
TIMEOUT = httpx.Timeout(30.0, connect=10.0)
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


class Http:
    """One session with the hub: an httpx client made on the first request."""

    def __init__(self, repo: str | None = None) -> None:
        self.repo = repo  # the repository asked about, for the model page in auth errors
        self.endpoint = hub_endpoint()
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
        (closed afterwards). Status errors are raised here; 200/206/304 are the caller's."""
        if self._client is None:
            self._client = httpx.Client(timeout=TIMEOUT, follow_redirects=False)
        seen: set[str] = set()
        for _ in range(MAX_REDIRECTS + 1):
            seen.add(url)
            request = self._client.build_request(method, url, headers=self._headers(url, extra))
            response = self._send(request, url)
            if response.status_code not in _REDIRECTS or "location" not in response.headers:
                try:
                    self._check(response, url, what)
                    yield response
                finally:
                    response.close()
                return
            response.close()
            target = urljoin(url, response.headers["location"])
            if target in seen:
                raise NetworkError(
                    f"redirect loop: {host_of(url)} sends {what} back to {shown(target)}"
                )
            url = target
        raise NetworkError(f"more than {MAX_REDIRECTS} redirects for {what} (last {shown(url)})")

    def _send(self, request: httpx.Request, url: str) -> httpx.Response:
        assert self._client is not None
        host = host_of(url)
        try:
            return self._client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise NetworkError(
                f"{host} did not answer in time ({type(exc).__name__})",
                hint="check the network, or try again",
            ) from None
        except httpx.HTTPError as exc:
            reason = str(exc).strip() or type(exc).__name__
            raise NetworkError(
                f"cannot reach {host}: {reason}",
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
            response.read()
            try:
                data = response.json()
            except ValueError:
                raise NetworkError(
                    f"{host_of(url)} answered {what} with something that is not JSON"
                ) from None
            next_link = response.links.get("next", {}).get("url")
            return Json(
                200,
                data,
                response.headers.get("etag"),
                urljoin(url, next_link) if next_link else None,
            )

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
            length = response.headers.get("content-length")
            if response.status_code == 200 and start == 0 and length and int(length) <= wanted:
                data = _read_at_most(response, wanted, what)  # the whole (small) file
                return Part(data, len(data), final, etag)
            raise NetworkError(
                f"{host_of(final)} ignores Range requests (answered {response.status_code} "
                f"with the whole of {what}); moetune reads headers only and will not "
                "download the file",
                hint="use the hub itself or a server that answers Range with 206",
            )


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
            raise NetworkError(f"{host_of(str(response.url))} sent more than asked for {what}")
    return b"".join(chunks)
