"""Where each tensor lives, decided exactly as llama.cpp build 11434 decides it.

- ``-ngl K`` (src/llama-model.cpp ``load_tensors``): ``i_gpu_start = max(n_layer_all + 1 - K, 0)``;
  block ``il`` is offloaded iff ``il >= i_gpu_start``; the output layer (``output``,
  ``output_norm``) counts as index ``n_layer_all``, so it is offloaded whenever ``K >= 1``;
  the input layer (``token_embd``) always stays on the CPU.
- ``-ts`` on several devices: the split points are the cumulative, normalised ``-ts`` values
  (float32); an offloaded layer ``il`` goes to the first device whose point is above
  ``(il - i_gpu_start) / act_gpu_layers``, ``act_gpu_layers = min(K, n_layer_all + 1)``; so
  the output layer goes to the last device that gets layers. Without ``-ts`` llama.cpp splits
  by each device's free memory (``free_bytes`` here).
- ``-ot REGEX=BUFT`` (src/llama-model-loader.cpp): ``std::regex_search`` on the full tensor
  name, rules in order, the first match wins. ``--n-cpu-moe N`` appends
  ``blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`` for i = 0..N-1 (common/common.h), so
  an ``-ot`` given before it wins. ``--cpu-moe`` appends the same rule without a block index.
- NextN/MTP blocks are skipped at load (TENSOR_SKIP) unless MTP is asked for: nowhere.

A tensor's home is a device index (0, 1, ... in llama.cpp's device order) or ``CPU``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from enum import Enum
from functools import lru_cache
from typing import NamedTuple

from moetune.core.facts import ModelFacts, TensorFacts
from moetune.gguf.roles import Role

EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # common/common.h LLM_FFN_EXPS_REGEX
ALL_LAYERS = 999  # what "-ngl 99"/"all" means for any model moetune will meet
CPU = -1  # a home: the CPU (host memory)
SKIPPED = -2  # a home: not loaded (NextN/MTP blocks)


class TensorDevice(str, Enum):
    """Where a tensor is, seen from one device: offloaded (to any device), CPU, or nowhere."""

    GPU = "gpu"
    CPU = "cpu"
    NONE = "none"  # not loaded (NextN/MTP blocks)


class Override(NamedTuple):
    """One ``-ot PATTERN=BUFT`` rule: to the CPU, or to device ``target``."""

    pattern: str
    target: int = CPU

    def arg(self, bufts: Sequence[str] = ()) -> str:
        """``PATTERN=CPU``, or ``PATTERN=<the device's buffer type>`` (``CUDA1``,
        ``RPC0[10.0.0.2:50052]``)."""
        return f"{self.pattern}={'CPU' if self.target == CPU else bufts[self.target]}"


class Placement(NamedTuple):
    """``-ngl``, ``-ts`` and override rules in the order llama.cpp will see them."""

    n_gpu_layers: int = ALL_LAYERS
    overrides: tuple[Override, ...] = ()
    n_cpu_moe: int | None = None  # set when the rules came from --n-cpu-moe N
    tensor_split: tuple[float, ...] = ()  # -ts; empty: by free memory (one device: all on it)

    @classmethod
    def with_n_cpu_moe(
        cls, n: int, n_gpu_layers: int = ALL_LAYERS, tensor_split: tuple[float, ...] = ()
    ) -> Placement:
        rules = tuple(Override(f"blk\\.{i}{EXPS_REGEX}") for i in range(n))
        return cls(n_gpu_layers, rules, n_cpu_moe=n, tensor_split=tensor_split)

    @classmethod
    def all_experts_on_cpu(
        cls, n_gpu_layers: int = ALL_LAYERS, tensor_split: tuple[float, ...] = ()
    ) -> Placement:
        return cls(n_gpu_layers, (Override(EXPS_REGEX),), tensor_split=tensor_split)


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _f32(value: float) -> float:
    """``value`` rounded to a C float, as llama.cpp computes its split points."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def split_points(weights: Sequence[float]) -> list[float]:
    """The cumulative, normalised split (``-ts`` values, or free memory), in float32."""
    points: list[float] = []
    total = 0.0
    for weight in weights:
        total = _f32(total + _f32(weight))
        points.append(total)
    return [_f32(point / total) for point in points] if total > 0 else [1.0] * len(points)


def layer_homes(n_layer_all: int, n_gpu_layers: int, weights: Sequence[float]) -> tuple[int, ...]:
    """The device of each layer 0..n_layer_all (the last is the output layer), or CPU;
    ``weights``: one per device, the ``-ts`` values (or each device's free memory)."""
    i_gpu_start = max(n_layer_all + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer_all + 1) if weights else 0
    points = split_points(weights)
    homes: list[int] = []
    for il in range(n_layer_all + 1):
        if il < i_gpu_start or il - i_gpu_start >= act:
            homes.append(CPU)
            continue
        at = _f32(_f32(il - i_gpu_start) / _f32(act))
        device = next((i for i, point in enumerate(points) if point > at), len(points))
        homes.append(min(device, len(points) - 1))  # upper_bound past the end: devices.at throws
    return tuple(homes)


def layer_on_gpu(layer: int | None, n_layer_all: int, n_gpu_layers: int) -> bool:
    """Is block ``layer`` (None = output layer) offloaded under ``-ngl n_gpu_layers``?"""
    i_gpu_start = max(n_layer_all + 1 - n_gpu_layers, 0)
    index = n_layer_all if layer is None else layer
    return index >= i_gpu_start


def _split_weights_of(placement: Placement, free: Sequence[int], n_devices: int) -> list[float]:
    if any(placement.tensor_split):
        return list(placement.tensor_split[:n_devices]) + [0.0] * (
            n_devices - len(placement.tensor_split)
        )
    return [float(f) for f in free] if free else [1.0] * n_devices


def homes_for(
    n_layer_all: int, placement: Placement, n_devices: int = 1, free: Sequence[int] = ()
) -> tuple[int, ...]:
    """Each layer's device under ``placement`` (then the output layer's)."""
    weights = _split_weights_of(placement, free, n_devices)
    return layer_homes(n_layer_all, placement.n_gpu_layers, weights)


def tensor_home(tensor: TensorFacts, homes: Sequence[int], placement: Placement) -> int:
    """The device index of ``tensor``, CPU, or SKIPPED (``homes`` from ``homes_for``)."""
    return _home(tensor, homes, placement.overrides, _rule_targets(placement.overrides))


@lru_cache(maxsize=64)
def _rule_targets(overrides: tuple[Override, ...]) -> dict[str, int | None]:
    """The target of the first of ``overrides`` that matches each tensor name asked about so
    far (None: none matches): the planner's many splits of a model search each rule against
    each name once."""
    return {}


def _rule_target(
    name: str, overrides: tuple[Override, ...], known: dict[str, int | None]
) -> int | None:
    """The target of the first rule of ``overrides`` matching ``name``, if any (``known``:
    their ``_rule_targets``)."""
    if not overrides:
        return None
    found = known.get(name, SKIPPED)  # SKIPPED: not asked yet (no rule targets it)
    if found == SKIPPED:
        found = next((r.target for r in overrides if _compiled(r.pattern).search(name)), None)
        known[name] = found
    return found


def _home(
    tensor: TensorFacts,
    homes: Sequence[int],
    overrides: tuple[Override, ...],
    known: dict[str, int | None],
) -> int:
    if tensor.role is Role.NEXTN:
        return SKIPPED
    target = _rule_target(tensor.name, overrides, known)
    return _default_home(tensor, homes) if target is None else target


def tensor_device(tensor: TensorFacts, n_layer_all: int, placement: Placement) -> TensorDevice:
    """Offloaded, on the CPU or not loaded, on a single device."""
    home = tensor_home(tensor, homes_for(n_layer_all, placement), placement)
    if home == SKIPPED:
        return TensorDevice.NONE
    return TensorDevice.CPU if home == CPU else TensorDevice.GPU


class WeightSplit(NamedTuple):
    """Weight bytes per device and on the CPU, experts and everything else apart; where each
    layer lives, and the tensors that an override put elsewhere than their layer."""

    device_expert_bytes: tuple[int, ...]
    device_other_bytes: tuple[int, ...]
    cpu_expert_bytes: int
    cpu_other_bytes: int
    homes: tuple[int, ...]  # each block's device, CPU or SKIPPED, then the output layer's
    moves: frozenset[tuple[str, int]]  # (tensor, its home) where an override moved it
    # NextN/MTP blocks, were they loaded (--spec-type draft-mtp): their layer's home, and
    # their tensors that an override would put elsewhere
    nextn_homes: tuple[tuple[int, int], ...] = ()  # (block, home)
    nextn_moves: frozenset[tuple[str, int]] = frozenset()

    @property
    def gpu_expert_bytes(self) -> int:
        return sum(self.device_expert_bytes)

    @property
    def gpu_other_bytes(self) -> int:
        return sum(self.device_other_bytes)

    @property
    def gpu_bytes(self) -> int:
        return self.gpu_expert_bytes + self.gpu_other_bytes

    @property
    def cpu_bytes(self) -> int:
        return self.cpu_expert_bytes + self.cpu_other_bytes

    @property
    def device_bytes(self) -> tuple[int, ...]:
        return tuple(
            e + o for e, o in zip(self.device_expert_bytes, self.device_other_bytes, strict=True)
        )

    @property
    def n_devices(self) -> int:
        return len(self.device_expert_bytes)

    @property
    def gpu_layers(self) -> tuple[int, ...]:
        """Blocks whose (non-override) home is a device."""
        return tuple(i for i, home in enumerate(self.homes[:-1]) if home >= 0)

    @property
    def cpu_expert_layers(self) -> tuple[int, ...]:
        """Blocks with at least one expert tensor on the CPU."""
        moved = {_block_of(name) for name, home in self.moves if home == CPU and "exps" in name}
        return tuple(sorted(moved))

    @property
    def output_on_gpu(self) -> bool:
        return self.homes[-1] >= 0

    def layers_on(self, device: int) -> tuple[int, ...]:
        return tuple(i for i, home in enumerate(self.homes[:-1]) if home == device)

    def tensor_homes(self, tensors: Sequence[TensorFacts]) -> list[int]:
        """Each tensor's home under this split: a device index, CPU or SKIPPED."""
        moved, homes = dict(self.moves), self.homes
        return [
            _default_home(t, homes) if (found := moved.get(t.name)) is None else found
            for t in tensors
        ]

    def move_experts(self, tensors: Sequence[TensorFacts], target: int = CPU) -> WeightSplit:
        """This split with the routed-expert ``tensors`` moved to ``target``: the planner's
        fast path, equal to evaluating the rules."""
        expert = list(self.device_expert_bytes)
        cpu = self.cpu_expert_bytes
        moves = dict(self.moves)
        for tensor in tensors:
            assert tensor.layer is not None
            block_home = self.homes[tensor.layer]
            now, nbytes = moves.get(tensor.name, block_home), tensor.nbytes or 0
            if now == target:
                continue
            if now == CPU:
                cpu -= nbytes
            else:
                expert[now] -= nbytes
            if target == CPU:
                cpu += nbytes
            else:
                expert[target] += nbytes
            if target == block_home:
                del moves[tensor.name]
            else:
                moves[tensor.name] = target
        return self._replace(
            device_expert_bytes=tuple(expert), cpu_expert_bytes=cpu, moves=frozenset(moves.items())
        )


def _block_of(name: str) -> int:
    return int(name.split(".", 2)[1])


def split_weights(
    facts: ModelFacts, placement: Placement, n_devices: int = 1, free: Sequence[int] = ()
) -> WeightSplit:
    """Bytes per home for ``placement`` over ``n_devices`` devices (``free``: their free
    memory, llama.cpp's split when no ``-ts`` is given); the last few splits are kept (a
    plan's forecast and the frontier's ubatches ask for the same ones again)."""
    key = (id(facts), placement, n_devices, tuple(free))
    found = _SPLITS.get(key)
    if found is not None and found[0] is facts:
        return found[1]
    split = _split_weights(facts, placement, n_devices, free)
    _SPLITS[key] = (facts, split)
    while len(_SPLITS) > 64:
        _SPLITS.pop(next(iter(_SPLITS)))
    return split


_SPLITS: dict[tuple[int, Placement, int, tuple[int, ...]], tuple[ModelFacts, WeightSplit]] = {}


def _split_weights(
    facts: ModelFacts, placement: Placement, n_devices: int, free: Sequence[int]
) -> WeightSplit:
    homes = homes_for(facts.n_layers, placement, n_devices, free)
    skipped = {layer.index for layer in facts.layers if layer.is_nextn}
    nextn_homes = tuple((i, homes[i]) for i in sorted(skipped))
    homes = tuple(SKIPPED if i in skipped else home for i, home in enumerate(homes))
    expert, other = [0] * n_devices, [0] * n_devices
    cpu_expert = cpu_other = 0
    moves: set[tuple[str, int]] = set()
    nextn_moves: set[tuple[str, int]] = set()
    overrides = placement.overrides
    known = _rule_targets(overrides)
    for tensor in facts.tensors:
        home = _home(tensor, homes, overrides, known)
        if home == SKIPPED:
            loaded = _rule_target(tensor.name, overrides, known)
            if loaded is not None and loaded != dict(nextn_homes).get(tensor.layer or -1):
                nextn_moves.add((tensor.name, loaded))
            continue
        is_expert = tensor.role is Role.EXPERTS
        nbytes = tensor.nbytes or 0
        if home == CPU:
            cpu_expert, cpu_other = (
                (cpu_expert + nbytes, cpu_other) if is_expert else (cpu_expert, cpu_other + nbytes)
            )
        elif is_expert:
            expert[home] += nbytes
        else:
            other[home] += nbytes
        if home != _default_home(tensor, homes):
            moves.add((tensor.name, home))
    return WeightSplit(
        device_expert_bytes=tuple(expert),
        device_other_bytes=tuple(other),
        cpu_expert_bytes=cpu_expert,
        cpu_other_bytes=cpu_other,
        homes=homes,
        moves=frozenset(moves),
        nextn_homes=nextn_homes,
        nextn_moves=frozenset(nextn_moves),
    )


def _default_home(tensor: TensorFacts, homes: Sequence[int]) -> int:
    """Where ``tensor`` is without overrides (``_home`` without rules)."""
    if tensor.role is Role.NEXTN:
        return SKIPPED
    if tensor.layer is not None:
        return homes[tensor.layer] if homes[tensor.layer] != SKIPPED else CPU
    # the output layer's tensors; the input layer (token_embd) and unknown globals: the CPU
    return homes[-1] if tensor.role in (Role.OUTPUT, Role.OUTPUT_NORM) else CPU
