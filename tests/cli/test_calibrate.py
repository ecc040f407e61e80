"""`moetune calibrate FILE...`: llama-bench's and moetune's results imported as speed points,
each kept once; bad input is one line and a named code (with --json, the error document);
`bench` keeps its measurements as points."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from moetune.errors import ExitCode
from moetune.report import SCHEMA_VERSION, to_json
from moetune.report.payloads import bench_payload

from support.bench import bench_result
from support.helpers import cli

if TYPE_CHECKING:
    from moetune.records.results import BenchResult

DATA = Path(__file__).resolve().parents[1] / "data" / "llama_bench"
CUDA_JSON = DATA / "readme_rtx4080_qwen2.5_7b.json"
CUDA_JSONL = DATA / "readme_rtx4080_qwen2.5_7b.jsonl"


def speed_files() -> list[Path]:
    return sorted((Path(os.environ["MOETUNE_HOME"]) / "speed").glob("*.json"))


def calibrate(*args: str) -> dict[str, Any]:
    code, out, err = cli("calibrate", *args, "--json")
    assert code == 0, out + err
    data: dict[str, Any] = json.loads(out)
    assert data["schema_version"] == SCHEMA_VERSION
    return data


def test_a_cuda_machines_json_and_jsonl() -> None:
    data = calibrate(str(CUDA_JSON), str(CUDA_JSONL))
    assert [f["tool"] for f in data["files"]] == ["llama-bench", "llama-bench"]
    assert [len(f["points"]) for f in data["files"]] == [2, 2]
    first = data["files"][0]["points"][1]
    assert first["machine"]["gpu_info"] == "NVIDIA GeForce RTX 4080"
    assert (first["kind"], first["n_gen"], first["tps"]) == ("generation", 128, 118.881588)
    assert data["total_points"] == 4 and len(speed_files()) == 2
    assert all(Path(f["saved_path"]).is_file() for f in data["files"])


def test_text_names_the_model_machine_and_store() -> None:
    code, out, err = cli("calibrate", str(CUDA_JSON))
    assert code == 0, err
    assert "Qwen2.5-7B-Instruct-Q4_K_M.gguf\n  on AMD Ryzen 7 7800X3D 8-Core Processor + " in out
    assert "NVIDIA GeForce RTX 4080" in out
    assert "pp512" in out and "tg128" in out and "7100" in out and "119" in out
    assert "2 points" in out and "kept in" in out


def test_importing_again_keeps_nothing_twice(tmp_path: Path) -> None:
    calibrate(str(CUDA_JSON))
    copy = tmp_path / "copy.json"
    copy.write_text(CUDA_JSON.read_text())
    again = calibrate(str(CUDA_JSON), str(copy))
    assert [f["already_saved"] for f in again["files"]] == [True, True]
    assert again["total_points"] == 2 and len(speed_files()) == 1


def test_a_moetune_bench_result(tmp_path: Path) -> None:
    result = bench_result()
    path = tmp_path / "bench.json"
    path.write_text(to_json(bench_payload(result)) + "\n")
    data = calibrate(str(path))
    (imported,) = data["files"]
    assert imported["tool"] == "moetune bench"
    assert len(imported["points"]) == 2 * len(result.results)
    assert {p["source"]["config"] for p in imported["points"]} == {"plan", "cpu-moe"}
    url = tmp_path / "url.json"
    url.write_text(to_json(bench_payload(result.model_copy(update={"server_url": "http://x"}))))
    code, _, err = cli("calibrate", str(url))
    assert code == ExitCode.BAD_VALUE and "no measurements of a placement" in err


def _error(args: list[str], code: ExitCode) -> tuple[str, dict[str, Any]]:
    """The one stderr line, and the --json error document (nothing kept either way)."""
    status, out, err = cli("calibrate", *args)
    assert status == code, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moetune: error: "), err
    assert f"[{code.name}, exit {int(code)}]" in lines[0] and "Traceback" not in out + err
    status, out, err = cli("calibrate", *args, "--json")
    assert status == code
    document = json.loads(out)
    assert set(document) == {"schema_version", "error"}
    assert document["error"]["name"] == code.name and document["error"]["code"] == int(code)
    assert speed_files() == []
    return lines[0], document["error"]


def _bad_row(tmp_path: Path, change: dict[str, Any]) -> Path:
    rows = json.loads(CUDA_JSON.read_text())
    rows[1] = {k: v for k, v in (rows[1] | change).items() if v is not None}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(rows))
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("not json at all\n", "line 1 is not JSON"),
        ("[{", "is not valid JSON"),
        ('{"hello": "world"}', "is not a llama-bench result"),
        (b"\xff\xfe[]", "is not UTF-8 text"),
        (b"GGUF\x03\x00\x00\x00" + b"\x00" * 64, "is a GGUF model, not measurements"),
        (b'[{"avg_ts": 1\x00}]', "is not UTF-8 text"),
    ],
)
def test_bad_files(tmp_path: Path, content: str | bytes, message: str) -> None:
    path = tmp_path / "in.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    line, error = _error([str(CUDA_JSON), str(path)], ExitCode.BAD_VALUE)
    assert f"{path} {message}" in line and message in error["message"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"avg_ts": None}, "row 2: missing field avg_ts"),
        ({"n_ubatch": "512"}, "row 2: n_ubatch should be an integer, got '512'"),
        ({"samples_ts": {"a": 1}}, "row 2: samples_ts should be an array of numbers"),
    ],
)
def test_a_bad_row(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    """A bad row is refused, named, the rest kept; a file of bad rows only is the error."""
    path = _bad_row(tmp_path, change)
    data = calibrate(str(path))
    (imported,) = data["files"]
    assert len(imported["points"]) == 1 and imported["refused"] == 1
    assert imported["refusals"][0].startswith(f"{path} {message}")
    code, out, _ = cli("calibrate", str(path))
    assert code == 0 and "1 point, 1 row refused" in out
    for stored in speed_files():
        stored.unlink()
    rows = json.loads(path.read_text())
    path.write_text(json.dumps(rows[1:]))
    line, _ = _error([str(path)], ExitCode.BAD_VALUE)
    assert f"{path} {message.replace('row 2', 'row 1')}" in line


def test_a_large_model_is_refused_from_its_first_bytes(tmp_path: Path) -> None:
    """A 2 GB (sparse) model passed by mistake: refused without reading it whole."""
    model = tmp_path / "big.gguf"
    with model.open("wb") as file:
        file.write(b"GGUF\x03\x00\x00\x00")
        file.truncate(2 * 1024**3)
    start = time.monotonic()
    line, _ = _error([str(model)], ExitCode.BAD_VALUE)
    assert time.monotonic() - start < 2.0  # two commands (text and --json)
    assert "is a GGUF model" in line


def test_a_missing_file_and_a_folder(tmp_path: Path) -> None:
    line, _ = _error([str(tmp_path / "nope.json")], ExitCode.FILE_NOT_FOUND)
    assert "nope.json: no such file" in line
    line, _ = _error([str(tmp_path)], ExitCode.FILE_NOT_FOUND)
    assert str(tmp_path) in line


def test_a_broken_stored_file_is_a_warning() -> None:
    calibrate(str(CUDA_JSON))
    (speed_files()[0].parent / "broken.json").write_text("{")
    code, out, err = cli("calibrate", str(CUDA_JSONL), "--json")
    assert code == 0, err
    assert json.loads(out)["total_points"] == 4
    assert "warning: skipping a broken speed file: " in err and "broken.json" in err


# --- bench keeps its measurements -------------------------------------------------------------


def _keep(result: BenchResult, save: bool = True) -> None:
    """What bench keeps of ``result`` (its JSON under the data dir, its speed points)."""
    from moetune.jobs.bench import keep_result
    from moetune.report.line import warn

    text = to_json(bench_payload(result))
    keep_result(result, text, None, save=save, note=lambda _: None, warn=warn)


def test_bench_keeps_its_points(tmp_path: Path) -> None:
    """What bench saves (its result and its points) imports as the same points: kept once."""
    result = bench_result()
    _keep(result)
    (kept,) = speed_files()
    stored = json.loads(kept.read_text())
    assert stored["kind"] == "moetune.speed"
    assert len(stored["points"]) == 2 * len(result.results)
    assert {p["source"]["tool"] for p in stored["points"]} == {"moetune bench"}
    saved = Path(stored["points"][0]["source"]["file"])
    assert saved.parent.name == "bench" and saved.is_file()
    again = calibrate(str(saved))
    assert again["files"][0]["already_saved"] and len(speed_files()) == 1
    _keep(result.model_copy(update={"created": "2025-01-02T03:04:06+00:00"}), save=False)
    assert len(speed_files()) == 1  # --no-save keeps nothing


def test_bench_goes_on_when_its_points_cannot_be_kept(capsys: pytest.CaptureFixture[str]) -> None:
    (Path(os.environ["MOETUNE_HOME"]) / "speed").write_text("a file where the folder goes")
    _keep(bench_result())
    assert "warning: the speed points were not kept: " in capsys.readouterr().err


def test_parallel_without_measure_is_refused(tmp_path: Path) -> None:
    """llama-batched-bench's rows name no model nor placement: only --measure runs it."""
    code, out, err = cli("calibrate", "--parallel", "1,4", str(tmp_path / "rows.jsonl"))
    assert code == ExitCode.BAD_VALUE, out + err
    assert "--parallel runs llama-batched-bench: give --measure MODEL" in " ".join(err.split())
