"""The live status against llama-server: fill progress from its log, and `moetune run`'s
plain lines on a pipe."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from moetune.llamacpp.client import ServerClient, fill_context

from support.factory import ModelFactory
from support.helpers import moetune
from support.llama import running_server

# --- with llama-server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(model_factory: ModelFactory) -> Path:
    return model_factory("qwen3moe")


def test_fill_progress_is_streamed(tiny: Path) -> None:
    """``return_progress``: 0 at the start, one report per batch, the last one complete; the
    progress chunks' placeholder token does not count as the first token."""
    seen: list[tuple[int, int]] = []
    with (
        running_server(tiny, "-c", "1024", "-b", "256", "-ub", "256") as server,
        ServerClient(server.url) as client,
    ):
        done = fill_context(client, 700, n_predict=4, on_progress=lambda *p: seen.append(p))
    assert seen[0] == (0, 700) and seen[-1] == (700, 700)
    assert [p for p, _ in seen] == [0, 256, 512, 700]
    assert done.prompt_n == 700 and done.predicted_n == 4
    assert done.ttft_s is not None and done.ttft_s * 1000 >= done.prompt_ms * 0.5


def test_run_prints_plain_status_lines(tiny: Path, rpc: str) -> None:
    """On a pipe, `moetune run` prints each launch's phases with the device's memory, the fill
    progress and the time; no spinner, no flood."""
    result = moetune(
        "run",
        str(tiny),
        "--target-vram",
        "40M",
        "--ctx",
        "1024",
        "--overhead",
        "0",
        "--cache-type",
        "q8_0",
        "--no-save",
        "--repeats",
        "1",
        "--",
        "--rpc",
        rpc,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    status = [
        line for line in lines if re.match(r"N=\d+: (loading|warming|filling|measuring)", line)
    ]
    assert status, result.stderr
    memory = r" \| RPC0 \d+\.\d\d MiB( \(peak \d+\.\d\d MiB\))? \| \d+:\d\d$"
    assert re.match(r"N=\d+: loading \| \d+:\d\d$", status[0]) or re.match(
        r"N=\d+: loading" + memory, status[0]
    ), status[0]
    # the fill's last line: the device's figure where a reading has come in by then (on a fast
    # machine a 1k fill ends before the first one does: "RPC0 ?"); the measuring line has one
    read_or_not = r" \| RPC0 (\d+\.\d\d MiB( \(peak \d+\.\d\d MiB\))?|\?) \| \d+:\d\d$"
    filled = [
        line for line in status if re.match(r"N=\d+: filling (\d+)/\1 tokens" + read_or_not, line)
    ]
    assert filled, result.stderr
    assert any(re.match(r"N=\d+: measuring at depth 64" + memory, line) for line in status)
    launches = len([line for line in lines if re.match(r"N=\d+: (ok|over|oom),", line)])
    assert 1 <= launches <= 3 and len(filled) >= 1
    assert len(status) <= 10 * launches  # a handful of lines per launch
    assert "\r" not in result.stderr and "\x1b[" not in result.stderr  # plain, no spinner
