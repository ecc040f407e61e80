"""`inspect --json` and `plan --json` against golden files.

The golden files under tests/golden/ were written by this test (``MOETUNE_UPDATE_GOLDEN=1``)
before the code was reorganised, so a refactor that changes any figure, field or exit code
fails here.  Paths are replaced by the model's file name, and the host's physical core count
(fixed at ``CORES``; ``-t N``, ``threads``) by ``<cores>``, so the files do not depend on the
machine.  RAM is always given with ``--ram``.  Regenerate only for an intended change, and say
so in the commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from moetune.cli import app

from support.factory import QWEN3_235B_A22B, ModelFactory
from support.helpers import EXAMPLE_GPT_OSS, EXAMPLE_QWEN

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("MOETUNE_UPDATE_GOLDEN") == "1"
TINY = ("--headroom", "0", "--overhead", "0", "--ram", "1G")

# (case name, model key, arguments after the model)
CASES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("inspect-qwen", "qwen", ("inspect", "--json")),
    ("inspect-gpt-oss", "gpt-oss", ("inspect", "--json")),
    ("inspect-qwen3moe-tensors", "qwen3moe", ("inspect", "--json", "--tensors")),
    ("inspect-gpt-oss-tiny", "tiny-gpt-oss", ("inspect", "--json")),
    ("inspect-deepseek2", "deepseek2", ("inspect", "--json")),
    ("inspect-glm4moe", "glm4moe", ("inspect", "--json")),
    ("inspect-qwen35moe", "qwen35moe", ("inspect", "--json")),
    ("inspect-qwen3-dense", "qwen3", ("inspect", "--json")),
    ("inspect-235b", "235b", ("inspect", "--json")),
    ("plan-qwen-24g", "qwen", ("plan", "--json", "--vram", "24G", "--ram", "64G")),
    ("plan-qwen-16g", "qwen", ("plan", "--json", "--vram", "16G", "--ram", "64G")),
    (
        "plan-qwen-12g-f16",
        "qwen",
        ("plan", "--json", "--vram", "12G", "--ram", "64G", "--cache-type", "f16"),
    ),
    (
        "plan-qwen-16g-q4-8k",
        "qwen",
        (
            "plan",
            "--json",
            "--vram",
            "16G",
            "--ram",
            "64G",
            "--cache-type",
            "q4_0",
            "--ctx",
            "8192",
        ),
    ),
    (
        "plan-qwen-16g-ctxmax",
        "qwen",
        ("plan", "--json", "--vram", "16G", "--ram", "64G", "--ctx", "max"),
    ),
    (
        "plan-qwen-16g-ctxmax-n20",
        "qwen",
        ("plan", "--json", "--vram", "16G", "--ram", "64G", "--ctx", "max", "--n-cpu-moe", "20"),
    ),
    (
        "plan-qwen-16g-np2",
        "qwen",
        ("plan", "--json", "--vram", "16G", "--ram", "64G", "--parallel", "2"),
    ),
    (
        "plan-qwen-16g-ub2048",
        "qwen",
        ("plan", "--json", "--vram", "16G", "--ram", "64G", "--ubatch", "2048"),
    ),
    (
        "plan-qwen-20g-target",
        "qwen",
        (
            "plan",
            "--json",
            "--vram",
            "24G",
            "--target-vram",
            "20G",
            "--ram",
            "64G",
            "--headroom",
            "1G",
        ),
    ),
    ("plan-qwen-4g-nofit", "qwen", ("plan", "--json", "--vram", "4G", "--ram", "64G")),
    ("plan-gpt-oss-24g-ram16g", "gpt-oss", ("plan", "--json", "--vram", "24G", "--ram", "16G")),
    ("plan-gpt-oss-24g", "gpt-oss", ("plan", "--json", "--vram", "24G", "--ram", "64G")),
    ("plan-gpt-oss-80g", "gpt-oss", ("plan", "--json", "--vram", "80G", "--ram", "64G")),
    (
        "plan-gpt-oss-16g-ctxmax",
        "gpt-oss",
        ("plan", "--json", "--vram", "16G", "--ram", "128G", "--ctx", "max"),
    ),
    ("plan-qwen3moe-tiny", "qwen3moe", ("plan", "--json", "--vram", "24M", "--ctx", "4096", *TINY)),
    (
        "plan-qwen3moe-tiny-ctxmax",
        "qwen3moe",
        ("plan", "--json", "--vram", "24M", "--ctx", "max", *TINY),
    ),
    (
        "plan-gpt-oss-tiny",
        "tiny-gpt-oss",
        ("plan", "--json", "--vram", "24M", "--ctx", "4096", *TINY),
    ),
    (
        "plan-deepseek2-tiny",
        "deepseek2",
        ("plan", "--json", "--vram", "20M", "--ctx", "4096", *TINY),
    ),
    ("plan-glm4moe-tiny", "glm4moe", ("plan", "--json", "--vram", "22M", "--ctx", "4096", *TINY)),
    (
        "plan-qwen35moe-tiny",
        "qwen35moe",
        ("plan", "--json", "--vram", "20M", "--ctx", "4096", *TINY),
    ),
    (
        "plan-qwen35moe-tiny-f16",
        "qwen35moe",
        ("plan", "--json", "--vram", "20M", "--ctx", "2048", "--cache-type", "f16", *TINY),
    ),
    ("plan-qwen3-dense-tiny", "qwen3", ("plan", "--json", "--vram", "14M", "--ctx", "4096", *TINY)),
    (
        "plan-qwen3moe-tiny-nofit",
        "qwen3moe",
        ("plan", "--json", "--vram", "6M", "--ctx", "4096", *TINY),
    ),
    ("plan-qwen3-dense-cpu", "qwen3", ("plan", "--json", "--vram", "2M", "--ctx", "4096", *TINY)),
    ("plan-235b-24g", "235b", ("plan", "--json", "--vram", "24G", "--ram", "256G")),
    (
        "plan-235b-48g-ctxmax",
        "235b",
        ("plan", "--json", "--vram", "48G", "--ram", "256G", "--ctx", "max"),
    ),
)


@pytest.fixture(scope="module")
def golden_files(tiny_models: dict[str, Path], model_factory: ModelFactory) -> dict[str, Path]:
    """The file each case's ``key`` names."""
    big = model_factory.header_only("Qwen3-235B-A22B-Q4_K_M.gguf", shape=QWEN3_235B_A22B)
    return {
        "qwen": EXAMPLE_QWEN,
        "gpt-oss": EXAMPLE_GPT_OSS,
        "tiny-gpt-oss": tiny_models["gpt-oss"],
        "235b": big,
        **{k: v for k, v in tiny_models.items() if k != "gpt-oss"},
    }


def _normalise(value: Any, cores: str) -> Any:
    """``threads`` and the number after ``-t`` become ``<cores>``."""
    if isinstance(value, dict):
        return {
            k: "<cores>" if k == "threads" and v is not None else _normalise(v, cores)
            for k, v in value.items()
        }
    if isinstance(value, list):
        out = [_normalise(v, cores) for v in value]
        for i in range(1, len(out)):
            if out[i - 1] == "-t" and out[i] == cores:
                out[i] = "<cores>"
        return out
    return value


# the host's physical cores as the plans see them: the CPU's FLOP/s of a forecast rests on
# them (core/figures.py), so the files hold a fixed count, not this machine's
CORES = 8


def _run(model: Path, args: tuple[str, ...]) -> dict[str, Any]:
    command, *rest = args
    result = CliRunner().invoke(app, [command, str(model), *rest])
    cores = str(CORES)
    text = result.stdout.replace(str(model), model.name)
    payload = json.loads(text) if text.strip() else None
    return {
        "args": [command, model.name, *rest],
        "exit_code": result.exit_code,
        "stdout": _normalise(payload, cores),
    }


@pytest.mark.parametrize(("name", "key", "args"), CASES, ids=[c[0] for c in CASES])
def test_golden(
    golden_files: dict[str, Path],
    name: str,
    key: str,
    args: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moetune.hardware import host

    monkeypatch.setattr(host, "physical_cores", lambda cpu_sysfs=host.CPU_SYSFS: CORES)
    got = _run(golden_files[key], args)
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    assert got == json.loads(path.read_text(encoding="utf-8"))
