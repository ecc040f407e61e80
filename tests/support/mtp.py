"""The MTP (NextN) models and settings: a tiny glm4moe/qwen35moe with one NextN block, the
settings and estimate with ``--spec-type draft-mtp``."""

from __future__ import annotations

from pathlib import Path

from moetune.core.extras import Extras
from moetune.core.facts import ModelFacts
from moetune.core.memory import Settings
from moetune.core.mtp import MtpEstimate, mtp_memory
from moetune.core.placement import Placement, split_weights
from moetune.jobs.loader import with_extras

from support.factory import ModelFactory

N_LAYERS = 4


N_CTX = 4096


MTP_ARCHS = ("glm4moe", "qwen35moe")


def mtp_model(models: ModelFactory, arch: str) -> Path:
    """The tiny ``arch`` model with one NextN block after its trunk."""
    return models(arch, n_layers=N_LAYERS, n_nextn=1)


def mtp_settings(kind: str = "rpc") -> Settings:
    return Settings(
        n_ctx=N_CTX, type_k="q8_0", type_v="q8_0", gpu_overhead_bytes=0, device_kind=kind
    )


def mtp_estimate(f: ModelFacts, placement: Placement, n_devices: int) -> MtpEstimate:
    split = split_weights(f, placement, n_devices)
    return mtp_memory(
        f,
        mtp_settings(),
        homes=split.homes,
        moves=split.moves,
        kinds=("rpc",) * n_devices,
        placement=placement,
    )


def with_mtp(f: ModelFacts, *args: str) -> tuple[Settings, Extras | None]:
    return with_extras(mtp_settings(), f, ("--spec-type", "draft-mtp", *args))
