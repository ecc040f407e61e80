"""`moetune run --objective prefill` end to end: real llama-server, ggml-rpc-server on
127.0.0.1 as the device.

The model is chosen so that a larger -ub really prefills faster on the rig: 512 routed
experts (770 MiB of them) of which 1 is used, every expert block on the CPU (--n-cpu-moe 4
of 4), so each ubatch streams every CPU expert and fewer ubatches stream less. Measured here
with llama-bench (pp2048, -fa 1, f16 cache, -t 2, N=4, twice each, alternating): 2242 and
1981 tok/s at -ub 512, 2878 and 2320 at -ub 2048. With 128 experts the difference was within
the rig's noise; a q8_0 cache or a 4096-token prompt lets the attention dominate (512 won),
hence f16 and a 2048 context.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.factory import ModelFactory
from support.helpers import moetune

ARGS = ["--target-vram", "45M", "--ctx", "2048", "--overhead", "0", "--cache-type", "f16"]


def _model(model_factory: ModelFactory) -> Path:
    return model_factory("qwen3moe", n_layers=4, n_experts=512, n_experts_used=1, n_embd=256)


def test_objective_prefill_picks_a_larger_ubatch(
    model_factory: ModelFactory, rpc: str, tmp_path: Path
) -> None:
    model = _model(model_factory)
    plain = moetune("run", str(model), *ARGS, "--json", "--", "--rpc", rpc, home=tmp_path / "a")
    assert plain.returncode == 0, plain.stderr
    today = json.loads(plain.stdout)
    # without --objective: today's pick, the smallest N that fits, at the run's own -ub
    assert today["objective"] is None
    assert today["best"]["n_ubatch"] is None and "-ub" not in today["best"]["command"]

    home = tmp_path / "b"
    result = moetune(
        "run", str(model), *ARGS, "--objective", "prefill", "--json", "--", "--rpc", rpc, home=home
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    # memory converges exactly as without --objective
    assert [a["n_cpu_moe"] for a in data["attempts"]] == [a["n_cpu_moe"] for a in today["attempts"]]
    run = data["objective"]
    assert run["base_n_cpu_moe"] == today["best"]["n_cpu_moe"] == 4
    assert run["base_n_ubatch"] == 512
    launches = run["launches"]
    assert 1 <= len(launches) <= 4
    # the forecast, calibrated on the convergence's own points, says a larger -ub wins: the
    # best-forecast candidate goes first
    first = launches[0]
    assert first["n_ubatch"] > 512 and first["forecast_score"] > run["base_forecast_score"]
    # the measurement decides: the winner is the best measured (the converged placement where
    # none beat it; this shared machine's noise may say so)
    base_measured = run["base_measured_score"]
    beaten = [t for t in launches if (t["measured_score"] or 0) > base_measured]
    if not beaten:
        assert run["winner"] is None, run["why"]
        assert data["best"]["n_ubatch"] is None
        return
    won = launches[run["winner"]]
    assert won["n_ubatch"] > 512 and won["measured_score"] > base_measured
    assert won["measured_score"] == max(t["measured_score"] or 0 for t in launches)
    best = data["best"]
    assert best["n_ubatch"] == won["n_ubatch"] and best["prompt_tps"] == won["measured_score"]
    assert best["command"][-4:] == ["-ub", str(won["n_ubatch"]), "-b", "2048"]
    # saved: the measured winner, its -ub and speeds; the extra launches' points kept
    saved = json.loads(Path(data["profile"]["path"]).read_text())
    assert saved["placement"]["n_ubatch"] == won["n_ubatch"]
    assert saved["measured"]["prompt_tps"] == won["measured_score"]
    assert saved["command"][-4:] == best["command"][-4:]
    assert saved["settings"]["objective"] == "prefill"
    assert run["points_added"] >= len(launches)
    kept = [json.loads(p.read_text()) for p in (home / "speed").glob("*.json")]
    ubatches = {p["n_ubatch"] for batch in kept for p in batch["points"]}
    assert {512, won["n_ubatch"]} <= ubatches
    # the saved winner is what a second run confirms, at its -ub, in one launch
    again = moetune(
        "run", str(model), *ARGS, "--objective", "prefill", "--json", "--", "--rpc", rpc, home=home
    )
    assert again.returncode == 0, again.stderr
    confirmed = json.loads(again.stdout)
    assert confirmed["launches"] == 1 and confirmed["objective"] is None
    assert confirmed["profile"]["name"] == data["profile"]["name"]
    assert confirmed["best"]["n_ubatch"] == won["n_ubatch"]
    assert confirmed["best"]["command"][-4:] == best["command"][-4:]
