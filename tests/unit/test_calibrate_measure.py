"""`calibrate --measure` without llama.cpp: the placements chosen, llama-bench's argv, the
child run to the end or stopped, a measure made again replacing its points."""

from __future__ import annotations

import dataclasses
import stat
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts
from moetune.core.memory import Settings, estimate
from moetune.core.placement import Placement
from moetune.core.planner import DeviceBudgets, plan_n_cpu_moe
from moetune.errors import (
    BadValueError,
    DoesNotFitError,
    ExitCode,
    OutOfMemoryError,
    ServerFailedError,
    ServerNotFoundError,
)
from moetune.jobs.calibrate import (
    BenchKnobs,
    BenchRun,
    bench_argv,
    choose_runs,
    further_placement,
    measure_key,
    measure_ubatches,
)
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.process import find_tool, run_tool
from moetune.records.speed import SpeedPoint
from moetune.store.speed import SpeedStore
from moetune.units import GIB, MIB

from support.factory import write_model
from support.helpers import EXAMPLE_QWEN, cli

SETTINGS = Settings(n_ctx=32768, type_k="q8_0", type_v="q8_0", gpu_overhead_bytes=0)


@pytest.fixture(scope="module")
def qwen() -> ModelFacts:
    return load_model_facts(EXAMPLE_QWEN)  # 48 layers, 128 experts


def test_ubatches_are_at_most_the_prompt() -> None:
    assert measure_ubatches(2048) == (512, 2048)
    assert measure_ubatches(512) == (512,)  # -ub 2048 on 512 tokens is the same one ubatch
    assert measure_ubatches(64, (32, 64, 128)) == (32, 64)
    with pytest.raises(BadValueError):
        measure_ubatches(0)


def test_the_further_placement(qwen: ModelFacts) -> None:
    """Every block's experts on the CPU; where the RAM available cannot hold that CPU side,
    the largest N it holds (experts read from disk would measure the disk); none past N."""
    budgets = DeviceBudgets.one(16 * GIB, SETTINGS)

    def further(n: int, ram: int | None) -> int | None:
        plan = further_placement(qwen, budgets, SETTINGS, n, ram_bytes=ram)
        return None if plan is None else plan.placement.n_cpu_moe

    assert further(10, None) == 48
    assert further(47, None) == 48
    assert further(48, None) is None
    host = [estimate(qwen, Placement.with_n_cpu_moe(n), SETTINGS).host_bytes for n in (30, 31, 48)]
    assert further(10, host[2]) == 48  # the RAM holds every expert
    # between N = 30's CPU side and N = 31's: N = 30
    assert further(10, (host[0] + host[1]) // 2) == 30
    assert further(30, (host[0] + host[1]) // 2) is None  # no further N held


def test_runs_at_each_ubatch(qwen: ModelFacts) -> None:
    """At 16 GiB neither ubatch fits every expert: the plan's smallest N at each, and every
    expert on the CPU (N = 48); the larger ubatch's compute buffer moves at least as many
    experts to the CPU."""
    budgets = DeviceBudgets.one(16 * GIB, SETTINGS)
    runs = choose_runs(qwen, budgets, SETTINGS, (512, 2048))
    smallest = {
        ub: plan_n_cpu_moe(qwen, budgets, replace(SETTINGS, n_ubatch=ub)).placement.n_cpu_moe or 0
        for ub in (512, 2048)
    }
    assert [(r.n_ubatch, r.n_cpu_moe) for r in runs] == [
        (512, smallest[512]),
        (512, 48),
        (2048, smallest[2048]),
        (2048, 48),
    ]
    assert 0 < smallest[512] <= smallest[2048] <= 36


def test_where_every_expert_is_on_the_cpu_already(qwen: ModelFacts) -> None:
    """A budget that fits the model only at N = 48: one placement at each ubatch."""
    floor = estimate(qwen, Placement.all_experts_on_cpu(), SETTINGS).gpu_bytes
    budgets = DeviceBudgets.one(floor + 64 * MIB, SETTINGS)
    runs = choose_runs(qwen, budgets, SETTINGS, (512,))
    assert [(r.n_ubatch, r.n_cpu_moe) for r in runs] == [(512, 48)]


def test_a_ubatch_that_does_not_fit_is_left_out(qwen: ModelFacts) -> None:
    """A budget between the floors of -ub 512 and -ub 4096: only 512 is measured; a budget
    below both: the planner's error."""
    low, high = (
        estimate(qwen, Placement.all_experts_on_cpu(), replace(SETTINGS, n_ubatch=ub)).gpu_bytes
        for ub in (512, 4096)
    )
    assert low < high
    budgets = DeviceBudgets.one((low + high) // 2, SETTINGS)
    runs = choose_runs(qwen, budgets, SETTINGS, (512, 4096))
    assert {r.n_ubatch for r in runs} == {512}
    with pytest.raises(DoesNotFitError):
        choose_runs(qwen, DeviceBudgets.one(low // 2, SETTINGS), SETTINGS, (512, 4096))


def test_a_dense_model_is_refused(tmp_path: Path) -> None:
    dense = load_model_facts(write_model(tmp_path / "dense.gguf", "qwen3"))
    with pytest.raises(BadValueError, match="a dense model has none"):
        choose_runs(dense, DeviceBudgets.one(GIB, SETTINGS), SETTINGS, (512,))


def test_two_devices_split_as_the_plan(qwen: ModelFacts) -> None:
    """On two devices each placement carries the plan's -ts counts (llama-bench: a/b)."""
    devices = tuple(
        DeviceSpec(name=f"CUDA{i}", buft=f"CUDA{i}", overhead_bytes=0, total_bytes=12 * GIB)
        for i in range(2)
    )
    budgets = DeviceBudgets(devices, (10 * GIB, 10 * GIB))
    runs = choose_runs(qwen, budgets, SETTINGS, (512,))
    assert len(runs) == 2 and all(len(r.placement.tensor_split) == 2 for r in runs)
    split = runs[0].placement.tensor_split
    argv = bench_argv(Path("/bin/llama-bench"), "m.gguf", runs[0], knobs())
    assert argv[argv.index("-ts") + 1] == f"{int(split[0])}/{int(split[1])}"


def knobs(**change: object) -> BenchKnobs:
    base = BenchKnobs(n_prompt=2048, n_gen=64, repetitions=2, threads=8, settings=SETTINGS, rpc=())
    return dataclasses.replace(base, **change)  # type: ignore[arg-type]


def test_the_argv() -> None:
    """One -o jsonl run of pp and tg, the placement and settings moetune's commands use."""
    run = BenchRun(Placement.with_n_cpu_moe(20), 2048)
    argv = bench_argv(Path("/opt/llama/llama-bench"), "/m/q.gguf", run, knobs())
    assert argv == [
        "/opt/llama/llama-bench",
        "-m",
        "/m/q.gguf",
        "-o",
        "jsonl",
        "-p",
        "2048",
        "-n",
        "64",
        "-r",
        "2",
        "-ngl",
        "99",
        "-fa",
        "on",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-ub",
        "2048",
        "-b",
        "2048",
        "--n-cpu-moe",
        "20",
        "-t",
        "8",
    ]
    rpc = bench_argv(
        Path("llama-bench"),
        "q.gguf",
        BenchRun(Placement.with_n_cpu_moe(0), 4096),
        knobs(rpc=("127.0.0.1:50052", "10.0.0.2:50052"), threads=None),
    )
    assert rpc[rpc.index("-b") + 1] == "4096"  # the batch holds the ubatch
    assert rpc[rpc.index("--n-cpu-moe") + 1] == "0" and "-t" not in rpc
    assert rpc[-2:] == ["-rpc", "127.0.0.1:50052,10.0.0.2:50052"]


def test_the_measure_key() -> None:
    """The same runs on the same devices: the same key, whatever the tool's path."""
    one = [["/a/llama-bench", "-m", "q.gguf", "-ub", "512"]]
    assert measure_key(one, ["RPC0"]) == measure_key([["/b/llama-bench", *one[0][1:]]], ["RPC0"])
    assert measure_key(one, ["RPC0"]) != measure_key(one, ["CUDA0"])
    assert measure_key(one, ["RPC0"]) != measure_key([[*one[0][:-1], "2048"]], ["RPC0"])


def _point(tps: float) -> SpeedPoint:
    from moetune.records.speed import SpeedMachine, SpeedModel, SpeedPlacement, SpeedSource

    return SpeedPoint(
        kind="generation",
        model=SpeedModel(file_name="q.gguf"),
        placement=SpeedPlacement(n_cpu_moe=2),
        n_ubatch=512,
        n_batch=2048,
        n_threads=2,
        n_prompt=0,
        n_gen=4,
        tps=tps,
        machine=SpeedMachine(),
        source=SpeedSource(tool="llama-bench"),
    )


def test_a_measure_made_again_replaces_its_points(tmp_path: Path) -> None:
    store = SpeedStore(tmp_path)
    other, _ = store.save([_point(1.0)], "llama-bench-other")
    first, _ = store.save([_point(2.0)], "measure-abc-q-1", replacing="measure-abc-")
    second, known = store.save([_point(3.0)], "measure-abc-q-2", replacing="measure-abc-")
    assert not known and second != first and not first.exists()
    assert other.exists()  # another source's points stay
    assert sorted(p.tps for p in store.points(lambda text: None)) == [1.0, 3.0]


# --- the child ----------------------------------------------------------------------------


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_llama_bench_is_found_beside_llama_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    server = _script(tmp_path / "llama-server", "")
    with pytest.raises(ServerNotFoundError, match="llama-bench not found beside"):
        find_tool(server, "llama-bench")
    bench = _script(tmp_path / "llama-bench", "")
    assert find_tool(server, "llama-bench") == bench


def test_the_run_writes_its_stdout(tmp_path: Path) -> None:
    tool = _script(
        tmp_path / "llama-bench", "import sys\nprint('{\"a\": 1}')\nprint('log', file=sys.stderr)"
    )
    log = run_tool([str(tool)], tmp_path / "out.jsonl", timeout_s=30)
    assert (tmp_path / "out.jsonl").read_text() == '{"a": 1}\n'
    assert "log" in log.read_text()


def test_out_of_memory_is_one_line(tmp_path: Path) -> None:
    body = (
        "import sys\n"
        "print('ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: "
        "cudaMalloc failed: out of memory', file=sys.stderr)\nsys.exit(1)"
    )
    tool = _script(tmp_path / "llama-bench", body)
    with pytest.raises(OutOfMemoryError, match=r"llama-bench ran out of memory: .*cudaMalloc"):
        run_tool([str(tool)], tmp_path / "out.jsonl", timeout_s=30)


def test_a_failure_names_the_last_words(tmp_path: Path) -> None:
    body = "import sys\nprint('error: unknown argument: -zz', file=sys.stderr)\nsys.exit(1)"
    tool = _script(tmp_path / "llama-bench", body)
    with pytest.raises(ServerFailedError, match="llama-bench exited with 1") as caught:
        run_tool([str(tool), "-zz"], tmp_path / "out.jsonl", timeout_s=30)
    assert "unknown argument" in caught.value.message and "full log" in (caught.value.hint or "")


def test_a_timeout_stops_the_group(tmp_path: Path) -> None:
    """Past the timeout, the tool and the child it started are gone."""
    body = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        "print(child.pid, flush=True)\ntime.sleep(300)"
    )
    tool = _script(tmp_path / "llama-bench", body)
    with pytest.raises(ServerFailedError, match="did not finish in 1 s"):
        run_tool([str(tool)], tmp_path / "out.jsonl", timeout_s=1)
    child = int((tmp_path / "out.jsonl").read_text())
    # the group was signalled; a loaded machine may take a moment to schedule the child's end
    try:
        psutil.Process(child).wait(timeout=10)  # not our child: polled until it is gone
    except psutil.NoSuchProcess:
        pass  # gone already
    except psutil.TimeoutExpired:  # dead, but nobody reaps it (no init in a container)
        assert psutil.Process(child).status() == "zombie", "the tool's child outlived it"


def test_calibrate_needs_files_or_measure(tmp_path: Path) -> None:
    code, _out, err = cli("calibrate")
    assert code == ExitCode.BAD_VALUE and "or --measure MODEL" in err
    (tmp_path / "x.jsonl").write_text("")
    code, _out, err = cli("calibrate", str(tmp_path / "x.jsonl"), "--measure", "m.gguf")
    assert code == ExitCode.BAD_VALUE and "leave out FILE" in err
    code, _out, err = cli("calibrate", "--measure", "m.gguf", "--ubatch", "512,x")
    assert code == ExitCode.BAD_VALUE and "--ubatch:" in err


# --- bench --ubatch / --threads -------------------------------------------------------------


def test_bench_variants_are_named_by_what_varies() -> None:
    from moetune.jobs.bench import Variant, variants

    assert variants() == [Variant()]
    assert variants([2048]) == [Variant(2048, None, "")]  # one size: the name stays
    assert [v.suffix for v in variants([512, 2048], [4, 8])] == [
        "-ub512-t4",
        "-ub512-t8",
        "-ub2048-t4",
        "-ub2048-t8",
    ]


def test_a_variant_of_the_launch_spec() -> None:
    """-ub (and -b where the batch must grow) after the other flags, the settings the planner
    sees at that size, the thread count."""
    from moetune.jobs.bench import Variant
    from moetune.jobs.launch import LaunchSpec

    spec = LaunchSpec(Path("llama-server"), "q.gguf", SETTINGS, ("--rpc", "h:1"), threads=16)
    big = Variant(4096, 8).of(spec)
    assert big.pass_through == ("--rpc", "h:1", "-ub", "4096", "-b", "4096")
    assert (big.settings.n_ubatch, big.settings.n_batch, big.threads) == (4096, 4096, 8)
    args = big.args(Placement.with_n_cpu_moe(3))
    assert args[args.index("-ub") + 1] == "4096" and args[args.index("-t") + 1] == "8"
    small = Variant(1024).of(spec)
    assert small.pass_through[-2:] == ("-ub", "1024") and small.threads == 16
    assert Variant().of(spec) == spec


def test_bench_refuses_ubatch_beside_ub() -> None:
    from support.helpers import moetune

    done = moetune("bench", "m.gguf", "--ubatch", "512,2048", "--", "-ub", "1024")
    assert done.returncode == ExitCode.BAD_VALUE
    assert "give --ubatch or -ub after --, not both" in done.stderr
    done = moetune("bench", "m.gguf", "--threads", "4,x")
    assert done.returncode == ExitCode.BAD_VALUE and "--threads:" in done.stderr
