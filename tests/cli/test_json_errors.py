"""Every failure of every command that takes --json prints exactly one JSON document on
stdout (the command's own where it printed one before failing, else the error's), beside the
one line on stderr; exceptions a user can cause that are not moetune's own get their named
code, and only a bug says "internal error"."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from moetune.errors import ExitCode
from moetune.report import SCHEMA_VERSION
from moetune.store.tuned import TunedProfile

from support.helpers import EXAMPLE_QWEN, ROOT, cli, moetune
from support.rawhttp import raw_http_server

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

QWEN = str(EXAMPLE_QWEN)
DEEP = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError


def one_document(out: str) -> dict[str, Any]:
    """stdout is exactly one JSON document (json.loads refuses two) with the schema version."""
    data: dict[str, Any] = json.loads(out)
    assert data["schema_version"] == SCHEMA_VERSION
    return data


def assert_json_failure(
    result: tuple[int, str, str], expected: ExitCode, one_line: bool = True
) -> dict[str, Any]:
    """The run failed with ``expected``; its stdout is the error document; the error."""
    code, out, err = result
    assert code == expected, out + err
    assert "Traceback" not in out + err
    data = one_document(out)
    assert set(data) == {"schema_version", "error"}, data
    error: dict[str, Any] = data["error"]
    assert error["code"] == int(expected) and error["name"] == expected.name, error
    assert error["message"] and set(error) == {"code", "name", "message", "hint"}, error
    if one_line:  # the line on stderr says the same
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("moetune: error: ") and error["message"] in lines[0]
        assert f"[{expected.name}, exit {int(expected)}]" in lines[0]
        hint = f" ({error['hint']})" if error["hint"] is not None else ""  # null: none
        assert error["hint"] != "", error
        assert lines[0].endswith(
            f"{error['message']}{hint} [{expected.name}, exit {int(expected)}]"
        )
    return error


def _bad_gguf(tmp: Path) -> str:
    path = tmp / "bad.gguf"
    path.write_bytes(b"nope, not a GGUF file")
    return str(path)


def _deep_json(tmp: Path) -> str:
    path = tmp / "deep.json"
    path.write_text(DEEP)
    return str(path)


def _closed_port_url() -> str:
    with socket.socket() as sock:  # bound, never listening: the connection is refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/model.gguf"


# (command line, given a temporary folder) -> the code of its failure
FAILURES: dict[str, tuple[Callable[[Path], list[str]], ExitCode]] = {
    "inspect-missing": (lambda t: ["inspect", str(t / "nope.gguf")], ExitCode.FILE_NOT_FOUND),
    "inspect-not-gguf": (lambda t: ["inspect", _bad_gguf(t)], ExitCode.BAD_MODEL),
    "inspect-refused": (lambda t: ["inspect", _closed_port_url()], ExitCode.NETWORK),
    "plan-missing": (
        lambda t: ["plan", str(t / "nope.gguf"), "--vram", "24G", "--ram", "64G"],
        ExitCode.FILE_NOT_FOUND,
    ),
    "plan-bad-model": (
        lambda t: ["plan", _bad_gguf(t), "--vram", "24G", "--ram", "64G"],
        ExitCode.BAD_MODEL,
    ),
    "plan-bad-value": (
        lambda t: ["plan", QWEN, "--vram", "1G", "--ram", "64G"],  # all of it headroom
        ExitCode.BAD_VALUE,
    ),
    "run-missing": (lambda t: ["run", str(t / "nope.gguf")], ExitCode.FILE_NOT_FOUND),
    "bench-no-model": (lambda t: ["bench"], ExitCode.BAD_VALUE),
    "report-missing": (lambda t: ["report", str(t / "nope.json")], ExitCode.FILE_NOT_FOUND),
    "report-nested": (lambda t: ["report", _deep_json(t)], ExitCode.BAD_VALUE),
    "profiles-show-missing": (
        lambda t: ["profiles", "show", "nothing-here"],
        ExitCode.FILE_NOT_FOUND,
    ),
    "doctor-bad-value": (lambda t: ["doctor", "--ram-bandwidth", "-1"], ExitCode.BAD_VALUE),
}


@pytest.mark.parametrize("case", FAILURES)
def test_a_failure_is_one_error_document(tmp_path: Path, case: str) -> None:
    args, code = FAILURES[case]
    assert_json_failure(cli(*args(tmp_path), "--json"), code)


def test_without_json_stdout_stays_empty(tmp_path: Path) -> None:
    code, out, err = cli("inspect", str(tmp_path / "nope.gguf"))
    assert code == ExitCode.FILE_NOT_FOUND and out == "" and err.startswith("moetune: error:")


# Refused while the options are parsed, after the command was chosen: click's usage errors
# (USAGE, click's own lines on stderr; a value typer refuses: one line) and moetune's value
# parsers (BAD_VALUE, one line).
PARSING: dict[str, tuple[list[str], ExitCode, bool]] = {
    "plan-size": (["plan", QWEN, "--vram", "24Q"], ExitCode.BAD_VALUE, True),
    "plan-no-model": (["plan", "--vram", "24G"], ExitCode.USAGE, False),
    "plan-range": (["plan", QWEN, "--ubatch", "0"], ExitCode.BAD_VALUE, True),
    "inspect-after-dashes": (["inspect", QWEN, "--json", "--", "-c", "1"], ExitCode.USAGE, True),
    "inspect-unknown-option": (["inspect", QWEN, "--bogus"], ExitCode.USAGE, False),
    "run-tokens": (["run", QWEN, "--fill", "zero"], ExitCode.BAD_VALUE, True),
    "bench-tokens": (["bench", QWEN, "--n-predict", "0"], ExitCode.BAD_VALUE, True),
    "report-no-file": (["report"], ExitCode.USAGE, False),
    "profiles-list-unknown-option": (["profiles", "list", "--bogus"], ExitCode.USAGE, False),
    "profiles-show-no-name": (["profiles", "show"], ExitCode.USAGE, False),
    "doctor-cache-type": (["doctor", "--cache-type", "q9_9"], ExitCode.BAD_VALUE, True),
}


@pytest.mark.parametrize("case", PARSING)
def test_a_refused_option_is_one_error_document(case: str) -> None:
    args, code, one_line = PARSING[case]
    error = assert_json_failure(cli(*args, "--json"), code, one_line=one_line)
    if code == ExitCode.BAD_VALUE:
        assert error["message"].startswith("--"), error  # the option is named


def test_an_option_refused_without_json_prints_nothing_on_stdout() -> None:
    code, out, _ = cli("plan", QWEN, "--vram", "24Q")
    assert code == ExitCode.BAD_VALUE and out == ""
    code, out, _ = cli("plan", QWEN, "--ubatch", "0", "--", "--json")  # llama-server's word
    assert code == ExitCode.BAD_VALUE and out == ""


def test_does_not_fit_puts_the_error_into_the_plan_document() -> None:
    code, out, err = cli("plan", QWEN, "--vram", "4G", "--ram", "2G", "--json")
    assert code == ExitCode.DOES_NOT_FIT, out + err
    data = one_document(out)
    assert data["fits"] is False and data["error"]["name"] == "DOES_NOT_FIT"
    assert "does not fit" in err and len(err.strip().splitlines()) == 1
    # every field is there, a hint the line has none of too (null)
    assert set(data["error"]) == {"code", "name", "message", "hint"}
    assert data["error"]["hint"] is None and ") [DOES_NOT_FIT" not in err


def test_a_failed_check_puts_the_error_into_the_report_document(no_search: Path) -> None:
    code, out, err = cli("doctor", "--vram", "24G", "--no-measure", "--json")
    assert code == ExitCode.CHECK_FAILED, out + err
    data = one_document(out)
    assert "findings" in data and data["error"]["code"] == ExitCode.CHECK_FAILED


def test_profiles_list_failure_is_a_document(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(user_dir: object = None) -> None:
        raise PermissionError(13, "Permission denied", "/home/me/.config/moetune/hardware")

    monkeypatch.setattr("moetune.store.hardware.scan_hardware_profiles", refused)
    error = assert_json_failure(cli("profiles", "list", "--json"), ExitCode.PERMISSION_DENIED)
    assert error["message"] == "/home/me/.config/moetune/hardware: permission denied"


# --- the last-resort mapping: exceptions from outside moetune's hierarchy ---------------------


def raised(make: Callable[[], object]) -> BaseException:
    """The exception that ``make`` raises."""
    try:
        make()
    except BaseException as exc:  # KeyboardInterrupt too
        return exc
    raise AssertionError("nothing raised")


def _midbody_close() -> BaseException:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nGGUF"
    with raw_http_server(head) as url:
        return raised(lambda: httpx.get(url + "/m.gguf?sig=x"))


def _refused() -> BaseException:
    return raised(lambda: httpx.get(_closed_port_url()))


def _interrupt() -> None:
    raise KeyboardInterrupt


def _out_of_memory() -> None:
    raise MemoryError


# family -> (the real exception, given a temporary folder; its code; words of its line)
FAMILIES: dict[str, tuple[Callable[[Path], BaseException], ExitCode, str]] = {
    "FileNotFoundError": (
        lambda t: raised((t / "nope.ini").read_text),
        ExitCode.FILE_NOT_FOUND,
        "nope.ini: No such file or directory",
    ),
    "IsADirectoryError": (
        lambda t: raised(t.read_text),
        ExitCode.FILE_NOT_FOUND,
        "Is a directory",
    ),
    "NotADirectoryError": (
        lambda t: raised(lambda: (Path(_bad_gguf(t)) / "x").write_text("")),
        ExitCode.FILE_NOT_FOUND,
        "bad.gguf/x: Not a directory",
    ),
    "PermissionError": (
        lambda t: PermissionError(13, "Permission denied", "/proc/version"),
        ExitCode.PERMISSION_DENIED,
        "/proc/version: permission denied",
    ),
    "PermissionError EPERM": (
        lambda t: PermissionError(1, "Operation not permitted", "/etc/immutable"),
        ExitCode.PERMISSION_DENIED,
        "/etc/immutable: permission denied (Operation not permitted)",
    ),
    "UnicodeDecodeError": (
        lambda t: raised(lambda: b"\xff[*]\n".decode("utf-8")),
        ExitCode.BAD_VALUE,
        "not UTF-8 text",
    ),
    "RecursionError": (
        lambda t: raised(lambda: json.loads(DEEP)),
        ExitCode.BAD_VALUE,
        "nested too deeply",
    ),
    "JSONDecodeError": (
        lambda t: raised(lambda: json.loads("{")),
        ExitCode.BAD_VALUE,
        "not valid JSON",
    ),
    "TOMLDecodeError": (
        lambda t: raised(lambda: tomllib.loads("= 1")),
        ExitCode.BAD_VALUE,
        "not valid TOML",
    ),
    "ValidationError": (
        lambda t: raised(lambda: TunedProfile.model_validate({"name": "x"})),
        ExitCode.BAD_VALUE,
        "invalid TunedProfile: ",
    ),
    "httpx.ConnectError": (lambda t: _refused(), ExitCode.NETWORK, "ConnectError"),
    "httpx.RemoteProtocolError": (
        lambda t: _midbody_close(),
        ExitCode.NETWORK,
        "RemoteProtocolError",
    ),
    "ConnectionResetError": (
        lambda t: ConnectionResetError(104, "Connection reset by peer"),
        ExitCode.NETWORK,
        "Connection reset by peer",
    ),
    "MemoryError": (lambda t: raised(_out_of_memory), ExitCode.OUT_OF_MEMORY, "out of memory"),
    "KeyboardInterrupt": (lambda t: raised(_interrupt), ExitCode.INTERRUPTED, "interrupted"),
}


def _open_raising(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def open_model(*args: object, **kwargs: object) -> None:
        raise exc

    monkeypatch.setattr("moetune.jobs.models.open_model", open_model)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_foreign_exception_gets_its_named_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family: str
) -> None:
    make, code, words = FAMILIES[family]
    _open_raising(monkeypatch, make(tmp_path))
    error = assert_json_failure(cli("inspect", QWEN, "--json"), code)
    assert words in error["message"] and "internal error" not in error["message"], error
    assert "errors.pydantic.dev" not in error["message"] and "sig=" not in error["message"]
    code_, out, err = cli("inspect", QWEN)
    assert code_ == code and out == "" and words in err and len(err.strip().splitlines()) == 1


def test_a_bug_says_internal_error_and_debug_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _open_raising(monkeypatch, raised(lambda: 1 // 0))
    error = assert_json_failure(cli("inspect", QWEN, "--json"), ExitCode.INTERNAL)
    assert (
        error["message"] == "internal error: ZeroDivisionError: integer division or modulo by zero"
    )
    assert error["hint"] == "rerun with --debug for the traceback"
    code, out, err = cli("--debug", "inspect", QWEN)
    assert code == ExitCode.INTERNAL and out == ""
    assert "Traceback" in err and "ZeroDivisionError" in err
    assert err.strip().splitlines()[-1].startswith("moetune: error: internal error: ")


def test_a_bug_in_an_option_parser_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str, allow_zero: bool = False) -> int:
        raise IndexError("list index out of range")

    monkeypatch.setattr("moetune.cli.options.parse_size", broken)
    error = assert_json_failure(cli("plan", QWEN, "--ram", "64G", "--json"), ExitCode.INTERNAL)
    assert error["message"] == "internal error: IndexError: list index out of range"


def test_help_under_json_is_still_help() -> None:
    code, out, _ = cli("plan", "--json", "--help")
    assert code == 0 and "Usage:" in out


def test_exit_codes_page_shows_the_document_moetune_prints() -> None:
    page = (ROOT / "docs" / "exit-codes.md").read_text()
    shown = json.loads(page.split("```json\n", 1)[1].split("```", 1)[0])
    code, out, _ = cli("plan", QWEN, "--vram", "24Q", "--json")
    assert code == shown["error"]["code"] and json.loads(out) == shown


def test_a_child_process_prints_the_same_document(tmp_path: Path) -> None:
    result = moetune("plan", str(tmp_path / "nope.gguf"), "--vram", "24G", "--json")
    assert_json_failure((result.returncode, result.stdout, result.stderr), ExitCode.FILE_NOT_FOUND)


def test_a_tuned_profile_nested_too_deeply(_moetune_home: Path) -> None:
    (_moetune_home / "profiles").mkdir()
    (_moetune_home / "profiles" / "deep.json").write_text(DEEP)
    assert_json_failure(cli("profiles", "show", "deep", "--json"), ExitCode.BAD_VALUE)


def _not_utf8(tmp: Path) -> Path:
    path = tmp / "mine.ini"
    path.write_bytes(b"\xff[*]\nctx-size = 4096\n")
    return path


# export has no --json: one error line, a named code, never INTERNAL (nor success)
EXPORT_OUT: dict[str, Callable[[Path], Path]] = {
    "a-directory": lambda t: t,
    "a-missing-folder": lambda t: t / "no" / "such" / "x.ini",
    "not-utf-8": _not_utf8,
}


@pytest.mark.parametrize("case", EXPORT_OUT)
def test_export_out_that_cannot_be_used(tmp_path: Path, case: str) -> None:
    out = EXPORT_OUT[case](tmp_path)
    code, _, err = cli("export", "preset", QWEN, "--vram", "24G", "--out", str(out))
    assert code not in (0, ExitCode.INTERNAL), err
    errors = [line for line in err.splitlines() if line.startswith("moetune: error: ")]
    assert len(errors) == 1 and "internal error" not in errors[0] and "Traceback" not in err
