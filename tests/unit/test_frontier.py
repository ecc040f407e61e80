"""The speed frontier: its candidates (N order, each ubatch re-planned, one device fewer), its
order by objective or workload, the pick (kept while uncalibrated), and its chart."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts, facts_from_gguf
from moetune.core.frontier import (
    Frontier,
    FrontierEntry,
    choose,
    device_subsets,
    frontier,
)
from moetune.core.goal import (
    LONG_PROMPT,
    UBATCHES,
    Goal,
    goal_of,
    parse_objective,
    request_seconds,
)
from moetune.core.plan import PlanRequest, make_plan, plan_target
from moetune.core.planner import plan_n_cpu_moe
from moetune.core.prior import UNCALIBRATED_ERROR
from moetune.core.settings import Settings
from moetune.core.speed import DeviceFigures, Forecast, MachineFigures
from moetune.errors import BadValueError
from moetune.gguf.split import read_model
from moetune.report.frontier import chart_lines
from moetune.units import GIB, Workload, parse_workload

from support.chart import panels, places
from support.helpers import EXAMPLE_GPT_OSS, EXAMPLE_QWEN
from support.width import WIDTH

SETTINGS = Settings(n_ctx=32768, type_k="q8_0", type_v="q8_0")
# figures with every term known: a 1 TB/s GPU on PCIe at 25 GB/s with 100 TFLOP/s, 60 GB/s RAM
GPU = DeviceFigures(memory_bytes_per_s=1e12, link_bytes_per_s=25e9, flops_per_s=1e14)
FULL = MachineFigures(devices=(GPU,), ram_bytes_per_s=60e9, cpu_flops_per_s=1e12)


@cache
def _facts(path: str) -> ModelFacts:
    return facts_from_gguf(read_model(path))


def _request(devices: tuple[DeviceSpec, ...], figures: MachineFigures | None) -> PlanRequest:
    return PlanRequest(
        model_path="m.gguf",
        devices=devices,
        headrooms=(0,),
        settings=SETTINGS,
        ram_total_bytes=256 * GIB,
        physical_cores=8,
        figures=figures,
    )


def _one(vram: int) -> tuple[DeviceSpec, ...]:
    return (DeviceSpec(total_bytes=vram),)


def _frontier(path: str, req: PlanRequest, goal: Goal, error: float | None = None) -> Frontier:
    facts = _facts(str(path))
    found = frontier(facts, req, make_plan(facts, req), goal, error=error)
    assert found is not None
    return found


def test_candidates_n_from_the_smallest_and_each_ubatch_replanned() -> None:
    """12 GiB for Qwen3-30B: per ubatch the smallest N that fits (larger for a larger ubatch's
    compute buffer, never smaller), then +1, +2, +4, ... and all 48 blocks; -b follows -ub
    4096 (llama.cpp clamps -ub to -b 2048)."""
    facts = _facts(str(EXAMPLE_QWEN))
    req = _request(_one(12 * GIB), None)
    found = _frontier(str(EXAMPLE_QWEN), req, Goal("decode"))
    target = plan_target(req)
    smallest = []
    for ub in UBATCHES:
        at = replace(SETTINGS, n_ubatch=ub, n_batch=max(2048, ub))
        n0 = plan_n_cpu_moe(facts, target, at).placement.n_cpu_moe or 0
        smallest.append(n0)
        ns = [
            e.n_cpu_moe
            for e in found.entries
            if e.n_ubatch == ub and e.form == "n_cpu_moe" and not e.thread_variant
        ]
        steps = [n0 + s for s in (0, 1, 2, 4, 8, 16, 32) if n0 + s < 48] + [48]
        assert sorted(n for n in ns if n is not None) == steps
        compute = {e.n_cpu_moe: e for e in found.entries if e.n_ubatch == ub}
        assert all(b <= 12 * GIB for e in compute.values() for b in e.device_bytes)
    assert smallest == sorted(smallest) and smallest[-1] > smallest[0]
    for entry in found.entries:
        assert ("-b" in entry.command) == (entry.n_ubatch > 2048)
        if entry.n_ubatch > 2048:
            assert entry.command[entry.command.index("-b") + 1] == str(entry.n_ubatch)
        threads = entry.command[entry.command.index("-t") + 1]
        assert threads == str(entry.threads) and (threads == "8") != entry.thread_variant
    # at one N a larger ubatch costs more device memory (its compute buffer)
    at_n = {e.n_ubatch: e.device_bytes[0] for e in found.entries if e.n_cpu_moe == 48}
    assert at_n[512] < at_n[1024] < at_n[2048] < at_n[4096]
    assert any(e.form == "override" for e in found.entries)  # the -ot form at 12 GiB


def test_one_device_fewer_on_two_devices() -> None:
    """gpt-oss-120b on 40 GiB + 24 GiB: the candidates on both, and on each alone (-dev)."""
    devices = (
        DeviceSpec(name="CUDA0", buft="CUDA0", total_bytes=40 * GIB),
        DeviceSpec(name="CUDA1", buft="CUDA1", total_bytes=24 * GIB),
    )
    req = _request(devices, None)
    subsets = device_subsets(req)
    assert [[d.name for d in s.devices] for s in subsets] == [["CUDA1"], ["CUDA0"]]
    assert [s.budgets for s in subsets] == [(24 * GIB,), (40 * GIB,)]
    found = _frontier(str(EXAMPLE_GPT_OSS), req, Goal("decode"))
    sets = {tuple(e.devices) for e in found.entries}
    assert sets == {("CUDA0", "CUDA1"), ("CUDA0",), ("CUDA1",)}
    for entry in found.entries:
        assert entry.all_devices == (len(entry.devices) == 2)
        assert len(entry.device_bytes) == len(entry.devices)
        if not entry.all_devices:
            assert entry.command[entry.command.index("-dev") + 1] == entry.devices[0]
    # fewer devices hold fewer experts: the smallest N on one is above the smallest on two
    least = {
        s: min(e.n_cpu_moe or 0 for e in found.entries if tuple(e.devices) == s and e.n_cpu_moe)
        for s in sets
    }
    assert least[("CUDA1",)] > least[("CUDA0",)] > least[("CUDA0", "CUDA1")]


@pytest.mark.parametrize(
    "goal",
    [Goal("decode"), Goal("prefill"), Goal("balanced"), Goal(None, Workload(8192, 512))],
)
def test_ordered_by_the_goal(goal: Goal) -> None:
    """Each entry's score is its forecast's decode, prefill (of 4096 tokens), their geometric
    mean, or 1 / (P / prefill + G / decode); the entries are in descending score."""
    req = _request(_one(16 * GIB), FULL)
    found = _frontier(str(EXAMPLE_QWEN), req, goal)
    for entry in found.entries:
        f = entry.forecast
        assert f.decode_tok_s and f.prefill_tok_s
        if goal.workload is not None:
            prompt, gen = goal.workload
            expected = 1 / (prompt / f.prefill_tok_s + gen / f.decode_tok_s)
        else:
            expected = {
                "decode": f.decode_tok_s,
                "prefill": f.prefill_tok_s,
                "balanced": (f.decode_tok_s * f.prefill_tok_s) ** 0.5,
            }[goal.objective or ""]
        assert entry.score == pytest.approx(expected)
        assert f.n_prompt == goal.n_prompt and f.depth == goal.depth
        assert f.n_prompt == (8192 if goal.workload else 512 if goal == Goal("decode") else 4096)
    scores = [e.score or 0 for e in found.entries]
    assert scores == sorted(scores, reverse=True)
    assert found.best == 0


def test_a_workload_decodes_after_its_prompt() -> None:
    """8k:512: decode at depth 8192 (slower than at 0: the KV read grows), prefill of 8192."""
    req = _request(_one(16 * GIB), FULL)
    deep = _frontier(str(EXAMPLE_QWEN), req, Goal(None, Workload(8192, 512)))
    flat = _frontier(str(EXAMPLE_QWEN), req, Goal("decode"))
    # the plan's own placement in both (each goal may pick another)
    pick_deep = next(e for e in deep.entries if e.base and not e.thread_variant)
    pick_flat = next(e for e in flat.entries if e.base and not e.thread_variant)
    assert pick_deep.command == pick_flat.command
    assert pick_deep.forecast.decode_tok_s < pick_flat.forecast.decode_tok_s  # type: ignore[operator]
    seconds = request_seconds(pick_deep.forecast, Workload(8192, 512))
    assert seconds == pytest.approx(1 / (pick_deep.score or 1))


def test_prefill_prefers_a_larger_ubatch_beyond_the_uncalibrated_error() -> None:
    """By prefill a larger -ub wins (the CPU experts cross PCIe once per ubatch); the forecast
    is uncalibrated, so the pick switches only where the gain is beyond its expected error
    (core/prior.py UNCALIBRATED_ERROR): here it is, and the frontier says by how much; with
    an error figure above the gain the plan's own placement stays."""
    req = _request(_one(16 * GIB), FULL)
    result = make_plan(_facts(str(EXAMPLE_QWEN)), req)
    found = _frontier(str(EXAMPLE_QWEN), req, Goal("prefill"))
    best = found.entries[0]
    own = next(e for e in found.entries if e.base)
    assert best.n_ubatch > 512 and own.command == result.first.command
    gain = (best.score or 0) / (own.score or 1) - 1
    assert gain > UNCALIBRATED_ERROR
    assert found.switched and found.picked == 0
    assert f"beyond its {UNCALIBRATED_ERROR:.0%} error" in found.why
    assert f"-ub {best.n_ubatch}" in found.why
    switched = _frontier(str(EXAMPLE_QWEN), req, Goal("prefill"), error=gain / 2)
    assert switched.switched and switched.picked == 0 and switched.entries[0].picked
    kept = _frontier(str(EXAMPLE_QWEN), req, Goal("prefill"), error=gain * 2)
    assert not kept.switched and kept.entries[kept.picked].base


def test_unknown_figures_keep_the_order_and_the_pick() -> None:
    """No figures: every candidate is listed with its memory, none can be ranked."""
    req = _request(_one(16 * GIB), None)
    found = _frontier(str(EXAMPLE_QWEN), req, Goal(None, Workload(8192, 512)))
    assert found.best is None and not found.switched
    assert all(e.score is None for e in found.entries)
    assert found.entries[found.picked].base
    assert "CUDA0 memory bandwidth" in found.missing and "RAM bandwidth" in found.missing
    assert "cannot rank" in found.why


def _entry(n: int, ub: int, decode: float, prefill: float | None) -> FrontierEntry:
    forecast = Forecast(
        decode_tok_s=decode,
        prefill_tok_s=prefill,
        depth=0,
        n_prompt=512,
        n_ubatch=ub,
        decode_terms=[],
        prefill_terms=[],
        missing=[],
    )
    return FrontierEntry(
        form="n_cpu_moe",
        n_cpu_moe=n,
        override_tensor=[],
        n_ubatch=ub,
        n_batch=2048,
        threads=8,
        devices=["CUDA0"],
        device_bytes=[GIB],
        host_bytes=GIB,
        command=["llama-server", str(n), str(ub)],
        forecast=forecast,
        score=decode,
    )


def test_choose_by_the_error() -> None:
    entries = [_entry(4, 512, 110.0, None), _entry(2, 512, 100.0, None)]
    assert choose(entries, 1, Goal("decode"), None)[:2] == (1, False)
    assert choose(entries, 1, Goal("decode"), 0.05)[:2] == (0, True)  # +10 % > 5 %
    assert choose(entries, 1, Goal("decode"), 0.20)[:2] == (1, False)  # +10 % is within 20 %
    assert choose(entries, 0, Goal("decode"), 0.0)[:2] == (0, False)  # it is the fastest


def _charted(entries: list[FrontierEntry]) -> Frontier:
    return Frontier(
        goal="decode",
        n_prompt=512,
        depth=0,
        entries=entries,
        best=0,
        picked=0,
        switched=False,
        why="",
        threads="",
        missing=[],
    )


def test_the_chart_marks_each_ubatch() -> None:
    """N 0 at 100 tok/s (-ub 512) top left, N 48 at 25 tok/s (-ub 2048) bottom right (the
    ranges are the data's); labelled axes and a legend, at 80 columns; prefill unknown is
    said."""
    found = _charted([_entry(0, 512, 100.0, None), _entry(48, 2048, 25.0, None)])
    lines = chart_lines(found, 48)
    assert all(len(line) <= WIDTH for line in lines), "\n".join(lines)
    text = "\n".join(lines)
    assert "decode tok/s against --n-cpu-moe N" in text
    assert "--n-cpu-moe N (of 48 layers)" in text and "tok/s" in text
    assert "55 -ub 512" in text and "22 -ub 2048" in text  # the legend: each mark, its -ub
    (rows,) = panels(lines)
    assert places(rows, "52+") == {(0, 0): "5", (len(rows) - 1, len(rows[0]) - 1): "2"}
    assert "prefill tok/s: unknown" in text


def test_the_chart_keeps_distinct_points_apart() -> None:
    """A 4090's candidates (N 0-4, decode within a few per cent of each other) each get a
    place of their own; where two ubatches forecast the same, one ``+`` says so."""
    entries = [_entry(n, 512, 200.0 - 3 * n, 4000.0 - 100 * n) for n in range(5)]
    entries += [_entry(n, 2048, 200.0 - 3 * n, 5000.0 - 100 * n) for n in range(2, 5)]
    lines = chart_lines(_charted(entries), 48)
    assert all(len(line) <= WIDTH for line in lines), "\n".join(lines)
    decode, prefill = "\n".join(lines).split("prefill tok/s against")
    assert "++ two or more in one place" in decode
    assert "two or more" not in prefill  # the ubatches' prefill differs: each has its place
    decode_rows, prefill_rows = panels(lines)
    shown = places(decode_rows, "52+")  # N 0 and 1 -ub 512 alone, N 2-4 both ubatches
    assert sorted(shown.values()) == ["+", "+", "+", "5", "5"]
    assert len({c for _, c in shown}) == 5  # one N a column
    shown = places(prefill_rows, "52+")
    assert sorted(shown.values()) == ["2"] * 3 + ["5"] * 5


def test_goal_and_workload_parsing() -> None:
    assert parse_workload("8k:512") == Workload(8192, 512)
    assert parse_workload("0:128") == Workload(0, 128)
    for bad in ("8k", "8k:0", "x:1"):
        with pytest.raises(BadValueError):
            parse_workload(bad)
    with pytest.raises(BadValueError):
        parse_objective("fast")
    assert goal_of("prefill", Workload(1, 2)).workload == Workload(1, 2)
    assert goal_of(None, None) == Goal("decode")
    assert Goal(None, Workload(8192, 512)).depth == 8192
    assert Goal("prefill").n_prompt == LONG_PROMPT == max(UBATCHES)


def test_thread_counts_are_candidates() -> None:
    """8 physical cores: the plan's own placement at -t 1, 2 and 4 too, each with its command
    and forecast, ranked with the others; fewer threads never decode faster (the RAM read
    saturates), and a -t after -- is the only count."""
    req = _request(_one(12 * GIB), FULL)
    found = _frontier(str(EXAMPLE_QWEN), req, Goal("decode"))
    own = next(e for e in found.entries if e.base)
    variants = [e for e in found.entries if e.thread_variant and e.command[:-4] == own.command[:-4]]
    assert sorted(e.threads or 0 for e in variants) == [1, 2, 4]
    for entry in variants:
        assert entry.command[entry.command.index("-t") + 1] == str(entry.threads)
        assert entry.forecast.decode_tok_s is not None and own.forecast.decode_tok_s is not None
        assert entry.forecast.decode_tok_s <= own.forecast.decode_tok_s
    one = next(e for e in variants if e.threads == 1)
    assert one.forecast.decode_tok_s is not None and own.forecast.decode_tok_s is not None
    assert one.forecast.decode_tok_s < own.forecast.decode_tok_s
    assert "-t: candidates 1, 2, 4, 8 (of 8 physical cores)" in found.threads
    given = _frontier(str(EXAMPLE_QWEN), replace(req, pass_through=("-t", "3")), Goal("decode"))
    assert not any(e.thread_variant for e in given.entries)
    assert given.threads == "-t: the one after -- (not a candidate)"
