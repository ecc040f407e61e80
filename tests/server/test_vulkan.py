"""The memory model against llama.cpp's Vulkan backend on Mesa's lavapipe (support/vulkan.py):
a real device whose backend offloads ops on host weights, as CUDA does. With experts on the
CPU and a batch of at least 32 tokens, the scheduler runs their matrix products on Vulkan0
and copies the weights into its compute buffer; the RPC rig never shows that copy.

llama-fit-params' dry run of each command per device must equal moetune's prediction of the
same run: weights to the MiB, KV within 1 %, compute within 10 % (and, the rig's models being
tiny, within 1 MiB where 10 % is less: the issue's 64 MiB floor would hide the copies), for
four architectures, ubatch 16/32/512/2048, every expert on the device and some on the CPU, on
Vulkan0 alone and beside an RPC server. Removing the op-offload rule makes them fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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

from support.factory import ModelFactory
from support.fitrig import COMMON, dry_run_settings, project
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


def _check(projected: Projection, predicted: DeviceMemory) -> None:
    """The plan's own fidelity check (jobs/verify.compare), then compute to the MiB."""
    check = compare(projected.device, projected, predicted)
    assert check.agrees, check
    compute = predicted.compute_bytes / MIB
    assert abs(projected.compute_mib - compute) <= max(0.10 * projected.compute_mib, 1.0), check


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
        settings = dry_run_settings(N_CTX).model_copy(
            update={"n_ubatch": n_ubatch, "device_kind": "vulkan"}
        )
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
    devices = _vulkan0(
        (DeviceSpec(name="RPC0", buft=rpc_buft(rpc), kind="rpc", overhead_bytes=0),)
    )
    for n_cpu_moe, n_ubatch in ((0, 512), (2, 32), (4, 2048)):
        args = [*_args(n_cpu_moe, n_ubatch, "--rpc", rpc), "-ts", "1,1"]
        projected = project(model, args, vulkan_tool("llama-fit-params"))
        settings = dry_run_settings(N_CTX).model_copy(update={"n_ubatch": n_ubatch})
        placement = Placement.with_n_cpu_moe(n_cpu_moe, tensor_split=(1.0, 1.0))
        predicted = estimate(facts, placement, settings, devices)
        for spec, memory in zip(devices, predicted.devices, strict=True):
            _check(projected[spec.name], memory)


@pytest.fixture
def no_op_offload(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Vulkan's rules without offload_op: the copies left out of the model."""
    vulkan = backends.rules("vulkan")._replace(op_offload=False)
    monkeypatch.setitem(backends._BY_KIND, "vulkan", vulkan)
    yield


@pytest.mark.usefixtures("no_op_offload")
def test_without_the_op_offload_copy_the_check_fails(model_factory: ModelFactory) -> None:
    """The same comparison, with the op-offload rule taken out of Vulkan's record: it fails
    where experts sit on the CPU at a batch of 32 or more, and still holds at ub 16."""
    model = _model(model_factory, "qwen3moe")
    facts = load_model_facts(model)
    for n_ubatch, holds in ((16, True), (32, False), (512, False)):
        projected = project(model, _args(3, n_ubatch), vulkan_tool("llama-fit-params"))
        settings = dry_run_settings(N_CTX).model_copy(
            update={"n_ubatch": n_ubatch, "device_kind": "vulkan"}
        )
        predicted = estimate(facts, Placement.with_n_cpu_moe(3), settings, _vulkan0())
        if holds:
            _check(projected[DEVICE], predicted.devices[0])
        else:
            with pytest.raises(AssertionError):
                _check(projected[DEVICE], predicted.devices[0])
