"""errors.named_error: the named code of an exception a user can cause; None for a bug."""

from __future__ import annotations

import errno
from pathlib import Path

import httpx
import pytest

from moetune.errors import BadValueError, ExitCode, PermissionDeniedError, denied, named_error
from moetune.store.files import json_files


@pytest.mark.parametrize(
    "exc",
    [
        ZeroDivisionError("division by zero"),
        IndexError("list index out of range"),
        KeyError("blk.3.attn_v_b.weight"),
        ValueError("bad"),
        TypeError("bad"),
        AttributeError("bad"),
        SystemExit(3),
    ],
    ids=type,
)
def test_a_bug_has_no_name(exc: BaseException) -> None:
    assert named_error(exc) is None


def test_moetune_errors_are_themselves() -> None:
    error = BadValueError("x", hint="y")
    assert named_error(error) is error


def test_a_rename_names_both_paths(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        (tmp_path / "a.tmp").rename(tmp_path / "out.ini")
    named = named_error(info.value)
    assert named is not None and named.exit_code == ExitCode.FILE_NOT_FOUND
    assert named.message == f"{tmp_path}/a.tmp -> {tmp_path}/out.ini: No such file or directory"


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (PermissionError(errno.EACCES, "Permission denied", "/m/p"), "/m/p: permission denied"),
        (
            PermissionError(errno.EPERM, "Operation not permitted", "/m/p"),
            "/m/p: permission denied (Operation not permitted)",
        ),
        (PermissionError(errno.EACCES, "Permission denied"), "permission denied"),
    ],
    ids=["EACCES", "EPERM", "no path"],
)
def test_a_permission_error_is_named_as_such(exc: OSError, message: str) -> None:
    named = named_error(exc)
    assert isinstance(named, PermissionDeniedError) and named.message == message
    assert named.exit_code == ExitCode.PERMISSION_DENIED
    assert denied("/m/p", exc, doing="cannot write").message.startswith("cannot write /m/p: ")


def test_every_exit_code_is_on_the_exit_codes_page() -> None:
    page = (Path(__file__).parents[2] / "docs" / "exit-codes.md").read_text()
    for code in ExitCode:
        assert f"\n| {int(code)} | {code.name} |" in page, code


def test_json_files_of_a_folder_moetune_may_not_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert json_files(tmp_path / "none") == [] and json_files(Path(__file__) / "x") == []
    for name in ("b.json", "a.json", ".a.json.1234.tmp", ".hidden.json", "c.toml"):
        (tmp_path / name).write_text("{}")
    assert json_files(tmp_path) == [tmp_path / "a.json", tmp_path / "b.json"]

    def refused(path: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr("moetune.store.files.os.scandir", refused)
    with pytest.raises(PermissionDeniedError, match=f"^{tmp_path}: permission denied$"):
        json_files(tmp_path)


def test_http_errors_name_the_url_without_its_query() -> None:
    request = httpx.Request("GET", "https://cdn.example/m.gguf?X-Amz-Signature=secret")
    named = named_error(httpx.ReadTimeout("timed out", request=request))
    assert named is not None and named.exit_code == ExitCode.NETWORK
    assert named.message == "network error: timed out (ReadTimeout, https://cdn.example/m.gguf)"
    bare = named_error(httpx.ReadTimeout("timed out"))  # no request: no URL, no crash
    assert bare is not None and bare.message == "network error: timed out (ReadTimeout)"


def test_a_closed_stdout_is_not_a_network_error() -> None:
    named = named_error(BrokenPipeError(32, "Broken pipe"))
    assert named is not None and named.exit_code == ExitCode.INTERRUPTED


@pytest.mark.parametrize(
    ("message", "hint", "code"),
    [
        ("does not fit: the GPU needs 30 GiB", "pass --n-cpu-moe 40", ExitCode.DOES_NOT_FIT),
        ("a message\nover two lines", None, ExitCode.BAD_VALUE),
        ("[bold]not markup[/bold] 100%", "  spaced   hint ", None),
    ],
)
def test_the_plain_error_line_is_the_styled_one_without_style(
    message: str, hint: str | None, code: ExitCode | None
) -> None:
    """On a stderr that is not a terminal the line is written plainly (report/line.py), with
    the very text rich writes of the styled line there."""
    import io

    from rich.console import Console

    from moetune.report.common import render_error
    from moetune.report.line import error_line

    out = io.StringIO()
    Console(file=out, soft_wrap=True, force_terminal=False).print(render_error(message, hint, code))
    assert out.getvalue() == error_line(message, hint, code) + "\n"
