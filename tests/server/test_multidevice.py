"""Several devices: two and three ggml-rpc-servers on loopback are RPC0, RPC1, RPC2.

The memory model is held to llama.cpp's own figures for each device (llama-server's buffer
lines, printed to 0.01 MiB, and llama-fit-params's dry run, in whole MiB); plans are checked
by llama-fit-params on the rig; run converges with every device within its own target.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import psutil
import pytest

from moetune.core.devices import DeviceSpec, rpc_buft
from moetune.core.memory import MemoryEstimate, Settings, estimate
from moetune.core.placement import EXPS_REGEX, Override, Placement, split_weights
from moetune.core.plan import PlanRequest, make_plan
from moetune.errors import ExitCode
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_buffers, parse_projection, real_load_lines
from moetune.units import MIB

from support.factory import ModelFactory, loadable_copy, write_model
from support.fitrig import dry_run_settings, fit_choice, placement_of, project
from support.helpers import EXAMPLE_QWEN, cli, moetune
from support.llama import bin_path, free_port, rpc_server, running_server

CTX = 1024


@pytest.fixture(scope="module")
def trio() -> Iterator[list[str]]:
    """Three ggml-rpc-servers; the first two make the two-device rig."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(rpc_server()) for _ in range(3)]


def devices(endpoints: list[str]) -> tuple[DeviceSpec, ...]:
    return tuple(
        DeviceSpec(name=f"RPC{i}", buft=rpc_buft(ep), kind="rpc", overhead_bytes=0, description=ep)
        for i, ep in enumerate(endpoints)
    )


@dataclass(frozen=True)
class Case:
    """A placement over ``n`` devices: ``-ts``, and --n-cpu-moe or -ot rules."""

    n: int
    split: tuple[int, ...]
    n_cpu_moe: int = 0
    to_device: int | None = None  # the experts of block 1 on this device (-ot)

    def placement(self) -> Placement:
        ts = tuple(float(v) for v in self.split)
        if self.to_device is not None:
            rule = Override(rf"blk\.1{EXPS_REGEX}", self.to_device)
            return Placement(overrides=(rule,), tensor_split=ts)
        if self.n_cpu_moe:
            return Placement.with_n_cpu_moe(self.n_cpu_moe, tensor_split=ts)
        return Placement(tensor_split=ts)

    def args(self, endpoints: list[str]) -> list[str]:
        eps = endpoints[: self.n]
        args = [
            "--rpc",
            ",".join(eps),
            "-ngl",
            "99",
            "-ts",
            ",".join(map(str, self.split)),
            "-c",
            str(CTX),
            "-fa",
            "on",
            "-ctk",
            "q8_0",
            "-ctv",
            "q8_0",
        ]
        if self.to_device is not None:
            args += ["-ot", rf"blk\.1{EXPS_REGEX}={rpc_buft(eps[self.to_device])}"]
        elif self.n_cpu_moe:
            args += ["--n-cpu-moe", str(self.n_cpu_moe)]
        return args


CASES = [
    Case(2, (2, 3)),  # every layer on the devices, no overrides: pipeline parallelism
    Case(2, (1, 1), n_cpu_moe=2),
    Case(2, (3, 2), to_device=1),  # block 1 on RPC0, its experts on RPC1
    Case(3, (3, 3, 3)),
    Case(3, (4, 3, 2), n_cpu_moe=3),
    Case(3, (2, 4, 3), to_device=2),
]
ARCHS = ["qwen3moe", "gpt-oss", "deepseek2", "glm4moe", "qwen35moe"]


def _predict(model: Path, case: Case, endpoints: list[str], dry_run: bool) -> MemoryEstimate:
    settings = Settings(
        n_ctx=CTX,
        type_k="q8_0",
        type_v="q8_0",
        device_kind="rpc",
        gpu_overhead_bytes=0,
        n_seq=1 if dry_run else 4,
        all_outputs=dry_run,
    )
    return estimate(
        load_model_facts(model), case.placement(), settings, devices(endpoints[: case.n])
    )


def _printed(predicted_bytes: int, printed_mib: float) -> bool:
    return abs(predicted_bytes / MIB - printed_mib) <= 0.005 + 1e-9


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(
    "case",
    CASES,
    ids=lambda c: f"{c.n}dev-ts{'_'.join(map(str, c.split))}-N{c.n_cpu_moe}-to{c.to_device}",
)
def test_each_device_matches_llama_server(
    model_factory: ModelFactory, trio: list[str], arch: str, case: Case
) -> None:
    """Weights, KV (+ recurrent state) and compute of every device and the host's compute,
    against llama-server's own buffer lines (printed to 0.01 MiB)."""
    predicted = _predict(model_factory(arch, n_layers=8), case, trio, dry_run=False)
    with running_server(
        model_factory(arch, n_layers=8), *case.args(trio), "--fit", "off"
    ) as server:
        text = server.log_text()
    lines = parse_buffers("\n".join(real_load_lines(text)))
    assert ("pipeline parallelism enabled" in text) == (
        case.n_cpu_moe == 0 and case.to_device is None
    )
    for device, memory in zip(devices(trio[: case.n]), predicted.devices, strict=True):
        mine = [b for b in lines if b.device == device.buft]
        kv = sum(b.mib for b in mine if b.kind in ("KV", "RS"))
        assert _printed(memory.weights_bytes, sum(b.mib for b in mine if b.kind == "model"))
        assert abs(memory.kv_bytes / MIB - kv) <= max(0.01 * kv, 0.0101), device.name  # 2 lines
        assert _printed(memory.compute_bytes, sum(b.mib for b in mine if b.kind == "compute"))
    host = sum(b.mib for b in lines if b.kind == "compute" and b.device == "CPU")
    assert _printed(predicted.host_compute_bytes, host)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.n}dev-N{c.n_cpu_moe}-to{c.to_device}")
def test_each_device_matches_llama_fit_params(
    model_factory: ModelFactory, trio: list[str], case: Case
) -> None:
    """llama-fit-params's dry run (one sequence, logits for the whole batch), per device:
    weights within 1 MiB, KV within 1 %, compute within 10 % or 64 MiB; in fact to the MiB,
    but with pipeline parallelism, where the dry run's last device reserves 2 MiB more than
    the replay on these tiny models (llama-server's own buffers match it exactly)."""
    pipeline = case.n_cpu_moe == 0 and case.to_device is None
    for arch in ("qwen3moe", "qwen35moe"):
        predicted = _predict(model_factory(arch, n_layers=8), case, trio, dry_run=True)
        argv = [
            str(bin_path("llama-fit-params")),
            "-m",
            str(model_factory(arch, n_layers=8)),
            *case.args(trio),
            "-fitp",
            "on",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
        projected = parse_projection(done.stdout)
        for i, memory in enumerate(predicted.devices):
            row = projected[f"RPC{i}"]
            assert int(memory.weights_bytes / MIB) == row.model_mib
            assert abs(memory.kv_bytes / MIB - row.context_mib) < 1
            error = abs(memory.compute_bytes / MIB - row.compute_mib)
            assert error < (max(0.1 * row.compute_mib, 64) if pipeline else 1), (arch, i)


def _plan(model: Path, endpoints: list[str], budgets: str, ctx: int = CTX) -> dict[str, object]:
    code, out, err = cli(
        "plan",
        str(model),
        "--rpc",
        ",".join(endpoints),
        "--vram",
        budgets,
        "--headroom",
        "0",
        "--ram",
        "64G",
        "--ctx",
        str(ctx),
        "--json",
    )
    assert code == 0, out + err
    data: dict[str, object] = json.loads(out)
    return data


@pytest.mark.parametrize("n", [2, 3])
def test_planned_command_fits_by_llama_cpp(tmp_path: Path, trio: list[str], n: int) -> None:
    """A plan with per-device --vram on the rig: llama-fit-params projects its command within
    every device's budget, equal to the prediction (weights within 1 MiB), and the plan
    reports llama.cpp's projection beside its own for every device."""
    model = write_model(tmp_path / "q16.gguf", "qwen3moe", n_layers=16)
    endpoints = trio[:n]
    budgets = ",".join(["36M", "24M", "20M"][:n])
    data = _plan(model, endpoints, budgets)
    assert data["checked"] == "llama.cpp" and data["fits"] is True
    checks = data["plan"]["checks"]  # type: ignore[index]
    assert [c["device"] for c in checks] == [f"RPC{i}" for i in range(n)]
    assert all(c["agrees"] for c in checks)
    command = data["first"]["command"]  # type: ignore[index]  # what devices and checks are of
    assert isinstance(command, list) and "-ts" in command
    argv = [str(bin_path("llama-fit-params")), *command[1:], "-fitp", "on"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    projected = parse_projection(done.stdout)
    for device in data["devices"]:  # type: ignore[attr-defined]
        row = projected[device["name"]]
        assert row.total_mib * MIB <= device["budget_bytes"]
        assert abs(row.model_mib - device["weights_bytes"] / MIB) <= 1
    code, out, _ = cli(
        "plan",
        str(model),
        "--rpc",
        ",".join(endpoints),
        "--vram",
        budgets,
        "--headroom",
        "0",
        "--ram",
        "64G",
        "--ctx",
        str(CTX),
    )
    assert code == 0
    for i in range(n):
        assert f"llama.cpp projects RPC{i} " in out and "predicted" in out


def test_split_and_cross_device_experts(tmp_path: Path, trio: list[str]) -> None:
    """The -ot form fills the room a device has left with experts of blocks that live on
    another device (buffer types as llama.cpp spells them), and keeps more on the devices;
    llama.cpp's dry run of it agrees with the prediction on each device."""
    model = write_model(tmp_path / "q16.gguf", "qwen3moe", n_layers=16)
    data = _plan(model, trio[:2], "30M,20M", ctx=2048)
    rules = data["override_tensor"]
    bufts = [rpc_buft(endpoint) for endpoint in trio[:2]]
    assert isinstance(rules, list)
    assert any(rule.rsplit("=", 1)[1] in bufts for rule in rules)
    assert data["plan"]["override_gain_bytes"] > 0  # type: ignore[index]
    alt = data["override_command"]
    assert isinstance(alt, list) and alt.index("--rpc") < alt.index("-ot")  # --rpc first
    argv = [str(bin_path("llama-fit-params")), *alt[1:], "-fitp", "on"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    projected = parse_projection(done.stdout)
    predicted = data["plan"]["alternative"]["memory"]["devices"]  # type: ignore[index]
    for i, budget in enumerate(data["plan"]["device_budgets"]):  # type: ignore[index]
        row = projected[f"RPC{i}"]
        assert row.total_mib * MIB <= budget
        assert row.model_mib == int(predicted[i]["weights_bytes"] / MIB)


@pytest.mark.parametrize(
    ("budgets_mib", "n_ctx"),
    [((8192, 8192), 32768), ((4096, 3072), 8192), ((3072, 2560, 2048), 8192)],
    ids=["8G_8G", "4G_3G", "3G_2.5G_2G"],
)
def test_keeps_at_least_what_fit_keeps(
    tmp_path: Path, trio: list[str], budgets_mib: tuple[int, ...], n_ctx: int
) -> None:
    """On a real shape (the Qwen3-30B-A3B example, made loadable), moetune's first command keeps
    at least the expert bytes llama.cpp's --fit keeps for the same budgets (its margins of
    free memory), each device within its budget and with the predicted weights by
    llama.cpp's own dry run (to the MiB). 8G,8G is a case the -ot form was behind in."""
    model = loadable_copy(EXAMPLE_QWEN, tmp_path / "qwen.gguf")
    facts = load_model_facts(model)
    endpoints = trio[: len(budgets_mib)]
    specs = devices(endpoints)
    bufts = [d.buft for d in specs]
    fit = fit_choice(model, n_ctx, budgets_mib, endpoints)
    fit_experts = split_weights(facts, placement_of(fit, bufts), len(specs)).gpu_expert_bytes
    settings = dry_run_settings(n_ctx)
    request = PlanRequest(
        model_path=str(model),
        settings=settings,
        devices=specs,
        target_vram=tuple(b * MIB for b in budgets_mib),
        device_args=("--rpc", ",".join(endpoints)),
    )
    result = make_plan(facts, request)
    best = result.first  # the command printed first: what alias and export take
    projected = project(model, best.command[1:])
    for i, budget in enumerate(budgets_mib):
        row = projected[f"RPC{i}"]
        assert row.total_mib <= budget, (i, row)
        assert row.model_mib == int(best.memory.devices[i].weights_bytes / MIB), (i, row)
    ours = split_weights(facts, best.placement, len(specs)).gpu_expert_bytes
    assert ours >= fit_experts, (ours / MIB, fit_experts / MIB)


def test_unreachable_devices_make_a_prediction(tmp_path: Path) -> None:
    model = write_model(tmp_path / "q.gguf", "qwen3moe", n_layers=8)
    data = _plan(model, ["127.0.0.1:9", "127.0.0.1:10"], "30M,20M")
    assert str(data["checked"]).startswith("prediction")


def _llama_servers_for(model: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(model) in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
    return found


def test_run_on_two_devices(tmp_path: Path, trio: list[str]) -> None:
    """run converges with each device within its own target (measured), in at most 4
    launches (and one of the -ot form beside N), names the device that limited it, saves the
    device set, and leaves nothing."""
    model = write_model(tmp_path / "q16.gguf", "qwen3moe", n_layers=16)
    args = [
        "run",
        str(model),
        "--rpc",
        ",".join(trio[:2]),
        "--target-vram",
        "30M,20M",
        "--ctx",
        str(CTX),
        "--json",
    ]
    done = moetune(*args)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    best = data["best"]
    budgets = (30 * MIB, 20 * MIB)
    assert all(
        m is not None and m <= b for m, b in zip(best["device_measured"], budgets, strict=True)
    )
    # N in at most 4 launches, then one of the -ot form where it keeps more on the devices
    tried = [a for a in data["attempts"] if a["override_tensor"]]
    assert data["launches"] - len(tried) <= 4 and len(tried) <= 1
    over = [
        a
        for a in data["attempts"]
        if a["n_cpu_moe"] == best["n_cpu_moe"] - 1 and not a["override_tensor"]
    ]
    assert over and over[0]["status"] in ("over", "oom")  # one step tighter is over
    assert data["limiting_device"] in ("RPC0", "RPC1")
    assert "-ts" in best["command"] and "--rpc" in best["command"]
    assert not _llama_servers_for(model)
    profile = json.loads(Path(data["profile"]["path"]).read_text())
    assert [d["name"] for d in profile["devices"]] == trio[:2]
    again = moetune(*args)
    assert json.loads(again.stdout)["profile"]["reused"] is True, again.stderr
    swapped = ",".join(trio[1::-1])  # the same servers in the other order: another device set
    other = moetune(*[swapped if a == ",".join(trio[:2]) else a for a in args])
    assert json.loads(other.stdout)["profile"]["reused"] is False, other.stderr
    # the two device orders are two tuned profiles: alias picks one by its --rpc
    code, out, _ = cli("alias", "q", str(model), "--shell", "bash", "--rpc", ",".join(trio[:2]))
    assert code == 0 and "-ts" in out and "--rpc" in out


def test_bench_on_two_devices(tmp_path: Path, trio: list[str]) -> None:
    """Every configuration on several devices; --fit gets one margin per device."""
    model = write_model(tmp_path / "q16.gguf", "qwen3moe", n_layers=16)
    done = moetune(
        "bench",
        str(model),
        "--rpc",
        ",".join(trio[:2]),
        "--target-vram",
        "30M,20M",
        "--ctx",
        str(CTX),
        "--depths",
        "0",
        "--repeats",
        "1",
        "--n-predict",
        "4",
        "--no-save",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    configs = {c["name"]: c for c in data["configs"]}
    assert configs["plan"]["status"] == "ok" and "-ts" in configs["plan"]["args"]
    fit_args = configs["fit"]["args"]
    margins = fit_args[fit_args.index("--fit-target") + 1].split(",")
    assert len(margins) == 2
    assert len(configs["plan"]["device_peaks"]) == 2


def test_split_modes(model_factory: ModelFactory, trio: list[str]) -> None:
    model = str(model_factory("qwen3moe", n_layers=8))
    done = moetune(
        "run", model, "--rpc", ",".join(trio[:2]), "--target-vram", "30M", "--", "-sm", "row"
    )
    assert done.returncode == ExitCode.BAD_VALUE and "-sm row" in done.stderr
    one = moetune(
        "run",
        model,
        "--rpc",
        ",".join(trio[:2]),
        "--target-vram",
        "40M",
        "--ctx",
        str(CTX),
        "--no-save",
        "--json",
        "--",
        "-dev",
        "RPC1",
    )
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["device"] == "RPC1"  # -dev picked one device: single


def test_dry_run_correction_is_llamas_figure(model_factory: ModelFactory, trio: list[str]) -> None:
    """When llama.cpp's dry run disagrees with the prediction (here: the prediction is made for
    another placement than the command), the difference on each device is what counts."""
    from moetune.jobs.verify import dry_run_corrections

    facts = load_model_facts(model_factory("qwen3moe", n_layers=8))
    settings = Settings(n_ctx=CTX, type_k="q8_0", type_v="q8_0", device_kind="rpc")
    wrong = Placement.with_n_cpu_moe(8, tensor_split=(1.0, 1.0))
    right = Case(2, (1, 1), n_cpu_moe=2)
    command = ["-m", str(model_factory("qwen3moe", n_layers=8)), *right.args(trio)]
    found = dry_run_corrections(
        facts, settings, wrong, devices(trio[:2]), tool=bin_path("llama-fit-params"), args=command
    )
    dry = replace(settings, n_seq=1, all_outputs=True, gpu_overhead_bytes=0)
    should = estimate(facts, right.placement(), dry, devices(trio[:2]))
    was = estimate(facts, wrong, dry, devices(trio[:2]))
    for i, delta in enumerate(found):
        expected = should.devices[i].total_bytes - was.devices[i].total_bytes
        assert delta > 0 and abs(delta - expected) <= 3 * MIB, (i, delta, expected)
    agreeing = dry_run_corrections(
        facts,
        settings,
        right.placement(),
        devices(trio[:2]),
        tool=bin_path("llama-fit-params"),
        args=command,
    )
    assert agreeing == (0, 0)


def test_doctor_lists_every_device(model_factory: ModelFactory, trio: list[str]) -> None:
    """doctor --rpc A,B: each server a device; on a machine without an NVIDIA GPU the gpu
    check passes because the RPC servers are the devices. One that is not running fails, and
    a model's fit is then not checked (a failure that says why, not a crash)."""
    code, out, err = cli("doctor", "--rpc", ",".join(trio[:2]), "--no-measure", "--json")
    findings = json.loads(out)["findings"]
    devices_found = [f for f in findings if f["check"] == "device"]
    assert [f["message"].split()[1].rstrip(":") for f in devices_found] == trio[:2]
    assert not [f for f in findings if f["check"] in ("gpu", "device") and f["status"] == "fail"]
    failed = [f["check"] for f in findings if f["status"] == "fail"]
    assert code == (ExitCode.CHECK_FAILED if failed else 0), out + err
    dead = f"127.0.0.1:{free_port()}"
    model = str(model_factory("qwen3moe", n_layers=8))
    args = ("--rpc", f"{trio[0]},{dead}", "--ctx", str(CTX), "--no-measure", "--json")
    code, out, _ = cli("doctor", model, *args)
    assert code == ExitCode.CHECK_FAILED
    failing = [f for f in json.loads(out)["findings"] if f["status"] == "fail"]
    assert [f["check"] for f in failing if dead in f["message"]] == ["device", "model-fit"]


def test_frontier_with_one_device_fewer_runs_as_forecast(tmp_path: Path, trio: list[str]) -> None:
    """The frontier's candidates on one device of two (`-dev RPC1`) start llama-server on that
    device alone, and its buffers there are the candidate's predicted device memory."""
    model = write_model(tmp_path / "q8.gguf", "qwen3moe", n_layers=8)
    code, out, err = cli(
        "plan",
        str(model),
        "--rpc",
        ",".join(trio[:2]),
        "--target-vram",
        "60M,40M",
        "--ram",
        "64G",
        "--workload",
        "512:64",
        "--json",
    )
    assert code == 0, out + err
    entries = json.loads(out)["frontier"]["entries"]
    assert {tuple(e["devices"]) for e in entries} == {("RPC0", "RPC1"), ("RPC0",), ("RPC1",)}
    alone = next(e for e in entries if e["devices"] == ["RPC1"])
    command = alone["command"]
    assert command[command.index("-dev") + 1] == "RPC1"
    with running_server(None, *command[1:], "--no-warmup") as server:
        text = server.log_text()
    assert f"using device RPC1 ({trio[1]})" in text
    lines = parse_buffers("\n".join(real_load_lines(text)))
    on_device = [b for b in lines if b.device == rpc_buft(trio[1])]
    assert on_device, lines
    assert not [b for b in lines if trio[0] in b.device]  # nothing on the dropped device
    total = sum(b.mib for b in on_device)
    assert abs(total - alone["device_bytes"][0] / MIB) <= 0.03  # three lines to 0.01 MiB
