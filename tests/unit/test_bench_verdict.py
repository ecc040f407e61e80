"""moetune bench without llama-server: statistics, the verdict, depths, --fit's log, the
configurations, saved results and their rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from moetune.core.devices import DeviceSpec
from moetune.core.memory import Settings
from moetune.errors import BadValueError, ModelFileError
from moetune.jobs import bench as br
from moetune.jobs.launch import DeviceSetup, LaunchSpec
from moetune.jobs.loader import load_model_facts
from moetune.jobs.measure import BenchRequests, Prompts, Repeats, repeated
from moetune.jobs.names import CONFIG_NAMES
from moetune.llamacpp import log
from moetune.llamacpp.memprobe import LogProbe
from moetune.records import results as res
from moetune.records.fit import FitDevice, describe_fit
from moetune.records.server import Device, ServerInfo
from moetune.report import SCHEMA_VERSION, payloads, to_json
from moetune.report import bench as rb
from moetune.store import bench as saved
from moetune.store import paths
from moetune.units import MIB

from support.bench import bench_result, row, sample
from support.chart import panels, places
from support.factory import ModelFactory, write_model
from support.fakes import FakeMemoryProbe
from support.width import WIDTH

# --- statistics and the verdict -------------------------------------------------------------


def test_stat_median_and_range() -> None:
    assert res.Stat.of([3.0, 1.0, 2.0]) == res.Stat(median=2.0, min=1.0, max=3.0)
    assert res.Stat.of([1.0, 4.0]) == res.Stat(median=2.5, min=1.0, max=4.0)
    assert res.Stat.of([None, 5.0]) == res.Stat(median=5.0, min=5.0, max=5.0)
    assert res.Stat.of([None]) is None and res.Stat.of([]) is None


def test_summarize_keeps_every_sample() -> None:
    result = res.summarize("plan", 64, [sample(10.0, ttft=None), sample(20.0, ttft=0.2)], None)
    assert len(result.samples) == 2
    assert result.decode_tps == res.Stat(median=15.0, min=10.0, max=20.0)
    assert result.ttft_s == res.Stat(median=0.2, min=0.2, max=0.2)  # unknown TTFT left out
    with pytest.raises(ValueError):
        res.summarize("plan", 64, [], None)


def test_verdict_clear_winner() -> None:
    results = [
        row("plan", 0, [40.0, 41.0, 42.0]),
        row("cpu-moe", 0, [20.0, 21.0, 22.0]),
        row("layers", 0, [10.0, 10.0, 10.0]),
    ]
    decode = next(v for v in res.verdicts(results) if v.metric == "decode_tps")
    assert (decode.winner, decode.runner_up, decode.within_noise) == ("plan", "cpu-moe", False)
    assert decode.ratio == pytest.approx(41.0 / 21.0)
    text = rb.verdict_text(decode)
    assert text == "depth 0, decode: plan is fastest, 1.95x cpu-moe (41.0 tok/s vs 21.0)"


def test_verdict_noisy_when_spreads_overlap() -> None:
    results = [row("plan", 64, [30.0, 40.0, 50.0]), row("fit", 64, [35.0, 38.0, 45.0])]
    decode = res.verdicts(results)[0]
    assert decode.winner == "plan" and decode.within_noise
    assert decode.overlapping == ["fit"] and decode.winner_stat == results[0].decode_tps
    assert rb.verdict_text(decode) == (
        "depth 64, decode: noisy, no winner: plan 40.0 (30.0-50.0, spread 50.0 %) "
        "overlaps fit 38.0 (35.0-45.0, spread 26.3 %)"
    )
    touching = [row("plan", 64, [40.0, 50.0]), row("fit", 64, [30.0, 40.0])]
    assert res.verdicts(touching)[0].within_noise  # min of the winner == max of the other
    apart = [row("plan", 64, [40.1, 50.0]), row("fit", 64, [30.0, 40.0])]
    assert not res.verdicts(apart)[0].within_noise


def test_verdict_names_every_configuration_that_reaches_the_fastest() -> None:
    """Not only the runner-up: a slower median whose range still reaches the winner's slowest
    repeat makes the verdict noisy too."""
    results = [
        row("plan", 0, [40.0, 41.0, 42.0]),
        row("cpu-moe", 0, [38.0, 38.5, 39.0]),
        row("layers", 0, [20.0, 30.0, 40.5]),
    ]
    decode = next(v for v in res.verdicts(results) if v.metric == "decode_tps")
    assert decode.runner_up == "cpu-moe" and decode.within_noise
    assert decode.overlapping == ["layers"]
    text = rb.verdict_text(decode)
    assert text.startswith("depth 0, decode: noisy, no winner: plan 41.0 (40.0-42.0")
    assert text.endswith("overlaps layers 30.0 (20.0-40.5, spread 68.3 %)")
    assert "is fastest" not in text


def test_an_older_verdict_without_ranges_is_still_told() -> None:
    old = res.Verdict(
        depth=0,
        metric="decode_tps",
        winner="plan",
        runner_up="fit",
        winner_median=40.0,
        runner_up_median=39.0,
        ratio=40 / 39,
        within_noise=True,
    )
    assert rb.verdict_text(old) == (
        "depth 0, decode: noisy, no winner: plan and fit overlap (40.0 tok/s vs 39.0)"
    )


def test_spread_is_derived_and_read_again() -> None:
    stat = res.Stat.of([40.0, 42.0, 44.0])
    assert stat is not None and stat.spread == pytest.approx(4 / 42)
    dumped = stat.model_dump(mode="json")
    assert dumped["spread"] == pytest.approx(4 / 42)
    assert res.Stat.model_validate(dumped) == stat
    forged = {**dumped, "spread": 0.0}  # derived: a saved value is not believed
    assert res.Stat.model_validate(forged).spread == pytest.approx(4 / 42)
    assert res.Stat(median=0.0, min=0.0, max=0.0).spread is None


def test_steady_needs_every_sample_to_agree() -> None:
    assert res.steady([sample(40.0), sample(41.0), sample(42.0)], 3, 0.10)  # 2/41: 4.9 %
    assert not res.steady([sample(20.0), sample(40.0), sample(41.0)], 3, 0.10)  # a cold one
    assert not res.steady([sample(40.0), sample(41.0)], 3, 0.10)  # not yet three
    slow_prefill = [sample(40.0, prefill=500.0), sample(40.0, prefill=1000.0)]
    assert not res.steady(slow_prefill, 2, 0.10)  # decode agrees, prefill does not


def test_summarize_says_whether_it_settled() -> None:
    samples = [sample(20.0), sample(40.0), sample(41.0), sample(42.0)]
    loose = res.summarize("plan", 64, samples, None, settled=False)
    assert loose.decode_tps == res.Stat(median=40.5, min=20.0, max=42.0) and not loose.settled
    assert res.summarize("plan", 64, samples, None).settled


def test_verdict_per_depth_and_metric() -> None:
    results = [
        row("plan", 0, [50.0, 51.0], prefills=[900.0, 950.0]),
        row("gpu-only", 0, [30.0, 31.0], prefills=[4000.0, 4100.0]),
        row("plan", 4096, [20.0, 21.0]),
        row("gpu-only", 4096, [40.0, 41.0]),
    ]
    found = {(v.depth, v.metric): v for v in res.verdicts(results)}
    assert set(found) == {
        (0, "decode_tps"),
        (0, "prefill_tps"),
        (4096, "decode_tps"),
        (4096, "prefill_tps"),
    }
    assert found[0, "decode_tps"].winner == "plan"
    assert found[0, "prefill_tps"].winner == "gpu-only"
    assert found[0, "prefill_tps"].ratio == pytest.approx(4050 / 925)
    assert found[4096, "decode_tps"].winner == "gpu-only"
    assert found[4096, "prefill_tps"].within_noise  # equal prefill: overlap


def test_verdict_single_configuration_and_zero() -> None:
    alone = res.verdicts([row("server", 128, [12.0])])
    assert alone[0].runner_up is None and alone[0].ratio is None and not alone[0].within_noise
    assert rb.verdict_text(alone[0]) == "depth 128, decode: only server measured (12.0 tok/s)"
    zero = res.verdicts([row("a", 0, [5.0]), row("b", 0, [0.0])])[0]
    assert zero.winner == "a" and zero.ratio is None
    assert res.verdicts([]) == []


# --- depths and options ---------------------------------------------------------------------


def test_capped_depths() -> None:
    assert res.capped_depths([0, 4096, 16384], 32768, 128, 41) == [41, 4096, 16384]
    assert res.capped_depths([0, 4096, 16384], 4096, 128, 1) == [1, 3967]  # both capped: one
    assert res.capped_depths([256, 64, 64], 1024, 16, 1) == [64, 256]
    with pytest.raises(BadValueError, match="no room"):
        res.capped_depths([0], 64, 64, 1)
    with pytest.raises(BadValueError, match="at least 1"):
        res.capped_depths([0], 1024, 0, 1)
    with pytest.raises(BadValueError, match="depths"):
        res.capped_depths([-1], 1024, 16, 1)


def test_parse_depths_and_configs() -> None:
    assert br.parse_depths("0, 4096,16k,1_000") == [0, 4096, 16384, 1000]
    with pytest.raises(BadValueError, match="not a depth"):
        br.parse_depths("0,deep")
    assert br.parse_configs("fit,plan,fit") == ["fit", "plan"]
    with pytest.raises(BadValueError, match="unknown configuration gpu"):
        br.parse_configs("plan,gpu")
    with pytest.raises(BadValueError):
        br.parse_configs(" , ")


# --- what --fit chose (lines of llama.cpp build 11434 at -lv 4) -------------------------------

FIT_FITTED = """\
common_params_fit_impl: projected to use 35 MiB of device memory vs. 24105 MiB of free device memory
common_params_fit_impl: cannot meet free memory target of 24085 MiB, need to reduce device memory by 14 MiB
common_params_fit_impl: context size set by user to 1024 -> no change
common_params_fit_impl:   - RPC0 (127.0.0.1:47211):  9 layers,     14 MiB used,  24091 MiB free
common_params_fit_impl: converting dense-only layers to full layers and filling them front-to-back with overflow to next device/system memory:
common_params_fit_impl: set ngl_per_device[0].(n_layer, n_part, overflow_type)=(9, 6, ATTN), id_dense_start=0
common_params_fit_impl:   - RPC0 (127.0.0.1:47211):  9 layers ( 6 overflowing),     20 MiB used,  24085 MiB free
common_fit_params: successfully fit params to free device memory
common_fit_params: fitting params to free memory took 0.12 seconds
load_tensors: offloading output layer to GPU
load_tensors: offloaded 9/9 layers to GPU
"""  # noqa: E501
FIT_UNCHANGED = """\
common_params_fit_impl: projected to use 35 MiB of device memory vs. 24105 MiB of free device memory
common_params_fit_impl: will leave 24070 >= 1000 MiB of free device memory, no changes needed
common_fit_params: successfully fit params to free device memory
load_tensors: offloaded 9/9 layers to GPU
"""
FIT_FAILED = """\
common_fit_params: failed to fit params to free device memory: n_gpu_layers already set by user to 99, abort
load_tensors: offloaded 9/9 layers to GPU
"""  # noqa: E501


def test_parse_fit_log_fitted() -> None:
    fit = log.parse_fit_log(FIT_FITTED, target_mib=24085)
    assert fit.status == "fitted" and fit.offloaded == "9/9" and fit.target_mib == 24085
    assert fit.devices == [
        FitDevice(
            device="RPC0 (127.0.0.1:47211)", layers=9, overflowing=6, used_mib=20, free_mib=24085
        )
    ]
    assert describe_fit(fit) == "fitted: RPC0 9 layers (6 with CPU experts)"


def test_parse_fit_log_unchanged_failed_unknown() -> None:
    unchanged = log.parse_fit_log(FIT_UNCHANGED)
    assert (unchanged.status, unchanged.devices, unchanged.target_mib) == ("unchanged", [], None)
    failed = log.parse_fit_log(FIT_FAILED)
    assert failed.status == "failed"
    assert failed.message == "n_gpu_layers already set by user to 99, abort"
    unknown = log.parse_fit_log("load_tensors: offloaded 3/9 layers to GPU\n")
    assert (unknown.status, unknown.offloaded) == ("unknown", "3/9")
    assert describe_fit(unknown) == "unknown: 3/9 layers offloaded"
    assert describe_fit(failed) == "failed: n_gpu_layers already set by user to 99, abort"


# --- the configurations on a tiny model -------------------------------------------------------


@pytest.fixture(scope="module")
def qwen(model_factory: ModelFactory) -> Path:
    return model_factory("qwen3moe", n_layers=8)


def _setup(model: Path, budget_mib: float) -> tuple[LaunchSpec, DeviceSetup]:
    settings = Settings(
        n_ctx=1024, type_k="q8_0", type_v="q8_0", gpu_overhead_bytes=0, device_kind="rpc"
    )
    spec = LaunchSpec(Path("llama-server"), str(model), settings, ("--rpc", "h:1"), threads=2)
    device = Device(
        name="RPC0", description="h:1", total_bytes=24 * 1024 * MIB, free_bytes=24 * 1024 * MIB
    )
    info = ServerInfo(
        path=Path("llama-server"),
        version=None,
        build_number=None,
        commit=None,
        compiler=None,
        target=None,
        devices=(device,),
    )
    spec_device = DeviceSpec(
        name="RPC0",
        buft="RPC0[h:1]",
        kind="rpc",
        overhead_bytes=0,
        total_bytes=device.total_bytes,
        free_bytes=device.free_bytes,
    )
    setup = DeviceSetup(
        info=info,
        devices=(spec_device,),
        listed=(device,),
        probes=(LogProbe("RPC0", "RPC0[h:1]"),),
        budgets=(round(budget_mib * MIB),),
        fit_targets_mib=(100,),
    )
    return spec, setup


def test_configurations_for_a_tight_budget(qwen: Path) -> None:
    facts = load_model_facts(qwen)
    specs = {s.name: s for s in br.build_configs(facts, *_setup(qwen, 30), CONFIG_NAMES)}
    plan, fit, cmoe, layers, gpu = (specs[n] for n in CONFIG_NAMES)
    assert plan.skip is None and "--n-cpu-moe" in plan.args and "--fit" in plan.args
    assert plan.predicted_bytes is not None and plan.predicted_bytes <= 30 * MIB
    assert plan.args[-2:] == ("--rpc", "h:1")  # pass-through flags last
    assert "--fit-target" in fit.args and fit.args[fit.args.index("--fit") + 1] == "on"
    assert not {"-ngl", "--n-cpu-moe", "-cmoe", "-ot"} & set(fit.args)
    assert "-cmoe" in cmoe.args and cmoe.description == "-cmoe"
    assert layers.description.startswith("-ngl ") and "-ngl 99" not in layers.description
    assert layers.predicted_bytes is not None and layers.predicted_bytes <= 30 * MIB
    assert gpu.skip is not None and gpu.skip.startswith("does not fit")


def test_configurations_when_everything_fits(qwen: Path) -> None:
    facts = load_model_facts(qwen)
    specs = br.build_configs(facts, *_setup(qwen, 1000), ["plan", "layers", "gpu-only", "plan"])
    assert [s.name for s in specs] == ["plan", "layers", "gpu-only", "plan"]
    assert specs[0].description == "--n-cpu-moe 0" and specs[0].skip is None
    assert specs[1].skip == "same command as plan" and specs[1].description == "-ngl 99"
    assert specs[2].skip == "same command as plan"


def test_configurations_that_cannot_fit(qwen: Path) -> None:
    facts = load_model_facts(qwen)
    specs = {s.name: s for s in br.build_configs(facts, *_setup(qwen, 1), CONFIG_NAMES)}
    assert specs["plan"].skip and "does not fit" in specs["plan"].skip
    assert specs["layers"].description == "-ngl 1"  # the output layer alone fits
    assert specs["gpu-only"].skip
    assert specs["fit"].skip is None and specs["cpu-moe"].skip is None  # llama.cpp decides


def test_a_server_that_fails_is_recorded(tmp_path: Path) -> None:
    """A "llama-server" that exits at once: the configuration is failed, the bench goes on."""
    spec = br.ConfigSpec("plan", "--n-cpu-moe 1", ("-m", "x.gguf"), 10)
    events: list[str] = []
    settings = Settings(n_ctx=1024)
    spec_false = LaunchSpec(Path("/bin/false"), "x.gguf", settings, log_dir=tmp_path)
    launcher = br.Launcher(spec_false, (), BenchRequests(), Prompts("chat"), events.append)
    run, results = br.run_config(spec, launcher)
    assert (run.status, results) == ("failed", [])
    assert run.message == "llama-server exited with 1"
    assert run.log_path is not None and Path(run.log_path).parent == tmp_path
    skipped, none = br.run_config(br.ConfigSpec("gpu-only", "-ngl 99", skip="too big"), launcher)
    assert (skipped.status, skipped.message, none) == ("skipped", "too big", [])


def test_a_device_without_a_figure_says_why(tmp_path: Path) -> None:
    """A configuration that ran but left a device unmeasured (--fit placing nothing there, a
    driver listing nothing) names the device and the probe's reason, in the table's notes."""
    spec = LaunchSpec(Path("/bin/false"), "x.gguf", Settings(n_ctx=1024), log_dir=tmp_path)
    probes = (FakeMemoryProbe(lambda s: 5), LogProbe("RPC1", "RPC0[127.0.0.1:2]"))
    launcher = br.Launcher(
        spec, probes, BenchRequests(), Prompts("chat"), print, device_names=("RPC0", "RPC1")
    )
    assert br._unmeasured(launcher, [5, 7]) is None
    note = br._unmeasured(launcher, [5, None])
    assert note == (
        "RPC1: no memory figure: llama-server's log has no buffer on RPC0[127.0.0.1:2] "
        "(nothing was placed there)"
    )
    ran = bench_result().configs[0].model_copy(update={"name": "fit", "memory_note": note})
    text = _text(rb.render_bench(bench_result(configs=[ran])))
    assert "fit: RPC1: no memory figure: llama-server's log has no buffer on" in text


# --- saved results and rendering --------------------------------------------------------------


def _text(renderable: object, width: int = 160) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_render_table_verdict_and_chart() -> None:
    text = _text(rb.render_report(bench_result()))
    assert "budget 30.00 MiB" in text and "on RPC0[127.0.0.1:5]" in text
    assert "41.0 (40.0-42.0)" in text  # median (min-max)
    assert "0.51x" in text  # cpu-moe's decode against the best at depth 64
    assert "does not fit" in text and "skipped" in text
    assert "depth 64, decode: plan is fastest, 1.95x cpu-moe" in text
    assert "depth 256, decode: noisy, no winner: plan 30.5 (30.0-31.0, spread 3.3 %)" in text
    assert "overlaps cpu-moe 29.8 (29.0-30.5, spread 5.0 %)" in text
    assert "2 repeats" in text and "not settled" not in text
    assert "the chat template alone" in text and "buffers only" in text


def test_the_decode_chart_at_80_columns() -> None:
    """Decode tok/s against depth, a series per configuration: plan's 41 tok/s at depth 64
    top left, cpu-moe's 21 bottom left; at depth 256 both near 30 tok/s share one ``+``."""
    chart = _text(rb.render_chart(bench_result()), width=WIDTH)
    lines = chart.splitlines()
    assert all(len(line.rstrip()) <= WIDTH for line in lines), chart
    assert "decode tok/s (median) against depth" in chart
    assert "depth (prompt tokens)" in chart and " tok/s" in chart
    assert "oo plan" in chart and "xx cpu-moe" in chart and "++ two or more" in chart
    (rows,) = panels(lines)
    shown = places(rows, "ox+")
    assert shown[(0, 0)] == "o" and shown[(len(rows) - 1, 0)] == "x"
    assert sorted(shown.values()) == ["+", "o", "x"]


def test_format_stat() -> None:
    assert rb.format_stat(res.Stat(median=41.04, min=40.0, max=42.0)) == "41.0 (40.0-42.0)"
    assert rb.format_stat(res.Stat(median=0.02, min=0.02, max=0.02)) == "0.02"
    assert rb.format_stat(res.Stat(median=1234.4, min=1200.0, max=1300.0)) == "1234 (1200-1300)"
    assert rb.format_stat(None) == "-"
    ttft = res.Stat(median=0.0258, min=0.0257, max=0.0301)
    assert rb.format_stat(ttft, rb._secs) == "0.026 (0.026-0.030)"
    assert rb._secs(12.34) == "12.3"


def test_result_round_trip_and_default_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(paths.ENV_HOME, str(tmp_path / "home"))
    result = bench_result()
    path = saved.default_result_path(result)
    assert path == tmp_path / "home" / "bench" / "20250102T030405-q.json"
    saved.write_result(path, to_json(payloads.bench_payload(result)))
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["kind"] == "moetune.bench"
    first = data["results"][0]
    assert {"config", "depth", "ttft_s", "prefill_tps", "decode_tps", "samples"} <= set(first)
    assert len(first["samples"]) == 2
    assert saved.load_result(path, SCHEMA_VERSION) == result
    monkeypatch.delenv(paths.ENV_HOME)
    assert paths.bench_dir().parts[-2:] == ("moetune", "bench")


def test_load_result_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="cannot read"):
        saved.load_result(tmp_path / "missing.json", SCHEMA_VERSION)
    bad = tmp_path / "bad.json"
    for text, message in (
        ("{", "not JSON"),
        ('{"kind": "plan"}', "not a moetune bench"),
        ('{"kind": "moetune.bench", "schema_version": 99}', "schema version 99"),
        ('{"kind": "moetune.bench", "schema_version": 1}', "not a valid"),
    ):
        bad.write_text(text)
        with pytest.raises(BadValueError, match=message):
            saved.load_result(bad, SCHEMA_VERSION)


def test_merge_results_renames_clashes() -> None:
    one = bench_result()
    other = bench_result(results=[row("plan", 64, [80.0, 81.0])])
    merged = res.merge_results([one, other], ["a", "b"])
    names = [c.name for c in merged.configs]
    assert names == ["plan@a", "cpu-moe@a", "gpu-only@a", "plan@b", "cpu-moe@b", "gpu-only@b"]
    assert {r.config for r in merged.results} == {"plan@a", "cpu-moe@a", "plan@b"}
    assert merged.verdicts[0].winner == "plan@b"
    assert res.merge_results([one], ["a"]) is one


def test_dense_model_has_no_expert_configurations(tmp_path: Path) -> None:
    dense = write_model(tmp_path / "dense.gguf", "qwen3")
    specs = {
        s.name: s
        for s in br.build_configs(load_model_facts(dense), *_setup(dense, 1000), CONFIG_NAMES)
    }
    assert specs["plan"].skip == specs["cpu-moe"].skip == "a dense model has no experts"
    assert specs["layers"].skip is None and specs["gpu-only"].skip == "same command as layers"


# --- repeating until the last requests agree --------------------------------------------------


class _Asker:
    """Hands out the samples of ``decodes`` in turn, one clock tick (``tick_s``) each."""

    def __init__(self, decodes: list[float], tick_s: float = 1.0) -> None:
        self.decodes = list(decodes)
        self.now = 0.0
        self.tick_s = tick_s
        self.asked: list[tuple[int, int]] = []

    def ask(self) -> res.Sample:
        self.now += self.tick_s
        return sample(self.decodes.pop(0))

    def clock(self) -> float:
        return self.now


def _repeated(asker: _Asker, repeats: Repeats) -> tuple[list[float], bool]:
    samples, settled = repeated(
        asker.ask,
        repeats,
        on_request=lambda n, most: asker.asked.append((n, most)),
        clock=asker.clock,
    )
    return [s.decode_tps for s in samples], settled


def test_repeated_until_they_agree() -> None:
    asker = _Asker([40.0, 44.0, 42.0, 99.0])
    decodes, settled = _repeated(asker, Repeats(3, 10, 0.10, 60.0))
    assert (decodes, settled) == ([40.0, 44.0, 42.0], True)  # 4/42: 9.5 %
    assert asker.asked == [(1, 10), (2, 10), (3, 10)]  # the live status: n of at most 10
    wide, settled = _repeated(
        _Asker([40.0, 46.0, 42.0, 43.0, 44.0, 45.0, 41.0] * 2), Repeats(3, 10, 0.10, 60.0)
    )
    assert len(wide) == 10 and not settled  # once 40 and 46 are in, they never agree


def test_repeated_stops_at_the_most_or_the_time_limit() -> None:
    noisy = [40.0, 20.0] * 10
    decodes, settled = _repeated(_Asker(noisy), Repeats(3, 6, 0.10, 60.0))
    assert len(decodes) == 6 and not settled
    timed, settled = _repeated(_Asker(noisy, tick_s=25.0), Repeats(2, 10, 0.10, 60.0))
    assert len(timed) == 3 and not settled  # 75 s after the start: no fourth
    least, settled = _repeated(_Asker(noisy, tick_s=100.0), Repeats(3, 10, 0.10, 60.0))
    assert len(least) == 3 and not settled  # the time limit never cuts below --repeats
    once, settled = _repeated(_Asker([5.0, 50.0]), Repeats(1, 1, 0.0, 60.0))
    assert (once, settled) == ([5.0], True)  # one request agrees with itself


def test_repeats_that_cannot_be_kept_are_refused() -> None:
    with pytest.raises(BadValueError, match="--repeats must be at least 1"):
        Repeats(0, 10, 0.1, 60.0).check()
    with pytest.raises(BadValueError, match=r"--max-repeats \(2\) must be at least --repeats"):
        Repeats(3, 2, 0.1, 60.0).check()
    assert Repeats(3, 3, 0.0, 1.0).check() == Repeats(3, 3, 0.0, 1.0)
    assert Repeats.asked(3, None, 0.1, 60.0).most == 10  # the default
    assert Repeats.asked(50, None, 0.1, 60.0).most == 50  # raised to --repeats
    with pytest.raises(BadValueError):
        Repeats.asked(50, 10, 0.1, 60.0)  # an explicit --max-repeats below it: refused


def test_render_says_how_it_repeated_and_what_never_settled() -> None:
    cold = res.summarize(
        "cpu-moe", 64, [sample(d) for d in (10.0, 30.0, 20.0)], None, settled=False
    )
    rows = [row("plan", 64, [40.0, 41.0, 40.5]), cold]
    result = bench_result(
        results=rows,
        verdicts=res.verdicts(rows),
        depths=[64],
        repeats=3,
        max_repeats=3,
        max_spread=0.10,
        max_time_s=60.0,
    )
    text = _text(rb.render_bench(result), width=200)
    assert "3 repeats" in text  # the least is the most: no range of counts
    assert "cpu-moe at depth 64: not settled after 3 requests (not within 10.0 %)" in text
    assert "decode spread 100.0 %, prefill 0.0 %" in text
    wider = result.model_copy(update={"max_repeats": 10})
    assert "3-10 repeats until within 10.0 %" in _text(rb.render_bench(wider), 200)
