"""Where each tensor lives, decided exactly as llama.cpp build 11434 decides it.

- ``-ngl K`` (src/llama-model.cpp ``load_tensors``): ``i_gpu_start = max(n_layer_all + 1 - K, 0)``;
  block ``il`` is on the GPU iff ``il >= i_gpu_start``; the output layer (``output``,
  ``output_norm``) counts as index ``n_layer_all``, so it is on the GPU whenever ``K >= 1``;
  the input layer (``token_embd``) always stays on the CPU.
- ``-ot REGEX=BUFT`` (src/llama-model-loader.cpp): ``std::regex_search`` on the full tensor
  name, rules in order, the first match wins. ``--n-cpu-moe N`` appends
  ``blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`` for i = 0..N-1 (common/common.h), so
  an ``-ot`` given before it wins. ``--cpu-moe`` appends the same rule without a block index.
- NextN/MTP blocks are skipped at load (TENSOR_SKIP) unless MTP is asked for: nowhere.
"""

from __future__ import annotations

import re
from enum import Enum
from functools import lru_cache
from typing import NamedTuple

from moetune.core.facts import ModelFacts, TensorFacts
from moetune.gguf.roles import Role

EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # common/common.h LLM_FFN_EXPS_REGEX
ALL_LAYERS = 999  # what "-ngl 99"/"all" means for any model moetune will meet


class Device(str, Enum):
    GPU = "gpu"
    CPU = "cpu"
    NONE = "none"  # not loaded (NextN/MTP blocks)


class Override(NamedTuple):
    """One ``-ot PATTERN=BUFT`` rule; moetune only ever overrides to the CPU."""

    pattern: str
    device: Device = Device.CPU

    @property
    def arg(self) -> str:
        return f"{self.pattern}={'CPU' if self.device is Device.CPU else 'CUDA0'}"


class Placement(NamedTuple):
    """``-ngl`` plus override rules in the order llama.cpp will see them."""

    n_gpu_layers: int = ALL_LAYERS
    overrides: tuple[Override, ...] = ()
    n_cpu_moe: int | None = None  # set when the rules came from --n-cpu-moe N

    @classmethod
    def with_n_cpu_moe(cls, n: int, n_gpu_layers: int = ALL_LAYERS) -> Placement:
        rules = tuple(Override(f"blk\\.{i}{EXPS_REGEX}") for i in range(n))
        return cls(n_gpu_layers, rules, n_cpu_moe=n)

    @classmethod
    def all_experts_on_cpu(cls, n_gpu_layers: int = ALL_LAYERS) -> Placement:
        return cls(n_gpu_layers, (Override(EXPS_REGEX),))


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def layer_on_gpu(layer: int | None, n_layer_all: int, n_gpu_layers: int) -> bool:
    """Is block ``layer`` (None = output layer) on the GPU under ``-ngl n_gpu_layers``?"""
    i_gpu_start = max(n_layer_all + 1 - n_gpu_layers, 0)
    index = n_layer_all if layer is None else layer
    return index >= i_gpu_start


def tensor_device(tensor: TensorFacts, n_layer_all: int, placement: Placement) -> Device:
    if tensor.role is Role.NEXTN:
        return Device.NONE
    for rule in placement.overrides:
        if _compiled(rule.pattern).search(tensor.name):
            return rule.device
    if tensor.layer is not None:
        on_gpu = layer_on_gpu(tensor.layer, n_layer_all, placement.n_gpu_layers)
    elif tensor.role in (Role.OUTPUT, Role.OUTPUT_NORM):
        on_gpu = layer_on_gpu(None, n_layer_all, placement.n_gpu_layers)
    else:  # input layer (token_embd) and unknown global tensors
        on_gpu = False
    return Device.GPU if on_gpu else Device.CPU


class WeightSplit(NamedTuple):
    """Weight bytes per device, experts and everything else apart."""

    gpu_expert_bytes: int
    gpu_other_bytes: int
    cpu_expert_bytes: int
    cpu_other_bytes: int
    gpu_layers: tuple[int, ...]  # blocks whose (non-override) home is the GPU
    cpu_expert_layers: tuple[int, ...]  # blocks with at least one expert tensor on the CPU
    output_on_gpu: bool

    @property
    def gpu_bytes(self) -> int:
        return self.gpu_expert_bytes + self.gpu_other_bytes

    @property
    def cpu_bytes(self) -> int:
        return self.cpu_expert_bytes + self.cpu_other_bytes


def split_weights(facts: ModelFacts, placement: Placement) -> WeightSplit:
    sums = {(d, e): 0 for d in (Device.GPU, Device.CPU) for e in (True, False)}
    cpu_expert_layers: set[int] = set()
    for tensor in facts.tensors:
        device = tensor_device(tensor, facts.n_layers, placement)
        if device is Device.NONE:
            continue
        is_expert = tensor.role is Role.EXPERTS
        sums[device, is_expert] += tensor.nbytes or 0
        if is_expert and device is Device.CPU and tensor.layer is not None:
            cpu_expert_layers.add(tensor.layer)
    gpu_layers = tuple(
        layer.index
        for layer in facts.layers
        if not layer.is_nextn and layer_on_gpu(layer.index, facts.n_layers, placement.n_gpu_layers)
    )
    return WeightSplit(
        gpu_expert_bytes=sums[Device.GPU, True],
        gpu_other_bytes=sums[Device.GPU, False],
        cpu_expert_bytes=sums[Device.CPU, True],
        cpu_other_bytes=sums[Device.CPU, False],
        gpu_layers=gpu_layers,
        cpu_expert_layers=tuple(sorted(cpu_expert_layers)),
        output_on_gpu=layer_on_gpu(None, facts.n_layers, placement.n_gpu_layers),
    )
