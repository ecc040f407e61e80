"""The runtime overhead measured on a card and recorded in its hardware profile: a `moetune
run` on the rig's CUDA card (tests/support/cuda_rig.py: a ggml-rpc-server shown as CUDA0,
NVML faked), then plans for that card."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from moetune.store.hardware import shipped_hardware_dir
from moetune.units import MIB

from support.cuda_rig import ENV_ENDPOINT, ENV_OVERHEAD, TESTS, pynvml_folder, tool_folder
from support.factory import ModelFactory
from support.helpers import moetune

CTX = "1024"
OVERHEAD_MIB = 160  # what the rig's card holds beyond llama.cpp's buffers (not the 512 default)


@pytest.fixture
def rig(tmp_path: Path, rpc: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The rig's tools and NVML for moetune children; their MOETUNE_HOME."""
    tools = tool_folder(tmp_path / "bin")
    nvml = pynvml_folder(tmp_path / "nvml")
    monkeypatch.setenv("MOETUNE_LLAMA_SERVER", str(tools / "llama-server"))
    monkeypatch.setenv(ENV_ENDPOINT, rpc)
    monkeypatch.setenv(ENV_OVERHEAD, str(OVERHEAD_MIB))
    paths = [str(nvml), str(TESTS), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    return tmp_path / "home"


def _plan(model: Path, home: Path, *args: str) -> tuple[dict[str, object], str]:
    flags = ("--ctx", CTX, "--cache-type", "q8_0", "--ram", "64G", *args)
    data = moetune("plan", str(model), *flags, "--json", home=home)
    assert data.returncode == 0, data.stderr
    text = moetune("plan", str(model), *flags, home=home)
    assert text.returncode == 0, text.stderr
    payload: dict[str, object] = json.loads(data.stdout)
    return payload, text.stdout


def test_run_records_the_measured_overhead(model_factory: ModelFactory, rig: Path) -> None:
    """The run measures the card with NVML, records NVML's use minus llama.cpp's buffers
    after the fill (here exactly the rig's 160 MiB) in the user's own profile of the card
    (the shipped file untouched, its comments copied), and a following plan --gpu for the
    card (or with the card detected) counts it and says so; a second run's smaller figure
    does not replace it."""
    model = model_factory("qwen3moe", n_layers=8)
    shipped = shipped_hardware_dir().joinpath("rtx4090.toml").read_text("utf-8")
    before, _ = _plan(model, rig, "--gpu", "rtx4090")
    assert before["devices"][0]["overhead_bytes"] == 512 * MIB  # type: ignore[index]
    args = ("run", str(model), "--target-vram", "700M", "--ctx", CTX, "--cache-type", "q8_0")
    done = moetune(*args, "--json", home=rig)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["device"] == "CUDA0" and "process memory on GPU 0" in data["probe"]
    [recorded] = data["overheads"]
    path = rig / "hardware" / "rtx4090.toml"
    assert recorded == {
        "device": "CUDA0",
        "gpu": "NVIDIA GeForce RTX 4090",
        "measured_bytes": OVERHEAD_MIB * MIB,
        "profile": "rtx4090",
        "path": str(path),
        "kept_mib": OVERHEAD_MIB,
        "recorded": True,
    }
    assert data["best"]["device_overhead"] == [OVERHEAD_MIB * MIB]
    assert f"runtime overhead measured {OVERHEAD_MIB} MiB, recorded in {path}" in done.stderr
    text = path.read_text()
    assert (
        text.startswith(shipped.rstrip("\n")) and f"runtime_overhead_mib = {OVERHEAD_MIB}\n" in text
    )
    assert shipped_hardware_dir().joinpath("rtx4090.toml").read_text("utf-8") == shipped

    after, shown = _plan(model, rig, "--gpu", "rtx4090")
    assert after["devices"][0]["overhead_bytes"] == OVERHEAD_MIB * MIB  # type: ignore[index]
    why = after["overhead_measured"]["CUDA0"]  # type: ignore[index]
    assert why.startswith("measured on this card (moetune run on ") and str(path) in why
    assert f"runtime overhead {OVERHEAD_MIB}.00 MiB on CUDA0, measured on this card" in shown
    detected, _ = _plan(model, rig)  # the card detected (NVML): its profile's figure too
    assert detected["devices"][0]["overhead_bytes"] == OVERHEAD_MIB * MIB  # type: ignore[index]
    other, _ = _plan(model, rig, "--gpu", "rtx3090")  # another card: still the default
    assert other["devices"][0]["overhead_bytes"] == 512 * MIB  # type: ignore[index]

    os.environ[ENV_OVERHEAD] = str(OVERHEAD_MIB - 40)  # the monkeypatch restores it
    again = moetune(*args, "--retune", "--json", home=rig)
    assert again.returncode == 0, again.stderr
    [kept] = json.loads(again.stdout)["overheads"]
    assert kept["measured_bytes"] == (OVERHEAD_MIB - 40) * MIB and kept["recorded"] is False
    assert kept["kept_mib"] == OVERHEAD_MIB and f"runtime_overhead_mib = {OVERHEAD_MIB}\n" in (
        path.read_text()
    )
