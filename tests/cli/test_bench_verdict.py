"""moetune bench and report as commands, without llama-server: usage errors and saved results
rendered again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moetune.cli import app
from moetune.errors import ExitCode
from moetune.report import payloads, to_json
from moetune.store import bench as saved

from support.bench import bench_result
from support.factory import ModelFactory

# --- the configurations on a tiny model -------------------------------------------------------


@pytest.fixture(scope="module")
def qwen(model_factory: ModelFactory) -> Path:
    return model_factory("qwen3moe", n_layers=8)


# --- the commands' errors, in-process ---------------------------------------------------------

runner = CliRunner()


def test_report_command(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    saved.write_result(path, to_json(payloads.bench_payload(bench_result())))
    shown = runner.invoke(app, ["report", str(path)], terminal_width=160)
    assert shown.exit_code == 0, shown.output
    assert "decode tok/s (median) against depth" in shown.output and "oo plan" in shown.output
    again = runner.invoke(app, ["report", str(path), "--json"])
    assert json.loads(again.output)["results"] == json.loads(path.read_text())["results"]
    missing = runner.invoke(app, ["report", str(tmp_path / "nope.json")])
    assert missing.exit_code == ExitCode.FILE_NOT_FOUND


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a MODEL"),
        (["--configs", "plan,warp"], "unknown configuration warp"),
        (["--depths", "0,x"], "not a depth"),
        (["--endpoint", "embeddings"], "unknown endpoint"),
        (["--repeats", "0"], "from 1 to 1000"),
        (["--repeats", "5", "--max-repeats", "4"], "--max-repeats (4) must be at least --repeats"),
        (["--max-spread", "lots"], "is not a share"),
        (["--max-spread", "-5%"], "a share from 0 to 10"),
        (["--max-time", "0"], "above 0"),
        (["--ctx", "256", "--n-predict", "300"], "no room"),
    ],
)
def test_bench_usage_errors(qwen: Path, args: list[str], message: str) -> None:
    model = [str(qwen)] if args and args[0] in {"--configs", "--ctx"} else []
    result = runner.invoke(app, ["bench", *model, *args])
    assert result.exit_code == ExitCode.BAD_VALUE, result.output
    assert message in result.output and "Traceback" not in result.output


def test_bench_server_url_with_a_model_is_refused(qwen: Path) -> None:
    result = runner.invoke(app, ["bench", str(qwen), "--server-url", "http://127.0.0.1:1"])
    assert result.exit_code == ExitCode.BAD_VALUE
    assert "leave out MODEL" in result.output
    flags = runner.invoke(app, ["bench", "--server-url", "http://127.0.0.1:1", "--", "-ngl", "9"])
    assert flags.exit_code == ExitCode.BAD_VALUE
