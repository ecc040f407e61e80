"""The op-offload threshold (GGML_OP_OFFLOAD_MIN_BATCH) end to end: `moetune bench
--op-offload-min-batch N` launches the real llama-server with the variable in its
environment (read back from /proc), over one the user's shell has, and the result and the
speed points it keeps record it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from moetune.core.settings import OP_OFFLOAD_ENV

from support.factory import ModelFactory
from support.helpers import MOETUNE, default_signals, moetune_env
from support.llama import wait_for_servers


@pytest.fixture(scope="module")
def model(model_factory: ModelFactory) -> Path:
    return model_factory("qwen3moe", n_layers=8)


def _served_environ(pid: int) -> dict[str, str]:
    """The environment of the llama-server that serves (``--port``) under ``pid``, once it
    runs; the quick queries before it (``--version``, ``--list-devices``) are passed over."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for server in wait_for_servers(pid):
            with contextlib.suppress(psutil.Error):
                if "--port" in server.cmdline():
                    found: dict[str, str] = server.environ()
                    return found
        time.sleep(0.05)
    raise AssertionError("no serving llama-server started")


def test_bench_launches_with_the_threshold(model: Path, rpc: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = tmp_path / "result.json"
    args = ["bench", str(model), "--configs", "plan", "--op-offload-min-batch", "1024"]
    args += ["--ctx", "1024", "--depths", "0,256", "--repeats", "1", "--n-predict", "4"]
    args += ["--target-vram", "30M", "--overhead", "0", "--out", str(out), "--", "--rpc", rpc]
    # the user's shell has another value: the option wins, in the child and in the record
    env = moetune_env(home, **{OP_OFFLOAD_ENV: "7"})
    proc = subprocess.Popen(
        [*MOETUNE, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=default_signals,  # noqa: PLW1509
    )
    try:
        environ = _served_environ(proc.pid)
    finally:
        _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert environ.get(OP_OFFLOAD_ENV) == "1024"
    data = json.loads(out.read_text())
    (config,) = data["configs"]
    assert config["env"] == {OP_OFFLOAD_ENV: "1024"}
    (kept,) = (home / "speed").glob("*.json")
    points = json.loads(kept.read_text())["points"]
    assert points and {p["placement"]["op_offload_min_batch"] for p in points} == {1024}


def test_the_shell_value_is_the_plan_value(model: Path, rpc: str, tmp_path: Path) -> None:
    """Without the option, the variable the user's shell has is what bench launches with
    (and records): moetune reads it as the current value, it does not drop it."""
    home = tmp_path / "home"
    args = ["bench", str(model), "--configs", "plan", "--ctx", "1024", "--depths", "0"]
    args += ["--repeats", "1", "--n-predict", "4", "--target-vram", "30M", "--overhead", "0"]
    args += ["--json", "--no-save", "--", "--rpc", rpc]
    done = subprocess.run(
        [*MOETUNE, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=moetune_env(home, **{OP_OFFLOAD_ENV: "64"}),
        preexec_fn=default_signals,
    )
    assert done.returncode == 0, done.stderr
    (config,) = json.loads(done.stdout)["configs"]
    assert config["env"] == {OP_OFFLOAD_ENV: "64"}
