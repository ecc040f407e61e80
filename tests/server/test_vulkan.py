"""The memory model against llama.cpp's Vulkan backend on Mesa's lavapipe (support/vulkan.py):
a real device whose backend offloads ops on host weights, as CUDA does. With experts on the
CPU and a batch of at least 32 tokens, the scheduler runs their matrix products on Vulkan0
and copies the weights into its compute buffer; the RPC rig never shows that copy.

llama-fit-params' dry run of each command per device must equal moetune's prediction of the
same run within the plan's fidelity bounds (jobs/verify.compare: weights to the MiB, KV within
1 %, compute within 10 % or 64 MiB), for four architectures, ubatch 16/32/512/2048, every
expert on the device and some on the CPU, on Vulkan0 alone and beside an RPC server. On a
Qwen3-shaped Q4_K_M header whose expert tensors (54 and 79 MiB) make the copies larger than
the bounds, the compute buffer is held to the MiB, and taking the op-offload rule out of
Vulkan's record makes the check fail.

Measured here (the tiny models' compute buffers, MiB, dry run / moetune): Vulkan0 alone within
1 MiB but for glm4moe (16 / 14.05 at ub 512, 64 / 56.09 at ub 2048); beside an RPC server with
every expert on the devices (pipeline parallelism) Vulkan0 gets up to 17 % more than the
replay gives (glm4moe ub 2048: 136 / 112.69), the RPC server and the host exactly what it
gives. ggml-vulkan's graph_optimize reorders each split's nodes, which the replay does not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from moetune.core import backends
from moetune.core.devices import DeviceSpec, rpc_buft
from moetune.core.memory import DeviceMemory, estimate
from moetune.core.placement import Placement
from moetune.jobs.devices import specs_from_listed
from moetune.jobs.loader import load_model_facts
from moetune.jobs.verify import compare
from moetune.llamacpp.log import Projection
from moetune.llamacpp.process import server_info
from moetune.units import MIB

from support.factory import ModelFactory, MoeShape, write_header_only
from support.fitrig import COMMON, dry_run_settings, project
from support.helpers import moetune
from support.vulkan import DEVICE, MARKS, VISIBLE, vulkan_tool

pytestmark = MARKS

ARCHS = ("qwen3moe", "gpt-oss", "deepseek2", "glm4moe")
UBATCHES = (16, 32, 512, 2048)
N_CTX = 4096
N_LAYERS = 6
# 16 experts of 512 x 512 in F16: 8 MiB a tensor, so an op-offload copy is several MiB
SHAPE = {"n_layers": N_LAYERS, "n_experts": 16, "n_embd": 512}


@pytest.fixture(autouse=True)
def _lavapipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """lavapipe as Vulkan0 for every llama.cpp program these tests start."""
    for name, value in VISIBLE.items():
        monkeypatch.setenv(name, value)


def _model(model_factory: ModelFactory, arch: str) -> Path:
    return model_factory(arch, file_name=f"{arch}-vk.gguf", **SHAPE)


def _args(n_cpu_moe: int, n_ubatch: int, *devices: str) -> list[str]:
    return [
        *devices,
        "-ngl",
        "99",
        "--n-cpu-moe",
        str(n_cpu_moe),
        "-c",
        str(N_CTX),
        "-ub",
        str(n_ubatch),
        *COMMON,
    ]


def _check(projected: Projection, predicted: DeviceMemory, compute_mib: float = 0) -> None:
    """The plan's own fidelity check (jobs/verify.compare); ``compute_mib``: compute also
    within that many MiB of the dry run (which prints whole MiB, rounded down)."""
    check = compare(projected.device, projected, predicted)
    assert check.agrees, check
    if compute_mib:
        over = predicted.compute_bytes / MIB - projected.compute_mib
        assert -compute_mib <= over < 1 + compute_mib, check


def _vulkan0(devices: tuple[DeviceSpec, ...] = ()) -> tuple[DeviceSpec, ...]:
    spec = DeviceSpec(name=DEVICE, buft=DEVICE, kind="vulkan", overhead_bytes=0)
    return (*devices, spec)


def test_llama_server_lists_vulkan0() -> None:
    """llama-server's list holds lavapipe as Vulkan0, which moetune plans with Vulkan's rules."""
    info = server_info(vulkan_tool("llama-server"))
    (device,) = info.devices
    assert device.name == DEVICE and device.description.startswith("llvmpipe")
    assert device.total_bytes == 2048 * MIB
    (spec,) = specs_from_listed(info.devices, None)
    assert (spec.kind, spec.buft, spec.overhead_bytes) == ("vulkan", DEVICE, 0)


@pytest.mark.parametrize("n_cpu_moe", [0, 3])
@pytest.mark.parametrize("arch", ARCHS)
def test_plan_on_vulkan0_matches_the_dry_run(
    model_factory: ModelFactory, arch: str, n_cpu_moe: int
) -> None:
    """Vulkan0 alone, each ubatch: from 32 tokens on, the experts of the CPU's blocks are
    copied into Vulkan0's compute buffer (ub 16 runs them on the CPU)."""
    model = _model(model_factory, arch)
    facts = load_model_facts(model)
    for n_ubatch in UBATCHES:
        projected = project(model, _args(n_cpu_moe, n_ubatch), vulkan_tool("llama-fit-params"))
        settings = replace(dry_run_settings(N_CTX), n_ubatch=n_ubatch, device_kind="vulkan")
        predicted = estimate(facts, Placement.with_n_cpu_moe(n_cpu_moe), settings, _vulkan0())
        _check(projected[DEVICE], predicted.devices[0])


@pytest.mark.parametrize("arch", ARCHS[:3])
def test_plan_on_an_rpc_server_and_vulkan0_matches_the_dry_run(
    model_factory: ModelFactory, rpc: str, arch: str
) -> None:
    """Two devices: an RPC server (RPC0, first in llama.cpp's order) and Vulkan0, the layers
    split in half; the op-offload copies land on Vulkan0, the one that offloads."""
    model = _model(model_factory, arch)
    facts = load_model_facts(model)
    devices = _vulkan0((DeviceSpec(name="RPC0", buft=rpc_buft(rpc), kind="rpc", overhead_bytes=0),))
    for n_cpu_moe, n_ubatch in ((0, 512), (2, 32), (4, 2048)):
        args = [*_args(n_cpu_moe, n_ubatch, "--rpc", rpc), "-ts", "1,1"]
        projected = project(model, args, vulkan_tool("llama-fit-params"))
        settings = replace(dry_run_settings(N_CTX), n_ubatch=n_ubatch)
        placement = Placement.with_n_cpu_moe(n_cpu_moe, tensor_split=(1.0, 1.0))
        predicted = estimate(facts, placement, settings, devices)
        for spec, memory in zip(devices, predicted.devices, strict=True):
            _check(projected[spec.name], memory)


# Qwen3-shaped, Q4_K_M, 64 experts of 2048 x 768: expert tensors of 54 (Q4_K) and 79 MiB
# (Q6_K), under lavapipe's 128 MiB; header only, its data a hole (llama-fit-params reads none)
HEADER = MoeShape("rig-qwen3moe", 4, 2048, 32, 4, 128, 64, 8, 768, 6144, n_vocab=4096)


def _header(model_factory: ModelFactory) -> Path:
    return model_factory.written(
        "vk-qwen3moe-q4km",
        lambda path: write_header_only(path, shape=HEADER, n_merges=10, sparse=True),
    )


def _header_check(model_factory: ModelFactory, cases: tuple[tuple[int, int], ...]) -> list[bool]:
    """Whether the fidelity check holds at each (n_cpu_moe, ubatch), compute to the MiB where
    it does."""
    model = _header(model_factory)
    facts = load_model_facts(model)
    found = []
    for n_cpu_moe, n_ubatch in cases:
        projected = project(model, _args(n_cpu_moe, n_ubatch), vulkan_tool("llama-fit-params"))
        settings = replace(dry_run_settings(N_CTX), n_ubatch=n_ubatch, device_kind="vulkan")
        predicted = estimate(facts, Placement.with_n_cpu_moe(n_cpu_moe), settings, _vulkan0())
        try:
            _check(projected[DEVICE], predicted.devices[0], compute_mib=1)
        except AssertionError:
            found.append(False)
        else:
            found.append(True)
    return found


HEADER_CASES = tuple((n, ub) for n in (0, 2, 4) for ub in UBATCHES)


def test_real_shaped_plan_on_vulkan0_matches_the_dry_run_to_the_mib(
    model_factory: ModelFactory,
) -> None:
    """Measured: every expert on Vulkan0, 352 MiB at ub 2048; the experts of all 4 blocks on
    the CPU, 1 MiB at ub 16 and 82 at ub 32 (a 79 MiB copy), both sides the same."""
    assert _header_check(model_factory, HEADER_CASES) == [True] * len(HEADER_CASES)


@pytest.fixture
def no_op_offload(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Vulkan's rules without offload_op: the copies left out of the model."""
    vulkan = backends.rules("vulkan")._replace(op_offload=False)
    monkeypatch.setitem(backends._BY_KIND, "vulkan", vulkan)
    yield


@pytest.mark.usefixtures("no_op_offload")
def test_without_the_op_offload_copy_the_check_fails(model_factory: ModelFactory) -> None:
    """The same comparison with the op-offload rule taken out of Vulkan's record: it fails
    wherever experts sit on the CPU at a batch of 32 or more, and holds at ub 16 and where
    every expert is on the device."""
    cases = ((4, 16), (4, 32), (4, 512), (2, 32), (0, 512))
    assert _header_check(model_factory, cases) == [True, False, False, False, True]


# --- the commands on Vulkan0 ----------------------------------------------------------------


def test_plan_command_on_vulkan0_is_checked_by_llama_cpp(model_factory: ModelFactory) -> None:
    """No NVIDIA GPU here: plan takes its device from llama-server's list (Vulkan0, 2 GiB),
    and llama.cpp's dry run of the first command agrees with it."""
    server = str(vulkan_tool("llama-server"))
    result = moetune("plan", str(_header(model_factory)), "--server", server, "--ctx", "4096")
    assert result.returncode == 0, result.stderr
    assert "Vulkan0 llvmpipe" in result.stdout
    assert "llama.cpp projects Vulkan0" in result.stdout
    result = moetune("plan", str(_header(model_factory)), "--server", server, "--json")
    data = json.loads(result.stdout)
    assert data["checked"] == "llama.cpp", data.get("warnings")
    assert [d["name"] for d in data["devices"]] == [DEVICE]


def test_doctor_lists_vulkan0() -> None:
    result = moetune("doctor", "--server", str(vulkan_tool("llama-server")), "--json")
    assert result.returncode == 0, result.stderr
    findings = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    assert findings["gpu"]["status"] == "ok" and DEVICE in findings["gpu"]["message"]
    assert findings["device"]["message"].startswith("Vulkan0 llvmpipe")


def test_run_converges_on_vulkan0(model_factory: ModelFactory, tmp_path: Path) -> None:
    """run launches llama-server on Vulkan0 until the measured peak (its buffer lines) is
    within the target, and leaves no llama-server behind."""
    model = model_factory("qwen3moe", n_layers=8)
    target = 23 * MIB  # predicted: 24.85 MiB at --n-cpu-moe 3, 21.85 at 4
    result = moetune(
        "run",
        str(model),
        "--server",
        str(vulkan_tool("llama-server")),
        "--target-vram",
        f"{target // MIB}M",
        "--ctx",
        "512",
        "--overhead",
        "0",
        "--fill",
        "32",
        "--repeats",
        "1",
        "--no-save",
        "--json",
        home=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert "Vulkan0" in data["probe"]
    assert data["best"]["n_cpu_moe"] == 4
    assert data["best"]["measured_bytes"] <= data["target_bytes"] == target
    left = [
        p for p in psutil.process_iter(["exe"]) if p.info["exe"] == str(vulkan_tool("llama-server"))
    ]
    assert not left, left
