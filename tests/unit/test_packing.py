"""The ``-ot`` plan on one and several devices (core/planner.py ``plan_override``): within
every budget, its rules give the estimate the search used, it keeps at least what
``--n-cpu-moe`` keeps, every device is filled (no expert part left on the CPU fits the room
a device has left), and on two devices the split is the search's own, whatever it starts
from (pure: no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts
from moetune.core.memory import Settings, estimate
from moetune.core.placement import CPU, Override, Placement, split_weights
from moetune.core.planner import DeviceBudgets, OffloadPlan, plan_n_cpu_moe, plan_override
from moetune.errors import DoesNotFitError
from moetune.gguf.roles import Role
from moetune.jobs.loader import load_model_facts
from moetune.units import GIB, MIB

from support.factory import ModelFactory
from support.helpers import EXAMPLE_GPT_OSS, EXAMPLE_QWEN, EXAMPLES

DEEPSEEK = EXAMPLES / "DeepSeek-V3-0324-Q4_K_M.header.gguf"


def _devices(kind: str, n: int) -> tuple[DeviceSpec, ...]:
    prefix = "RPC" if kind == "rpc" else "CUDA"
    overhead = 0 if kind == "rpc" else 512 * MIB
    return tuple(
        DeviceSpec(name=f"{prefix}{i}", buft=f"{prefix}{i}", kind=kind, overhead_bytes=overhead)
        for i in range(n)
    )


def _settings(kind: str, n_ctx: int) -> Settings:
    overhead = 0 if kind == "rpc" else 512 * MIB
    return Settings(
        n_ctx=n_ctx, type_k="q8_0", type_v="q8_0", device_kind=kind, gpu_overhead_bytes=overhead
    )


# (model, device kind, context, budgets in MiB)
BIG = [
    (EXAMPLE_QWEN, "rpc", 32768, (8192, 8192)),
    (EXAMPLE_QWEN, "cuda", 32768, (12288, 6144)),
    (EXAMPLE_QWEN, "rpc", 16384, (6144, 5120, 4096)),
    (EXAMPLE_QWEN, "cuda", 32768, (16384,)),
    (EXAMPLE_GPT_OSS, "rpc", 32768, (24576, 12288)),
    (EXAMPLE_GPT_OSS, "cuda", 32768, (20480, 12288, 12288)),
    (DEEPSEEK, "cuda", 16384, (24576, 24576)),  # three leading dense blocks
]


@pytest.fixture(scope="module")
def big_facts() -> dict[Path, ModelFacts]:
    return {path: load_model_facts(path) for path in {case[0] for case in BIG}}


def _parts_on_cpu(facts: ModelFacts, plan: OffloadPlan, n: int) -> dict[tuple[int, str], int]:
    """Each expert part on the CPU (block, part) and its bytes."""
    weights = split_weights(facts, plan.placement, n)
    homes = weights.tensor_homes(facts.tensors)
    found: dict[tuple[int, str], int] = {}
    for tensor, home in zip(facts.tensors, homes, strict=True):
        if tensor.role is Role.EXPERTS and home == CPU and tensor.layer is not None:
            key = (tensor.layer, tensor.expert_part or "")
            found[key] = found.get(key, 0) + (tensor.nbytes or 0)
    return found


def _check(facts: ModelFacts, target: DeviceBudgets, settings: Settings) -> OffloadPlan:
    """The properties every -ot plan has; the plan."""
    devices = target.devices
    main = plan_n_cpu_moe(facts, target, settings)
    counts = tuple(int(c) for c in main.placement.tensor_split) or None
    plan = plan_override(facts, target, settings, counts)
    assert target.fits(plan.memory)
    assert estimate(facts, plan.placement, settings, devices) == plan.memory
    assert plan.memory.gpu_expert_bytes >= main.memory.gpu_expert_bytes
    full = split_weights(facts, Placement(tensor_split=plan.placement.tensor_split), target.n)
    mine = split_weights(facts, plan.placement, target.n)
    assert mine.gpu_other_bytes == full.gpu_other_bytes  # routers, attention stay on devices
    rooms = [b - d.total_bytes for b, d in zip(target.budgets, plan.memory.devices, strict=True)]
    for (block, part), nbytes in _parts_on_cpu(facts, plan, target.n).items():
        for device, room in enumerate(rooms):
            if nbytes > room:
                continue  # it cannot fit there: the device is full for it
            rule = Override(rf"blk\.{block}\.ffn_{part}_(ch|)exps", device)
            more = plan.placement._replace(overrides=(rule, *plan.placement.overrides))
            assert not target.fits(estimate(facts, more, settings, devices)), (block, part)
    return plan


@pytest.mark.parametrize(
    ("path", "kind", "n_ctx", "budgets"),
    BIG,
    ids=[f"{p.stem.split('-')[0]}-{k}-{'_'.join(map(str, b))}" for p, k, _, b in BIG],
)
def test_real_shapes(
    big_facts: dict[Path, ModelFacts],
    path: Path,
    kind: str,
    n_ctx: int,
    budgets: tuple[int, ...],
) -> None:
    facts = big_facts[path]
    target = DeviceBudgets(_devices(kind, len(budgets)), tuple(b * MIB for b in budgets))
    plan = _check(facts, target, _settings(kind, n_ctx))
    if len(budgets) == 2:  # one boundary, scanned whole: the start does not matter
        total = facts.n_layers + 1
        other = plan_override(
            facts, target, _settings(kind, n_ctx), (total // 2, total - total // 2)
        )
        assert other.memory.gpu_expert_bytes == plan.memory.gpu_expert_bytes
        assert other.placement == plan.placement


@pytest.mark.parametrize("arch", ["qwen3moe", "deepseek2", "glm4moe", "qwen35moe", "gpt-oss"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_tiny_models(model_factory: ModelFactory, arch: str, n: int) -> None:
    """Every architecture (glm4moe and qwen35moe with a NextN block, not loaded), at
    budgets between all experts on the CPU and all on the devices."""
    nextn = 1 if arch in ("glm4moe", "qwen35moe") else 0
    facts = load_model_facts(model_factory(arch, n_layers=8, n_nextn=nextn))
    settings = _settings("rpc", 2048)
    devices = _devices("rpc", n)
    even = tuple(float(c) for c in [9 // n] * (n - 1) + [9 - (n - 1) * (9 // n)])
    low = estimate(facts, Placement.all_experts_on_cpu(tensor_split=even), settings, devices)
    high = estimate(facts, Placement(tensor_split=even), settings, devices)
    for step in (1, 3, 5):
        budgets = tuple(
            lo.total_bytes + (hi.total_bytes - lo.total_bytes) * step // 6 + 2 * MIB
            for lo, hi in zip(low.devices, high.devices, strict=True)
        )
        _check(facts, DeviceBudgets(devices, budgets), settings)


def test_a_budget_below_every_split_does_not_fit() -> None:
    facts = load_model_facts(EXAMPLE_QWEN)
    target = DeviceBudgets(_devices("rpc", 2), (GIB // 4, GIB // 4))
    with pytest.raises(DoesNotFitError, match="does not fit"):
        plan_override(facts, target, _settings("rpc", 32768))
