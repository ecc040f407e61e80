"""Tensor placement follows llama.cpp's rules: -ngl, -ot first-match-wins, --n-cpu-moe."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from moetune.core.facts import ModelFacts
from moetune.core.placement import (
    ALL_LAYERS,
    CPU,
    Override,
    Placement,
    TensorDevice,
    layer_on_gpu,
    split_weights,
    tensor_device,
)
from moetune.core.planner import layer_set_regex, n_cpu_moe_split, ot_rules
from moetune.gguf.roles import Role
from moetune.jobs.loader import load_model_facts

from support.factory import ARCHS
from support.helpers import EXAMPLES


@pytest.fixture(scope="module")
def all_facts(tiny_models: dict[str, Path]) -> list[ModelFacts]:
    facts = [load_model_facts(tiny_models[arch]) for arch in ARCHS]
    return facts + [load_model_facts(p) for p in sorted(EXAMPLES.glob("*.gguf"))]


def test_ngl_semantics_of_build_11434() -> None:
    # i_gpu_start = max(n_layer_all + 1 - ngl, 0); the output layer is index n_layer_all.
    assert layer_on_gpu(None, 48, 1) and not layer_on_gpu(47, 48, 1)
    assert layer_on_gpu(1, 48, 48) and not layer_on_gpu(0, 48, 48)
    assert all(layer_on_gpu(i, 48, 49) for i in range(48))
    assert not layer_on_gpu(None, 48, 0)


def test_fast_n_cpu_moe_split_equals_the_regex_rules(all_facts: list[ModelFacts]) -> None:
    for facts in all_facts:
        base = split_weights(facts, Placement())
        for n in range(facts.n_layers + 2):
            assert n_cpu_moe_split(facts, base, n) == split_weights(
                facts, Placement.with_n_cpu_moe(n)
            ), (facts.architecture, n)


def test_n_cpu_moe_counts_leading_dense_blocks(all_facts: list[ModelFacts]) -> None:
    glm = next(f for f in all_facts if f.architecture == "glm4moe")
    assert glm.n_leading_dense == 1
    base = split_weights(glm, Placement())
    # N=1 only covers the dense block 0: nothing moves.
    assert n_cpu_moe_split(glm, base, 1).cpu_expert_bytes == 0
    assert n_cpu_moe_split(glm, base, 2).cpu_expert_bytes == glm.layers[1].expert_bytes


def test_everything_but_token_embd_on_gpu_with_ngl_all(all_facts: list[ModelFacts]) -> None:
    for facts in all_facts:
        for tensor in facts.tensors:
            device = tensor_device(tensor, facts.n_layers, Placement())
            expected = TensorDevice.CPU if tensor.role is Role.TOKEN_EMBD else TensorDevice.GPU
            if tensor.role is Role.NEXTN:
                expected = TensorDevice.NONE
            assert device is expected, tensor.name


def test_first_matching_rule_wins(all_facts: list[ModelFacts]) -> None:
    facts = all_facts[0]
    tensor = next(t for t in facts.tensors if t.name == "blk.1.ffn_up_exps.weight")
    to_gpu = Override(r"blk\.1\.ffn_up", 0)  # to device 0
    to_cpu = Override(r"ffn_.*_exps", CPU)
    assert (
        tensor_device(tensor, facts.n_layers, Placement(ALL_LAYERS, (to_gpu, to_cpu)))
        is TensorDevice.GPU
    )
    assert (
        tensor_device(tensor, facts.n_layers, Placement(ALL_LAYERS, (to_cpu, to_gpu)))
        is TensorDevice.CPU
    )


def test_layer_set_regex_matches_exactly() -> None:
    rng = random.Random(7)
    for _ in range(300):
        chosen = set(rng.sample(range(120), rng.randint(1, 40)))
        regex = re.compile(rf"blk\.{layer_set_regex(sorted(chosen))}\.ffn")
        assert "," not in regex.pattern  # -ot splits its argument on commas
        for index in range(150):
            assert bool(regex.search(f"blk.{index}.ffn_up_exps.weight")) == (index in chosen)


def test_ot_rules_split_the_boundary_block(all_facts: list[ModelFacts]) -> None:
    facts = all_facts[0]
    rules = ot_rules([3, 2], 1, ("gate", "down"))
    split = split_weights(facts, Placement(overrides=rules))
    parts = {
        (t.layer, t.expert_part): tensor_device(t, facts.n_layers, Placement(overrides=rules))
        for t in facts.tensors
        if t.role is Role.EXPERTS
    }
    assert parts[1, "up"] is TensorDevice.GPU
    assert parts[1, "gate"] is TensorDevice.CPU and parts[1, "down"] is TensorDevice.CPU
    assert parts[0, "down"] is TensorDevice.GPU and parts[3, "up"] is TensorDevice.CPU
    assert split.cpu_expert_layers == (1, 2, 3)
