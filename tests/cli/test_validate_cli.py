"""Nonsense headers through the commands: ``plan`` and ``inspect`` of the model, ``--draft``
and ``--mmproj`` beside a good one, each end in one BAD_MODEL line (exit 3), no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFValueType as VT

from moetune.errors import ExitCode

from support.badheaders import REFUSED, base_model, edited, write_refused
from support.factory import ModelFactory
from support.helpers import assert_one_line_error, cli, moetune
from support.projector_factory import write_projector

PLAN = ("--vram", "24G", "--no-verify")


@pytest.mark.parametrize("name", REFUSED)
def test_plan_of_a_nonsense_header_is_one_line(
    model_factory: ModelFactory, tmp_path: Path, name: str
) -> None:
    path = write_refused(model_factory, name, tmp_path / f"{name}.gguf")
    code, _, err = cli("plan", str(path), *PLAN)
    assert code == ExitCode.BAD_MODEL, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"moetune: error: {name}.gguf: {REFUSED[name].words}")
    assert line.endswith("[BAD_MODEL, exit 3]")


@pytest.mark.parametrize(
    ("command", "words"),
    [
        (("inspect", "{bad}"), "qwen3moe.attention.head_count is 0"),
        (("plan", "{bad}", *PLAN), "qwen3moe.attention.head_count is 0"),
        (("plan", "{good}", *PLAN, "--draft", "{bad}"), "qwen3moe.attention.head_count is 0"),
        (("plan", "{good}", *PLAN, "--mmproj", "{mmproj}"), "clip.vision.patch_size is 0"),
    ],
    ids=["inspect", "plan", "draft", "mmproj"],
)
def test_each_way_in_is_one_line(
    model_factory: ModelFactory, tmp_path: Path, command: tuple[str, ...], words: str
) -> None:
    good = base_model(model_factory, "qwen3moe")
    files = {
        "good": good,
        "bad": write_refused(model_factory, "head-count-0", tmp_path / "bad.gguf"),
        "mmproj": edited(
            model_factory.written("mmproj-gemma3", write_projector),
            tmp_path / "mmproj.gguf",
            keys={"clip.vision.patch_size": (VT.UINT32, 0)},
        ),
    }
    argv = [word.format(**{k: str(v) for k, v in files.items()}) for word in command]
    assert words in assert_one_line_error(moetune(*argv), ExitCode.BAD_MODEL)


def test_a_default_llama_cpp_takes_is_a_warning(
    model_factory: ModelFactory, tmp_path: Path
) -> None:
    path = edited(
        base_model(model_factory, "qwen3moe"),
        tmp_path / "ctx0.gguf",
        keys={"{arch}.context_length": (VT.UINT32, 0)},
    )
    warning = "warning: ctx0.gguf: qwen3moe.context_length is 0: the training context is unknown"
    for command in (("inspect", str(path)), ("plan", str(path), *PLAN)):
        code, out, err = cli(*command)
        assert code == 0, err
        assert warning in " ".join(out.split())
