"""User-caused errors end in one line on stderr and a named exit code, never a traceback."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from moetune.errors import ExitCode

from support.helpers import EXAMPLE_QWEN, as_ordinary_user, assert_one_line_error, moetune
from support.rawgguf import RawGGUF, small_model

CASES = {
    "not-gguf": (b"PK\x03\x04 this is a zip file", ExitCode.BAD_MODEL, "not a GGUF file"),
    "empty": (b"", ExitCode.BAD_MODEL, "empty"),
    "truncated": (small_model().header()[:150], ExitCode.BAD_MODEL, "truncated"),
    "huge-tensor-count": (RawGGUF(n_tensors=1 << 60).build(), ExitCode.BAD_MODEL, "exceeds"),
    "huge-array": (
        RawGGUF(n_kv=1).header() + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 8, 1 << 60),
        ExitCode.BAD_MODEL,
        "exceeds",
    ),
    "version-1": (small_model(version=1).build(), ExitCode.BAD_MODEL, "version 1"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_files(tmp_path: Path, case: str) -> None:
    data, code, words = CASES[case]
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    line = assert_one_line_error(moetune("inspect", str(path)), code)
    assert words in line


def test_missing_file_and_directory(tmp_path: Path) -> None:
    line = assert_one_line_error(
        moetune("inspect", str(tmp_path / "nope.gguf")), ExitCode.FILE_NOT_FOUND
    )
    assert "no such file" in line
    line = assert_one_line_error(moetune("inspect", str(tmp_path)), ExitCode.FILE_NOT_FOUND)
    assert "directory" in line


def test_a_missing_file_names_what_was_meant(tmp_path: Path) -> None:
    """The shipped examples are header-only copies: the full name points at the copy; a
    near name in the folder is suggested."""
    full = EXAMPLE_QWEN.with_name(EXAMPLE_QWEN.name.replace(".header.gguf", ".gguf"))
    line = assert_one_line_error(moetune("inspect", str(full)), ExitCode.FILE_NOT_FOUND)
    assert f"plan and inspect read its header-only copy, {EXAMPLE_QWEN}" in line
    near = EXAMPLE_QWEN.with_name(EXAMPLE_QWEN.name.replace("Q4_K_M", "Q4_K_S"))
    line = assert_one_line_error(moetune("inspect", str(near)), ExitCode.FILE_NOT_FOUND)
    assert f"did you mean {EXAMPLE_QWEN}?" in line
    line = assert_one_line_error(
        moetune("inspect", str(tmp_path / "x.gguf")), ExitCode.FILE_NOT_FOUND
    )
    assert "did you mean" not in line


def test_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    line = assert_one_line_error(moetune("inspect", str(fifo)), ExitCode.FILE_NOT_FOUND)
    assert "not a regular file" in line


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.gguf"
    path.write_bytes(small_model().build())
    path.chmod(0)
    result = moetune("inspect", str(path), prefix=as_ordinary_user())
    line = assert_one_line_error(result, ExitCode.PERMISSION_DENIED)
    assert f"cannot read {path}: permission denied" in line


def test_missing_shard(tmp_path: Path) -> None:
    raw = small_model()
    raw.add("split.no", 3, 0).add("split.count", 3, 2).add("split.tensors.count", 5, 2)
    first = tmp_path / "m-00001-of-00002.gguf"
    first.write_bytes(raw.build(data_bytes=4480))
    line = assert_one_line_error(moetune("inspect", str(first)), ExitCode.FILE_NOT_FOUND)
    assert "missing shard m-00002-of-00002.gguf (2 of 2)" in line


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"nope")
    result = moetune("--debug", "inspect", str(path))
    assert result.returncode == ExitCode.BAD_MODEL
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("moetune: error: ")


def test_version_and_help() -> None:
    assert moetune("--version").stdout.startswith("moetune ")
    assert "inspect" in moetune("--help").stdout


USAGE_ERRORS = {
    "unknown command": (("pln",), "No such command 'pln'. Did you mean 'plan'?"),
    "unknown command of a group": (("profiles", "lst"), "Did you mean 'list'?"),
    "unknown option of the app": (("--bogus",), "No such option: --bogus"),
    "unknown option": (
        ("plan", "EXAMPLE", "--vrma", "16G"),
        "No such option: --vrma (Possible options: --overhead, --ram, --vram)",
    ),
    "missing argument": (("plan",), "Missing argument 'MODEL'."),
}


@pytest.mark.parametrize("case", USAGE_ERRORS)
def test_usage_errors_are_one_line_with_their_suggestion(case: str) -> None:
    """Every usage error, the app's, a group's or a command's, ends as any error a user can
    cause does: one line with its code (click's usage box would end with no code), its
    suggestion kept."""
    args, words = USAGE_ERRORS[case]
    argv = [str(EXAMPLE_QWEN) if a == "EXAMPLE" else a for a in args]
    line = assert_one_line_error(moetune(*argv), ExitCode.USAGE)
    assert words in line and line.endswith("[USAGE, exit 2]"), line
