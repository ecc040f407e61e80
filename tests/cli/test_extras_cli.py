"""``--mmproj`` and ``--draft`` through the commands: the plan's rows and JSON, the command it
prints, and one-line errors for bad companions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from moetune.errors import ExitCode

from support.extras import companion_files
from support.factory import ModelFactory
from support.helpers import assert_one_line_error, moetune

BUDGET = ("--vram", "2G", "--target-vram", "37M", "--overhead", "0", "--ctx", "4096", "--no-verify")


@pytest.fixture(scope="module")
def files(model_factory: ModelFactory) -> dict[str, Path]:
    return companion_files(model_factory)


def _plan(files: dict[str, Path], *args: str) -> dict[str, Any]:
    done = moetune("plan", str(files["model"]), *BUDGET, "--json", *args)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_without_companions_the_plan_has_none_of_their_keys(files: dict[str, Path]) -> None:
    plan = _plan(files)
    text = json.dumps(plan)
    assert "mmproj" not in text and "draft" not in text and "mtp_" not in text


def test_the_projector_is_planned_in(files: dict[str, Path]) -> None:
    plain, with_it = _plan(files), _plan(files, "--mmproj", str(files["mmproj"]))
    assert with_it["mmproj_device"] == "CUDA0" and with_it["mmproj_type"] == "gemma3"
    weights, compute = with_it["mmproj_weights_bytes"], with_it["mmproj_compute_bytes"]
    assert isinstance(weights, int) and isinstance(compute, int) and weights > 0 < compute
    device = with_it["devices"][0]
    assert device["mmproj_weights_bytes"] == weights
    assert device["total_bytes"] <= device["budget_bytes"]
    # the room it takes moves experts off the device: at least one more block on the CPU
    assert with_it["n_cpu_moe"] > plain["n_cpu_moe"]
    assert with_it["command"][-2:] == ["--mmproj", str(files["mmproj"])]


def test_no_mmproj_offload_keeps_it_in_ram(files: dict[str, Path]) -> None:
    plan = _plan(files, "--mmproj", str(files["mmproj"]), "--", "--no-mmproj-offload")
    assert plan["mmproj_device"] == "CPU"
    assert "mmproj_weights_bytes" not in plan["devices"][0]
    assert "--no-mmproj-offload" in plan["command"]


def test_the_draft_and_its_flags(files: dict[str, Path]) -> None:
    plan = _plan(files, "--draft", str(files["draft"]), "--", "-ctkd", "q8_0", "-ngld", "99")
    device = plan["devices"][0]
    assert device["draft_weights_bytes"] == plan["draft_weights_bytes"] > 0
    assert device["draft_kv_bytes"] == plan["draft_kv_bytes"] > 0
    command = plan["command"]
    assert isinstance(command, list)
    assert command[command.index("-md") + 1] == str(files["draft"])
    assert "draft-simple" in command and "-ctkd" in command and "-ngld" in command


def test_the_memory_table_shows_the_companions(files: dict[str, Path]) -> None:
    done = moetune(
        "plan",
        str(files["model"]),
        *BUDGET,
        "--mmproj",
        str(files["mmproj"]),
        "--draft",
        str(files["draft"]),
    )
    assert done.returncode == 0, done.stderr
    for row in (
        "projector weights (gemma3)",
        "projector compute (448x448 image",
        "draft weights",
        "draft KV cache",
        "draft compute buffer",
    ):
        assert row in done.stdout


@pytest.mark.parametrize(
    ("flag", "name", "words"),
    [
        ("--mmproj", "model", "not a projector"),
        ("--mmproj", "wide", "512-wide embeddings"),
        ("--draft", "other_vocab", "cannot draft for target.gguf"),
    ],
)
def test_bad_companions_end_in_one_line(
    files: dict[str, Path], flag: str, name: str, words: str
) -> None:
    done = moetune("plan", str(files["model"]), *BUDGET, flag, str(files[name]))
    assert words in assert_one_line_error(done, ExitCode.BAD_MODEL)


def test_owned_flags_after_dashes_are_still_refused(files: dict[str, Path]) -> None:
    done = moetune("plan", str(files["model"]), *BUDGET, "--", "-ngl", "10")
    assert "conflicts" in assert_one_line_error(done, ExitCode.BAD_VALUE)
