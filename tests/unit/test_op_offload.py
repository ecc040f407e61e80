"""The op-offload threshold (``GGML_OP_OFFLOAD_MIN_BATCH``, ggml-cuda.cu ``offload_op``:
an op on host weights whose batch reaches it runs on the GPU, its weights copied over the
link; below it the CPU runs it): the speed model, the compute buffer, the frontier's
candidate, the printed command, the alias, the exports, the environment read and set, and
the speed points that record it."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
import yaml

from moetune.core.command import command_env, shell_join
from moetune.core.compute.estimate import estimate_compute
from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts, facts_from_gguf
from moetune.core.frontier import frontier, offload_thresholds, prompt_ubatches
from moetune.core.goal import Goal
from moetune.core.placement import Placement
from moetune.core.plan import PlanRequest, make_plan
from moetune.core.settings import OP_OFFLOAD_ENV, OP_OFFLOAD_MIN_BATCH, Settings
from moetune.core.speed import (
    DeviceFigures,
    MachineFigures,
    forecast,
    placement_layout,
    ubatch_traffic,
)
from moetune.errors import BadValueError
from moetune.gguf.split import read_model
from moetune.jobs.alias import render_function
from moetune.jobs.export import ServeEntry, llama_swap_text, preset_text
from moetune.jobs.speed import measured_of, settings_of_args
from moetune.jobs.values import op_offload_min_batch
from moetune.llamacpp.process import child_env
from moetune.records.speed import SpeedMachine, SpeedModel, SpeedPoint, SpeedSource
from moetune.units import GIB, MIB, Workload

from support.helpers import EXAMPLE_QWEN

ONE = (DeviceSpec(),)
SETTINGS = Settings(n_ctx=32768, type_k="q8_0", type_v="q8_0")
EXPERTS = 17_553_162_240  # Qwen3-30B-A3B Q4_K_M's routed-expert bytes (test_speed.py's table)
# every term known: a 1 TB/s GPU on PCIe at 25 GB/s with 100 TFLOP/s, 60 GB/s RAM, 1 TFLOP/s CPU
GPU = DeviceFigures(memory_bytes_per_s=1e12, link_bytes_per_s=25e9, flops_per_s=1e14)
FULL = MachineFigures(devices=(GPU,), ram_bytes_per_s=60e9, cpu_flops_per_s=1e12)


@cache
def _facts() -> ModelFacts:
    return facts_from_gguf(read_model(str(EXAMPLE_QWEN)))


def _cpu_layout(settings: Settings) -> object:
    return placement_layout(_facts(), Placement.with_n_cpu_moe(48), settings, ONE)


# --- the speed model ---------------------------------------------------------------------------


def test_a_ubatch_below_the_threshold_reads_the_experts_from_ram() -> None:
    """At 1024 a 512-token ubatch keeps every CPU expert op on the CPU (RAM reads the touched
    experts, nothing crosses the link), a 1024-token one copies them over; at the default 32
    the 512-token one is copied."""
    at = replace(SETTINGS, n_ubatch=2048, op_offload_min_batch=1024)
    layout = placement_layout(_facts(), Placement.with_n_cpu_moe(48), at, ONE)
    assert layout.op_offload_min_batch == 1024
    below = ubatch_traffic(layout, 512)
    touched = 1 - (120 / 128) ** 512
    assert below.link_bytes == (0.0,)
    assert below.ram_weight_bytes == pytest.approx(EXPERTS * touched, rel=1e-12)
    params = 48 * 3 * 2048 * 768 * 128  # routed-expert parameters, 8/128 active
    assert below.cpu_flops >= 2 * params * 8 / 128 * 512 * (1 - 1e-12)
    at_threshold = ubatch_traffic(layout, 1024)
    assert at_threshold.link_bytes[0] == pytest.approx(EXPERTS, rel=1e-9)
    assert at_threshold.ram_weight_bytes == 0
    default = placement_layout(
        _facts(), Placement.with_n_cpu_moe(48), replace(SETTINGS, n_ubatch=2048), ONE
    )
    assert default.op_offload_min_batch == OP_OFFLOAD_MIN_BATCH
    assert ubatch_traffic(default, 512).link_bytes[0] > 0


def test_the_threshold_moves_prefill_time_from_the_link_to_the_cpu() -> None:
    """A 300-token prompt at -ub 512: at 32 its experts cross a 25 GB/s link (17.55 GB,
    0.7 s); at 512 the CPU computes them (1 TFLOP/s) and RAM reads them: the forecast's
    link term goes, the CPU's comes; decode is unchanged (one token is never offloaded)."""
    offloaded = forecast(_cpu_layout(SETTINGS), FULL, n_prompt=300)  # type: ignore[arg-type]
    on_cpu = forecast(
        _cpu_layout(replace(SETTINGS, op_offload_min_batch=512)),  # type: ignore[arg-type]
        FULL,
        n_prompt=300,
    )
    terms = {t.term: t.amount for t in offloaded.prefill_terms}
    cpu_terms = {t.term: t.amount for t in on_cpu.prefill_terms}
    assert terms["CUDA0 link"] > 0 and cpu_terms["CUDA0 link"] == 0
    assert cpu_terms["CPU compute"] > terms["CPU compute"]
    assert offloaded.decode_tok_s == on_cpu.decode_tok_s
    assert offloaded.prefill_tok_s is not None and on_cpu.prefill_tok_s is not None
    assert offloaded.prefill_tok_s != on_cpu.prefill_tok_s


# --- the compute buffer ------------------------------------------------------------------------


def test_above_the_ubatch_the_compute_buffer_holds_no_expert_copy() -> None:
    """ggml-backend.cpp's scheduler puts an op on host weights on the GPU only where
    offload_op takes it; the copy of the weight is allocated in the GPU's compute buffer.
    The reserve graph's ubatch is 512 tokens: a threshold of 512 changes nothing, 513 keeps
    the experts' ops on the CPU (Qwen3-30B-A3B Q4_K_M: its Q6_K down tensor, 157.5 MiB, is
    the largest copy; the peak falls from 221.5 to 88.0 MiB, what the CPU's activations
    take in the host buffer instead)."""
    common = {"n_ctx": 4096, "cpu_expert_layers": 10}
    default = estimate_compute(_facts(), **common)  # type: ignore[arg-type]
    same = estimate_compute(_facts(), op_offload_min_batch=512, **common)  # type: ignore[arg-type]
    above = estimate_compute(_facts(), op_offload_min_batch=513, **common)  # type: ignore[arg-type]
    assert same == default
    assert default.device_bytes - above.device_bytes > 100 * MIB
    assert above.host_bytes > default.host_bytes  # the activations the CPU runs on


# --- the frontier ------------------------------------------------------------------------------


def test_prompt_ubatches_and_thresholds() -> None:
    assert prompt_ubatches(4096, 512) == {512}
    assert prompt_ubatches(700, 512) == {512, 188}
    assert prompt_ubatches(300, 512) == {300}
    at = replace(SETTINGS, n_ubatch=512)
    assert offload_thresholds(at, 4096) == [1024]  # every ubatch on the CPU
    assert offload_thresholds(at, 300) == [512]
    assert offload_thresholds(at, 700) == [256, 1024]  # the 188-token rest, then all
    assert offload_thresholds(at, 16) == []  # below 32 already on the CPU
    own = replace(at, op_offload_min_batch=1024)
    assert offload_thresholds(own, 512) == [OP_OFFLOAD_MIN_BATCH]  # back to ggml's default


def _request(figures: MachineFigures | None, vram: int = 12 * GIB) -> PlanRequest:
    return PlanRequest(
        model_path="m.gguf",
        devices=(DeviceSpec(total_bytes=vram),),
        headrooms=(0,),
        settings=SETTINGS,
        ram_total_bytes=256 * GIB,
        physical_cores=8,
        figures=figures,
    )


def test_the_frontier_ranks_thresholds_for_short_prompts() -> None:
    """A workload of 300-token prompts: at each ubatch a candidate with the threshold 512
    (its prompts computed on the CPU), re-planned, its command's environment set, ranked
    with the others; a decode goal has none (one token is never offloaded)."""
    facts = _facts()
    req = _request(FULL)
    goal = Goal(workload=Workload(300, 200))
    found = frontier(facts, req, make_plan(facts, req), goal)
    assert found is not None
    thresholds = [e for e in found.entries if e.op_offload_min_batch is not None]
    assert thresholds and {e.op_offload_min_batch for e in thresholds} == {512}
    for entry in thresholds:
        assert entry.env == {OP_OFFLOAD_ENV: "512"}
        assert entry.score is not None
        link = next(t for t in entry.forecast.prefill_terms if t.term == "CUDA0 link")
        assert link.amount == 0
    scores = [e.score for e in found.entries if e.score is not None]
    assert scores == sorted(scores, reverse=True)  # ranked with the others
    base = next(e for e in found.entries if e.base)
    assert base.op_offload_min_batch is None and not base.env
    decode = frontier(facts, req, make_plan(facts, req), Goal("decode"))
    assert decode is not None
    assert all(e.op_offload_min_batch is None for e in decode.entries)


def test_a_slow_link_makes_the_cpu_threshold_win() -> None:
    """The same workload over a 1 GB/s link (an eGPU over a slow port): the CPU's 512
    candidate is forecast faster than copying the experts for every prompt."""
    slow = replace(GPU, link_bytes_per_s=1e9)
    facts = _facts()
    req = _request(replace(FULL, devices=(slow,)))
    found = frontier(facts, req, make_plan(facts, req), Goal(workload=Workload(300, 200)))
    assert found is not None and found.entries[0].op_offload_min_batch == 512


def test_the_threshold_is_part_of_the_plan() -> None:
    """The plan's settings carry it; its commands' environment says it, in the shell line;
    the JSON of a plan without it is unchanged (the field left out while unset)."""
    facts = _facts()
    req = _request(FULL)
    plain = make_plan(facts, req)
    assert plain.recommended.env == {}
    with_threshold = make_plan(
        facts, replace(req, settings=replace(SETTINGS, op_offload_min_batch=1024))
    )
    rec = with_threshold.recommended
    assert rec.env == {OP_OFFLOAD_ENV: "1024"}
    assert shell_join(rec.command, rec.env).startswith(f"{OP_OFFLOAD_ENV}=1024 llama-server ")
    assert command_env(SETTINGS) == {}
    from moetune.record import jsonable

    assert "op_offload_min_batch" not in jsonable(plain.settings)
    assert jsonable(with_threshold.settings)["op_offload_min_batch"] == 1024
    with pytest.raises(BadValueError):
        Settings(n_ctx=1, op_offload_min_batch=0)


# --- the command, the alias, the exports --------------------------------------------------------


def test_shell_join_quotes_the_command_after_the_assignment() -> None:
    line = shell_join(["llama-server", "-m", "a b.gguf"], {OP_OFFLOAD_ENV: "1024"})
    assert line == f"{OP_OFFLOAD_ENV}=1024 llama-server -m 'a b.gguf'"
    assert shell_join(["llama-server"]) == "llama-server"


def test_an_alias_sets_the_variable_for_its_command() -> None:
    env = {OP_OFFLOAD_ENV: "1024"}
    argv = ["sh", "-c", f'echo "${OP_OFFLOAD_ENV}"']
    bash = render_function("qwen", argv, "bash", env=env)
    assert f"    {OP_OFFLOAD_ENV}=1024 sh -c" in bash
    fish = render_function("qwen", argv, "fish", env=env)
    assert f"    env {OP_OFFLOAD_ENV}=1024 sh -c" in fish
    done = subprocess.run(
        ["bash", "-c", bash + f'\nqwen\necho "after:${OP_OFFLOAD_ENV}"'],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.stdout.splitlines() == ["1024", "after:"]  # set for the command alone


def test_llama_swap_sets_env_and_a_preset_says_it_is_the_routers() -> None:
    entry = ServeEntry(
        "q", ("-m", "/m/q.gguf", "-ngl", "99"), True, "tuned", ((OP_OFFLOAD_ENV, "1024"),)
    )
    plain = ServeEntry("p", ("-m", "/m/p.gguf", "-ngl", "99"), True, "tuned")
    swap = yaml.safe_load(llama_swap_text([entry, plain], "/bin/llama-server"))
    assert swap["models"]["q"]["env"] == [f"{OP_OFFLOAD_ENV}=1024"]
    assert "env" not in swap["models"]["p"]
    assert OP_OFFLOAD_ENV not in swap["models"]["q"]["cmd"]
    preset = preset_text([entry, plain])
    section = preset.split("[q]")[1].split("[p]")[0]
    assert f"{OP_OFFLOAD_ENV}=1024: a process-wide variable of the router" in section
    assert f"{OP_OFFLOAD_ENV}=1024 llama-server --models-preset" in section
    assert OP_OFFLOAD_ENV not in preset.split("[p]")[1]


# --- the environment ---------------------------------------------------------------------------


def test_the_environment_is_read_as_the_current_value() -> None:
    assert op_offload_min_batch(None, {OP_OFFLOAD_ENV: "1024"}) == 1024
    assert op_offload_min_batch(None, {}) is None
    assert op_offload_min_batch(64, {OP_OFFLOAD_ENV: "1024"}) == 64  # the option wins
    assert op_offload_min_batch(None, {OP_OFFLOAD_ENV: " 0032 "}) == 32
    assert op_offload_min_batch(None, {OP_OFFLOAD_ENV: str(2**31 - 1)}) == 2**31 - 1
    # atoi reads other scripts' digits as 0; past a 32-bit int, or 5,000 digits: refused
    for bad in ("abc", "0", "-5", "1e3", "١٢", "²", str(2**31), "9" * 5000):
        with pytest.raises(BadValueError, match=OP_OFFLOAD_ENV):
            op_offload_min_batch(None, {OP_OFFLOAD_ENV: bad})
    with pytest.raises(BadValueError):
        op_offload_min_batch(0, {})


def test_child_env_sets_the_plans_value_over_the_shells() -> None:
    shell = {"PATH": "/bin", OP_OFFLOAD_ENV: "7", "LLAMA_ARG_N_CPU_MOE": "3"}
    found = child_env(shell, {OP_OFFLOAD_ENV: "1024"})
    assert found[OP_OFFLOAD_ENV] == "1024" and found["PATH"] == "/bin"
    assert "LLAMA_ARG_N_CPU_MOE" not in found
    assert child_env(shell)[OP_OFFLOAD_ENV] == "7"  # the quick queries: as the shell has it


def test_speed_points_record_and_calibrate_with_it() -> None:
    placement, settings = settings_of_args(["-ub", "512"], {OP_OFFLOAD_ENV: "1024"})
    assert placement.op_offload_min_batch == 1024
    assert settings_of_args(["-ub", "512"])[0].op_offload_min_batch is None
    point = SpeedPoint(
        kind="prompt",
        model=SpeedModel(file_name="q.gguf"),
        placement=placement.model_copy(update={"n_cpu_moe": 48}),
        n_prompt=512,
        n_gen=0,
        tps=100.0,
        machine=SpeedMachine(),
        source=SpeedSource(tool="moetune bench"),
        **settings,
    )
    (measured,) = measured_of([point], _facts(), SETTINGS, ONE)
    assert measured.layout.op_offload_min_batch == 1024
    assert ubatch_traffic(measured.layout, 512).link_bytes == (0.0,)


def test_the_table_marks_the_threshold_and_the_chart_keeps_the_plans_own() -> None:
    """A 4 GB/s link: the table shows the threshold candidates (``N 22 op>=512``); the chart
    draws N against tok/s at the plan's own threshold only (one series per ubatch)."""
    from rich.console import Console

    from moetune.report.frontier import chart_lines, render_frontier

    facts = _facts()
    req = _request(replace(FULL, devices=(replace(GPU, link_bytes_per_s=4e9),)))
    found = frontier(facts, req, make_plan(facts, req), Goal(workload=Workload(300, 200)))
    assert found is not None
    console = Console(width=80, record=True)
    for part in render_frontier(found, facts.n_layers):
        console.print(part)
    text = console.export_text()
    assert " op>=512 " in text
    own = replace(found, entries=[e for e in found.entries if e.op_offload_min_batch is None])
    assert chart_lines(found, facts.n_layers) == chart_lines(own, facts.n_layers)
    assert found.entries[0].op_offload_min_batch == 512  # the slow link: the CPU wins


def test_llama_bench_runs_with_it_and_its_points_say_so(tmp_path: Path) -> None:
    """`calibrate --measure` runs llama-bench with the plan's threshold set (run_tool's env)
    and marks its rows' points with it: llama-bench's own output does not record it."""
    import stat
    import sys

    from moetune.jobs.speed import with_threshold
    from moetune.llamacpp.process import run_tool

    tool = tmp_path / "llama-bench"
    tool.write_text(f"#!{sys.executable}\nimport os\nprint(os.environ.get({OP_OFFLOAD_ENV!r}))")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "out.txt"
    run_tool([str(tool)], out, timeout_s=30, env={OP_OFFLOAD_ENV: "1024"})
    assert out.read_text() == "1024\n"
    placement, settings = settings_of_args(["-ub", "512"])
    point = SpeedPoint(
        kind="prompt",
        model=SpeedModel(file_name="q.gguf"),
        placement=placement,
        n_prompt=512,
        n_gen=0,
        tps=100.0,
        machine=SpeedMachine(),
        source=SpeedSource(tool="llama-bench"),
        **settings,
    )
    assert point.placement.op_offload_min_batch is None
    assert with_threshold(point, 1024).placement.op_offload_min_batch == 1024
