"""Speed points past what a real measurement can be (issue 38): each such llama-bench row is
refused at import, naming its field and value, the rest of the file kept; a stored file with
one is skipped with a warning. Either way every later `plan` answers as before."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from support.helpers import moetune
from support.speed_fit import good_rows

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "models" / "Qwen3-30B-A3B-Q4_K_M.header.gguf"
CUDA_JSON = ROOT / "tests" / "data" / "llama_bench" / "readme_rtx4080_qwen2.5_7b.json"
TIMEOUT_S = 60


HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("n_cpu_moe", {"n_cpu_moe": 2**63}, "n_cpu_moe"),
    ("n_prompt", {"n_prompt": 2**63}, "n_prompt"),
    ("avg_ts", {"avg_ts": 1e308}, "avg_ts"),
    ("avg_ts digits", {"avg_ts": 10**400}, "avg_ts"),
    ("stddev_ts digits", {"stddev_ts": 10**400}, "stddev_ts"),
    ("samples_ts nan", {"samples_ts": [float("nan")]}, "samples_ts"),
    ("tensor_split nan", {"tensor_split": "nan/1"}, "tensor_split"),
    ("n_gpu_layers", {"n_gpu_layers": 10**9}, "n_gpu_layers"),
    ("n_threads", {"n_threads": 10**6}, "n_threads"),
    ("n_depth", {"n_depth": 2**40}, "n_depth"),
    ("ubatches", {"n_prompt": 2**24, "n_ubatch": 1}, "the point is refused: n_prompt 16777216"),
]


def plan_answers(home: Path) -> None:
    result = moetune("plan", str(EXAMPLE), "--vram", "24G", home=home, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "INTERNAL" not in result.stderr
    assert "skipping" not in result.stderr
    assert "speed (calibrated" in result.stdout or "uncalibrated" not in result.stdout


@pytest.mark.parametrize(("change", "field"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
def test_a_hostile_row_is_refused_and_plan_answers(
    tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    home = Path(os.environ["MOETUNE_HOME"])
    rows = good_rows()
    rows.insert(3, rows[3] | change)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(rows))  # NaN as JSON's NaN, as Python writes it
    result = moetune("calibrate", str(path), home=home, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 points, 1 row refused" in result.stdout, result.stdout
    assert f"row 4: {field}" in result.stdout, result.stdout
    assert "8 speed points kept" in result.stdout
    (stored,) = (home / "speed").glob("*.json")
    assert "NaN" not in stored.read_text() and "Infinity" not in stored.read_text()
    again = moetune("calibrate", str(path), "--json", home=home, timeout=TIMEOUT_S)
    assert again.returncode == 0 and json.loads(again.stdout)["total_points"] == 8
    assert json.loads(again.stdout)["files"][0]["refused"] == 1
    assert "skipping" not in again.stderr
    plan_answers(home)


def test_many_refused_rows_are_counted_not_each_named(tmp_path: Path) -> None:
    home = Path(os.environ["MOETUNE_HOME"])
    rows = good_rows()
    rows += [rows[0] | {"avg_ts": 1e300} for _ in range(2000)]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(rows))
    result = moetune("calibrate", str(path), home=home, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert "8 points, 2000 rows refused" in result.stdout, result.stdout
    assert result.stdout.count("\n  refused: ") == 3 and "and 1997 more refused" in result.stdout


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("n_prompt",), 2**63),
        (("placement", "n_cpu_moe"), 2**63),
        (("tps",), 1e308),
        (("samples_tps",), [None]),
        (("placement", "tensor_split"), [None, 1.0]),
    ],
)
def test_a_hand_edited_stored_point_is_skipped(
    tmp_path: Path, where: tuple[str, ...], value: Any
) -> None:
    home = Path(os.environ["MOETUNE_HOME"])
    bench = tmp_path / "good.json"
    bench.write_text(json.dumps(good_rows()))
    assert moetune("calibrate", str(bench), home=home).returncode == 0
    (stored,) = (home / "speed").glob("*.json")
    data = json.loads(stored.read_text())
    target = data["points"][0]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    stored.write_text(json.dumps(data))
    result = moetune("plan", str(EXAMPLE), "--vram", "24G", home=home, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert "skipping a broken speed file" in result.stderr and stored.name in result.stderr
    assert where[-1] in result.stderr
    # importing the file again writes its points again: the store heals
    again = moetune("calibrate", str(bench), home=home)
    assert again.returncode == 0 and "8 speed points kept" in again.stdout, again.stdout
    plan_answers(home)
