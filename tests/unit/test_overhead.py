"""The CUDA runtime overhead's default from public figures (core/overhead.py): each figure is the
posted data's (tests/data/public_cuda/), the default is the largest rounded up to 64 MiB, and a
plan says how its overhead was chosen."""

from __future__ import annotations

from moetune.core.overhead import (
    DEFAULT_CUDA_OVERHEAD_BYTES,
    PUBLIC_FIGURES,
    STEP_MIB,
    default_overhead_why,
)
from moetune.core.settings import DEFAULT_GPU_OVERHEAD_BYTES
from moetune.units import MIB

from support.helpers import EXAMPLE_QWEN, cli
from support.public_cuda import load


def _sum(value: float | list[float]) -> float:
    return float(sum(value)) if isinstance(value, list) else float(value)


def test_each_figure_is_the_posted_data() -> None:
    """The unaccounted column of a breakdown table, or nvidia-smi's process figure minus the
    buffers llama.cpp logged, as the data files hold them."""
    breakdown = load("pr15860_3x4090_breakdown_example.json")
    unaccounted = {p["device"]: p["unaccounted"] for p in breakdown["points"]}
    for p in breakdown["points"]:  # the table's own arithmetic (each column floored to MiB)
        assert p["total"] == p["free"] + p["self"] + p["unaccounted"]
        assert 0 <= p["self"] - (p["model"] + p["context"] + p["compute"]) <= 2
    smi = load("ik822_rtx3070_gpt_oss_20b_ncmoe99.json")["points"][0]
    buffers = sum(_sum(smi[k]) for k in ("model_buffer", "kv_buffer", "compute"))
    expected = {
        ("RTX 3070", round(smi["nvidia_smi_process"] - buffers, 2)),
        ("RTX 4090", unaccounted["CUDA0"]),
        ("RTX 4090", unaccounted["CUDA1"]),
    }
    assert unaccounted["CUDA1"] == unaccounted["CUDA2"]
    assert {(f.gpu, round(f.mib, 2)) for f in PUBLIC_FIGURES} == expected
    assert all(f.source.startswith("https://github.com/") for f in PUBLIC_FIGURES)


def test_default_is_the_largest_figure_rounded_up() -> None:
    largest = max(f.mib for f in PUBLIC_FIGURES)
    assert DEFAULT_CUDA_OVERHEAD_BYTES == DEFAULT_GPU_OVERHEAD_BYTES
    assert largest <= DEFAULT_CUDA_OVERHEAD_BYTES / MIB < largest + STEP_MIB
    assert DEFAULT_CUDA_OVERHEAD_BYTES % (STEP_MIB * MIB) == 0
    assert f"{largest:.0f} MiB" in default_overhead_why()


def test_plan_says_how_the_overhead_was_chosen() -> None:
    code, out, _ = cli("plan", str(EXAMPLE_QWEN), "--vram", "16G", "--ram", "64G")
    assert code == 0
    text = " ".join(out.split())
    assert "runtime overhead 512.00 MiB on CUDA0: the largest public figure" in text
    code, out, _ = cli(
        "plan", str(EXAMPLE_QWEN), "--vram", "16G,8G", "--overhead", "300M,512M", "--ram", "64G"
    )
    assert code == 0
    text = " ".join(out.split())
    assert "runtime overhead given (--overhead): CUDA0 300.00 MiB" in text
    assert "512.00 MiB on CUDA1: the largest public figure" in text
