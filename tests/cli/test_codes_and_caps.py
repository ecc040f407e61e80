"""Right codes, said caps (issue 23): a missing model file is FILE_NOT_FOUND before any GPU is
looked for; "no tuned profile, and no GPU here" is NO_GPU; --ctx max says when it stopped at
the training context and how to go past it; alias refuses a header-only file, whose alias
could never start llama-server."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from moetune import hardware
from moetune.core.planner import ctx_max_stop
from moetune.errors import ExitCode
from moetune.jobs.loader import load_model_facts

from support.factory import write_model
from support.fakes import FakeGpuProbe
from support.helpers import EXAMPLE_QWEN, assert_one_line_error, cli, moetune

QWEN = str(EXAMPLE_QWEN)


def one_line(err: str, code: ExitCode) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"[{code.name}, exit {int(code)}]"), err
    return lines[0]


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "detect_gpu_probe", FakeGpuProbe.none)


def test_a_missing_model_is_file_not_found_before_any_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def detect() -> None:
        raise AssertionError("the GPU was looked for before the model")

    monkeypatch.setattr(hardware, "detect_gpu_probe", detect)
    missing = str(tmp_path / "nonexist.gguf")
    code, out, err = cli("plan", missing)
    assert code == ExitCode.FILE_NOT_FOUND and out == ""
    assert f"no such file: {missing}" in one_line(err, ExitCode.FILE_NOT_FOUND)
    code, out, _ = cli("plan", missing, "--json")
    assert code == ExitCode.FILE_NOT_FOUND and json.loads(out)["error"]["name"] == "FILE_NOT_FOUND"


def test_a_missing_model_as_a_process(tmp_path: Path) -> None:
    """As a user runs it: the real GPU detection (none here, or any) never gets to speak."""
    done = moetune("plan", str(tmp_path / "nonexist.gguf"))
    assert "no such file" in assert_one_line_error(done, ExitCode.FILE_NOT_FOUND)


@pytest.mark.usefixtures("no_gpu")
@pytest.mark.parametrize("command", [("alias", "tiny"), ("export", "preset")])
def test_no_profile_and_no_gpu_is_no_gpu(tmp_path: Path, command: tuple[str, ...]) -> None:
    model = write_model(tmp_path / "Tiny-MoE-Q8.gguf", "qwen3moe")
    code, _, err = cli(*command, str(model))
    line = one_line(err.splitlines()[-1], ExitCode.NO_GPU)
    assert "no tuned profile for Tiny-MoE-Q8.gguf" in line and "no GPU here" in line, line
    assert "--gpu ID or --vram SIZE" in line
    assert code == ExitCode.NO_GPU


def test_ctx_max_says_it_stopped_at_the_training_context() -> None:
    training = load_model_facts(EXAMPLE_QWEN).context_length
    assert training
    code, out, _ = cli("plan", QWEN, "--vram", "48G", "--ram", "64G", "--ctx", "max")
    assert code == 0, out
    text = " ".join(out.split())
    assert f"note: --ctx max stopped at the training context, {training} tokens" in text, text
    assert "give --ctx N above it to plan past it" in text
    code, out, _ = cli("plan", QWEN, "--vram", "48G", "--ram", "64G", "--ctx", "max", "--json")
    data = json.loads(out)
    assert data["n_ctx"] == training and f"{training} tokens" in data["ctx_note"]


def test_ctx_max_stopped_by_the_budget_says_nothing() -> None:
    args = ("plan", QWEN, "--vram", "5G", "--ram", "64G", "--ctx", "max", "--cache-type", "f16")
    code, out, _ = cli(*args, "--json")
    data = json.loads(out)
    assert code == 0 and "ctx_note" not in data
    assert data["n_ctx"] < (load_model_facts(EXAMPLE_QWEN).context_length or 0)
    code, out, _ = cli(*args)
    assert "--ctx max stopped" not in out


def test_ctx_max_without_a_training_context() -> None:
    facts = replace(load_model_facts(EXAMPLE_QWEN), context_length=None)
    note = ctx_max_stop(facts, 131072)
    assert note and "131072 tokens, the most it tries when the model states no training" in note
    assert ctx_max_stop(facts, 131072 - 256) is None


def test_alias_refuses_a_header_only_file() -> None:
    code, out, err = cli("alias", "qwen", QWEN, "--gpu", "rtx4090")
    assert code == ExitCode.BAD_MODEL and out == ""
    line = one_line(err, ExitCode.BAD_MODEL)
    assert "holds no tensor data" in line and "would not start llama-server" in line, line
