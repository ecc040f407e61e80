"""`moetune run` saves a tuned profile and the next run reuses it (on a ggml-rpc-server
device)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.factory import write_model
from support.helpers import cli, moetune

# --- tuned profiles ----------------------------------------------------------------------------


# --- moetune run saves, then reuses (real llama-server, RPC device) -----------------------------


def test_run_saves_then_reuses(tmp_path: Path, rpc: str, _moetune_home: Path) -> None:
    model = write_model(tmp_path / "Tiny-MoE.gguf", "qwen3moe", n_layers=8)
    args = [
        "run",
        str(model),
        "--target-vram",
        "40M",
        "--ctx",
        "1024",
        "--overhead",
        "0",
        "--json",
        "--",
        "--rpc",
        rpc,
    ]
    first = moetune(*args)
    assert first.returncode == 0, first.stderr
    tuned = json.loads(first.stdout)
    assert tuned["profile"]["reused"] is False
    path = Path(tuned["profile"]["path"])
    assert path.parent == _moetune_home / "profiles"
    assert path.stem.startswith("Tiny-MoE-1k-q8_0-40M-"), path.stem
    profile = json.loads(path.read_text())
    best = tuned["best"]
    assert profile["placement"]["n_cpu_moe"] == best["n_cpu_moe"]
    assert profile["measured"]["vram_bytes"] == best["measured_bytes"]
    assert profile["gpu"]["device"] == "RPC0" and profile["gpu"]["name"] == rpc
    assert profile["settings"]["extra_args"] == ["--rpc", rpc]
    assert profile["command"][1:] == best["command"][1:]
    assert Path(profile["command"][0]).name == "llama-server"

    second = moetune(*args)
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["launches"] == 1 and again["profile"]["reused"] is True
    assert again["best"]["n_cpu_moe"] == best["n_cpu_moe"]
    assert "matches" in second.stderr and "one launch to confirm" in second.stderr
    assert json.loads(path.read_text())["confirmed_at"] is not None

    # another target is another profile: the first is kept, and still matches
    lower = moetune(*[("30M" if a == "40M" else a) for a in args])
    assert lower.returncode == 0, lower.stderr
    other = Path(json.loads(lower.stdout)["profile"]["path"])
    assert other != path and other.stem.startswith("Tiny-MoE-1k-q8_0-30M-")
    assert sorted(p.name for p in path.parent.glob("*.json")) == sorted([path.name, other.name])
    third = moetune(*args)
    assert json.loads(third.stdout)["profile"]["reused"] is True, third.stderr

    # two tuned profiles of the model now: alias takes the newest (the 40M one, confirmed
    # last), names the other with the selector that picks it
    code, newest, err = cli("alias", "tiny", str(model), "--shell", "bash")
    said = " ".join(err.split())
    assert code == 0 and f"using the newest, {path.stem} (--target-vram 40M)" in said, said
    assert f"{other.stem} (--target-vram 30M) also" in said, said
    code, out, _ = cli("alias", "tiny", str(model), "--shell", "bash", "--target-vram", "40M")
    assert code == 0 and out == newest
    subprocess.run(["bash", "-n"], input=out, text=True, check=True)
    # the whole re-tune command; the RPC servers typed after -- come back as moetune's --rpc
    assert f"--rpc {rpc} --retune" in out and "-- --rpc" not in out
