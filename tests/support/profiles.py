"""A tuned profile built by hand, for the tests of what is made from one (aliases, exports)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from moetune.store.tuned import (
    BuildIdentity,
    DeviceIdentity,
    ModelIdentity,
    ProfileStore,
    TunedFigures,
    TunedPlacement,
    TunedProfile,
    TuneKey,
    TuneSettings,
    model_identity,
    new_profile,
    profile_name,
)
from moetune.units import GIB, MIB

TUNE_COMMAND = [
    "moetune",
    "run",
    "/models/m.gguf",
    "--server",
    "/usr/bin/llama-server",
    "--target-vram",
    "22G",
    "--ctx",
    "32k",
    "--cache-type",
    "q8_0",
    "--",
    "--rpc",
    "10.0.0.2:50052",
]


def make_profile(
    command: list[str],
    file_name: str = "m.gguf",
    identity_path: str = "/models/m.gguf",
    n_ctx: int = 32768,
) -> TunedProfile:
    model = ModelIdentity(
        file_name=file_name, file_bytes=1, header_sha256="0" * 64, path=identity_path
    )
    gpu = DeviceIdentity(name="NVIDIA GeForce RTX 4090", device="CUDA0", vram_total_bytes=24 * GIB)
    build = BuildIdentity(
        build_number=6500,
        commit="abc1234",
        version="b6500",
        binary="/usr/bin/llama-server",
        binary_fingerprint="1:1",
    )
    settings = TuneSettings(
        n_ctx=n_ctx,
        type_k="q8_0",
        type_v="q8_0",
        target_bytes=22 * GIB,
        extra_args=["--rpc", "10.0.0.2:50052"],
        command=TUNE_COMMAND,
    )
    key = TuneKey(model=model, gpu=gpu, llama_cpp=build, settings=settings)
    return TunedProfile(
        name=profile_name(key),
        tuned_at="2025-01-01T00:00:00+00:00",
        model=model,
        gpu=gpu,
        llama_cpp=build,
        settings=settings,
        placement=TunedPlacement(n_cpu_moe=12),
        measured=TunedFigures(
            vram_bytes=21 * GIB,
            ttft_s=0.4,
            decode_tps=41.5,
            decode_tps_min=40.2,
            decode_tps_max=42.0,
            repeats=3,
            prompt_tps=900.0,
        ),
        command=command,
    )


GOOD = """name = "Test GPU"
vram = "12G"
memory_bandwidth_gb_s = 360
pcie_gen = 4
pcie_lanes = 16
"""


def a_key(model: Path, **changes: Any) -> TuneKey:
    key = TuneKey(
        model=model_identity(model),
        gpu=DeviceIdentity(
            name="NVIDIA GeForce RTX 4090", device="CUDA0", vram_total_bytes=24564 * MIB
        ),
        llama_cpp=BuildIdentity(
            build_number=11434,
            commit="0123abc",
            version="b11434",
            binary="/usr/bin/llama-server",
            binary_fingerprint="1:2",
        ),
        settings=TuneSettings(n_ctx=4096, type_k="q8_0", type_v="q8_0", target_bytes=22 * GIB),
    )
    return key.model_copy(update=changes)


def saved(key: TuneKey, n: int = 5) -> Path:
    measured = TunedFigures(vram_bytes=21 * GIB, ttft_s=0.2, decode_tps=50.0, prompt_tps=800.0)
    profile = new_profile(key, n, measured, ["/usr/bin/llama-server", "-m", "x"])
    return ProfileStore().save(profile)
