"""`moetune run` launches the -ot form beside the converged N where it keeps more on the
device, and keeps it where its measured peak is within the target: the tuned profile, its
reuse and the alias made from it are the -ot form (real llama-server, ggml-rpc-server on
127.0.0.1 as the device)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from support.factory import ModelFactory
from support.helpers import cli, moetune
from support.llama import running_server

# a target at which the plan prints the -ot form first on this model (checked below)
TARGET = "25M"
ARGS = ["--target-vram", TARGET, "--ctx", "1024", "--overhead", "0", "--cache-type", "q8_0"]


def _device_mib(command: list[str]) -> float:
    """RPC0's peak (MiB) of a printed llama-server command, launched as printed."""
    with running_server(None, *command[1:]) as server:
        lines = parse_buffers(server.log_text())
    return sum(total_mib(lines, kind, "RPC0") for kind in ("model", "KV", "RS", "compute"))


def test_run_keeps_the_ot_form_where_it_keeps_more(model_factory: ModelFactory, rpc: str) -> None:
    model = str(model_factory("qwen3moe", n_layers=8))
    plan = moetune("plan", model, *ARGS, "--rpc", rpc, "--json")
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert planned["first"]["form"] == "override"  # the case this test is about

    done = moetune("run", model, *ARGS, "--json", "--", "--rpc", rpc)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    best = data["best"]
    target = data["target_bytes"]
    assert best["override_tensor"] and best["status"] == "ok"
    assert best["measured_bytes"] <= target
    command = best["command"]
    assert "-ot" in command and "--n-cpu-moe" not in command
    assert ",".join(best["override_tensor"]) == command[command.index("-ot") + 1]
    # the N form converged as before (N fits, N-1 over), then one launch of the -ot form
    plain = [a for a in data["attempts"] if not a["override_tensor"]]
    tried = [a for a in data["attempts"] if a["override_tensor"]]
    assert len(tried) == 1 and data["attempts"][-1] == tried[0]
    n = best["n_cpu_moe"]
    assert any(a["n_cpu_moe"] == n and a["status"] == "ok" for a in plain)
    assert any(a["n_cpu_moe"] == n - 1 and a["status"] in ("over", "oom") for a in plain)
    # it keeps more on the device than N's form, and its printed command stays in the target
    at_n = next(a for a in plain if a["n_cpu_moe"] == n)
    assert data["override_gain_bytes"] > 0
    assert at_n["measured_bytes"] < best["measured_bytes"] <= target
    assert _device_mib(command) * MIB <= target

    # saved as the -ot form; alias serves it
    profile = json.loads(Path(data["profile"]["path"]).read_text())
    assert profile["placement"]["override_tensor"] == best["override_tensor"]
    assert profile["command"][1:] == command[1:]
    code, out, _ = cli("alias", "tiny", model, "--shell", "bash")
    assert code == 0 and "-ot " in out and "--n-cpu-moe" not in out
    subprocess.run(["bash", "-n"], input=out, text=True, check=True)

    # a second run launches the saved -ot form once to confirm it
    again = moetune("run", model, *ARGS, "--", "--rpc", rpc)
    assert again.returncode == 0, again.stderr
    assert "one launch to confirm" in again.stderr and "matches: -ot " in again.stderr
    assert "1 launch" in again.stdout and "best: the -ot form" in again.stdout
    assert json.loads(Path(data["profile"]["path"]).read_text())["confirmed_at"] is not None
