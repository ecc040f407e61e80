"""`moetune plan`'s speed frontier: --workload and --objective in the JSON and the text."""

from __future__ import annotations

import json
from itertools import pairwise

from moetune.errors import ExitCode

from support.helpers import EXAMPLE_GPT_OSS, EXAMPLE_QWEN, cli
from support.plan import plan

QWEN = str(EXAMPLE_QWEN)
FIGURES = ("--gpu", "rtx4090", "--ram", "64G", "--ram-bandwidth", "60")
ENTRY_KEYS = {
    "form",
    "n_cpu_moe",
    "override_tensor",
    "n_ubatch",
    "n_batch",
    "threads",
    "devices",
    "device_bytes",
    "host_bytes",
    "command",
    "forecast",
    "score",
    "all_devices",
    "base",
    "picked",
    "op_offload_min_batch",
}


def test_workload_json_has_a_complete_frontier() -> None:
    code, out = plan(QWEN, *FIGURES, "--workload", "8k:512", "--json")
    assert code == 0, out
    data = json.loads(out)  # one document
    found = data["frontier"]
    assert found["goal"] == "workload 8192:512"
    assert (found["n_prompt"], found["depth"]) == (8192, 8192)
    entries = found["entries"]
    assert len(entries) >= 8
    for entry in entries:
        assert set(entry) == ENTRY_KEYS
        assert entry["command"][0] == "llama-server"
        assert entry["devices"] == ["CUDA0"] and len(entry["device_bytes"]) == 1
        assert entry["forecast"]["decode_tok_s"] > 0  # memory and RAM bandwidths are known
        assert entry["forecast"]["depth"] == 8192
    picked = [e for e in entries if e["picked"]]
    assert len(picked) == 1 and picked[0] == entries[found["picked"]]
    # uncalibrated: the pick leaves the plan's own placement only beyond the expected error,
    # and the command printed first is the pick's
    assert picked[0]["command"] == data["first"]["command"] and data["first"]["frontier_pick"]
    gain = picked[0]["score"] / next(e for e in entries if e["base"])["score"] - 1
    assert found["switched"] == (gain > data["forecast"]["expected_error"])
    # the rtx4090 profile has its FP16 FLOP/s: the GPU's prompt compute is known
    assert "CUDA0 FLOP/s" not in found["missing"]
    assert all("CUDA0 FLOP/s" not in e["forecast"]["missing"] for e in entries)


def test_no_frontier_unless_asked() -> None:
    code, out = plan(QWEN, *FIGURES, "--json")
    assert code == 0, out
    assert "frontier" not in json.loads(out)
    code, out = plan(QWEN, *FIGURES, "--frontier", "--json")
    assert json.loads(out)["frontier"]["goal"] == "decode"


def test_text_without_figures_ranks_on_assumed_ones() -> None:
    """``--vram`` alone: the card's class's typical figures and the typical RAM, assumed; the
    candidates are ranked and charted, and the text says what the forecasts assumed."""
    code, out = plan(QWEN, "--vram", "16G", "--ram", "64G", "--objective", "prefill")
    assert code == 0, out
    assert "speed frontier by prefill" in out
    flat = " ".join(out.split())
    assert "forecasts: uncalibrated, expected error" in flat
    assert "assumed: CUDA0 memory bandwidth" in flat and "RAM bandwidth" in flat
    assert "missing" not in flat and "cannot rank by prefill" not in flat
    assert "unknown (no forecast" not in out and "?" not in out
    assert "-t: candidates 1, " in flat and "of the RAM figure (typical)" in flat
    assert "\ncommand (the frontier's pick):\nllama-server " in out  # +210 %, beyond ±10 %
    assert "the plan's own:\nllama-server " in out


def test_two_devices_show_one_device_fewer() -> None:
    code, out = plan(
        str(EXAMPLE_GPT_OSS), "--vram", "40G,24G", "--ram", "128G", "--frontier", "--json"
    )
    assert code == 0, out
    sets = {tuple(e["devices"]) for e in json.loads(out)["frontier"]["entries"]}
    assert sets == {("CUDA0", "CUDA1"), ("CUDA0",), ("CUDA1",)}


def test_bad_objective_and_workload_are_one_line() -> None:
    for args, text in (
        (("--objective", "fast"), "not an objective: 'fast'"),
        (("--workload", "8k"), "not a workload: '8k'"),
        (("--workload", "8k:x"), "not a token count: 'x'"),
    ):
        code, _, err = cli("plan", QWEN, "--gpu", "rtx4090", *args)
        assert code == ExitCode.BAD_VALUE, err
        assert text in err and len(err.strip().splitlines()) == 1


def _batch_flags(argv: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for a, b in pairwise(argv) if a in ("-ub", "-b")]


def test_the_users_batch_bounds_the_ubatch_candidates() -> None:
    """`-- -b 1024`: no candidate's -ub is above it (llama-server would clamp it), and no
    command repeats -b (llama-server takes the last one: the user's would undo moetune's)."""
    code, out = plan(QWEN, *FIGURES, "--workload", "8k:512", "--json", "--", "-b", "1024")
    assert code == 0, out
    entries = json.loads(out)["frontier"]["entries"]
    assert {e["n_ubatch"] for e in entries} == {512, 1024}
    assert {e["n_batch"] for e in entries} == {1024}
    for e in entries:
        flags = _batch_flags(e["command"])
        assert [f for f in flags if f[0] == "-b"] == [("-b", "1024")]


def test_the_users_ubatch_is_the_only_candidate() -> None:
    code, out = plan(QWEN, *FIGURES, "--workload", "8k:512", "--json", "--", "-ub", "2048")
    assert code == 0, out
    data = json.loads(out)
    assert {e["n_ubatch"] for e in data["frontier"]["entries"]} == {2048}
    # the plan itself is made at the user's -ub, and its command says it once
    assert data["plan"]["settings"]["n_ubatch"] == 2048
    assert _batch_flags(data["command"]).count(("-ub", "2048")) == 1


def test_an_ubatch_above_the_batch_or_given_twice_is_refused() -> None:
    code, _, err = cli("plan", QWEN, *FIGURES, "--ubatch", "4096", "--", "-b", "1024")
    assert code == ExitCode.BAD_VALUE
    assert "above -b 1024" in err and "Traceback" not in err
    code, _, err = cli("plan", QWEN, *FIGURES, "--ubatch", "1024", "--", "-ub", "2048")
    assert code == ExitCode.BAD_VALUE
    assert "give the ubatch once" in err


def test_a_large_ubatch_gets_its_batch() -> None:
    """--ubatch 4096: the command raises -b to it (llama.cpp's -b 2048 would clamp it)."""
    code, out = plan(QWEN, *FIGURES, "--ubatch", "4096", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert ("-b", "4096") in _batch_flags(data["command"])
    assert data["plan"]["settings"]["n_ubatch"] == 4096


def test_the_table_shows_the_figure_it_ranks_by_and_no_ubatch_above_the_context() -> None:
    """A workload ranks by seconds per request: a column of them, in order; at a 1k context no
    -ub above it is a candidate (llama.cpp clamps -b, and so -ub, to the context)."""
    code, out = plan(QWEN, *FIGURES, "--workload", "8k:256")
    assert code == 0, out
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if "placement" in line and "-ub" in line)
    assert lines[top].rstrip().endswith("s/request")
    end = next(i for i in range(top, len(lines)) if lines[i].startswith("tok/s: "))
    seconds = [float(line.split()[-1]) for line in lines[top + 2 : end]]
    assert len(seconds) >= 4 and seconds == sorted(seconds)
    assert "ranked by seconds per request" in " ".join(out.split())
    code, out = plan(QWEN, *FIGURES, "--ctx", "1k", "--workload", "512:64", "--json")
    assert code == 0, out
    ubatches = {e["n_ubatch"] for e in json.loads(out)["frontier"]["entries"]}
    assert ubatches and max(ubatches) <= 1024, ubatches
