"""What a llama-server binary says about itself, as data: its devices, version and build
(llamacpp/info.py parses its output into these; the store keeps them in a tuned profile)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict


class Device(BaseModel):
    """One non-CPU device as ``llama-server --list-devices`` prints it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # CUDA0, Vulkan0, RPC0, ...
    description: str  # NVIDIA GeForce RTX 4090, 127.0.0.1:50052, ...
    total_bytes: int
    free_bytes: int


class ServerInfo(BaseModel):
    """What a llama-server binary says about itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    version: str | None  # "0.6.0-dev", "b6123", ...
    build_number: int | None  # None when the build did not record it (prints "build 0")
    commit: str | None  # None when the build did not record it (prints "commit unknown")
    compiler: str | None
    target: str | None
    devices: tuple[Device, ...]  # empty on a CPU-only build
