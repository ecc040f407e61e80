"""`moetune inspect --json` against an independent count of the tensors with gguf.GGUFReader."""

from __future__ import annotations

import json
import re

import gguf
import pytest
from typer.testing import CliRunner

from moetune.cli import app

from support.factory import VARIANTS, ModelFactory

EXPERT_NAME = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.")


@pytest.mark.parametrize(("arch", "expert_type"), VARIANTS)
def test_inspect_json_matches_an_independent_count(
    model_factory: ModelFactory, arch: str, expert_type: str
) -> None:
    path = model_factory(arch, expert_type=expert_type)
    result = CliRunner().invoke(app, ["inspect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    reference = gguf.GGUFReader(path)
    expert_by_layer: dict[int, int] = {}
    for tensor in reference.tensors:
        match = EXPERT_NAME.match(tensor.name)
        if match:
            layer = int(match[1])
            expert_by_layer[layer] = expert_by_layer.get(layer, 0) + int(tensor.n_bytes)
    total = sum(int(t.n_bytes) for t in reference.tensors)
    assert data["schema_version"] == 1
    assert data["architecture"] == arch
    assert data["n_layers"] == reference.fields[f"{arch}.block_count"].contents()
    assert data["total_bytes"] == total
    assert data["expert_bytes"] == sum(expert_by_layer.values())
    for layer in data["layers"]:
        expected = expert_by_layer.get(layer["index"], 0)
        assert layer["expert_bytes"] == expected
        assert layer["has_experts"] == (expected > 0)
        assert sum(layer["bytes_by_role"].values()) == expected + layer["non_expert_bytes"]
    if arch == "qwen3":
        assert data["n_experts"] == 0 and data["expert_bytes"] == 0
    else:
        assert data["n_experts"] == 8 and data["n_experts_used"] == 2
    if arch in ("deepseek2", "glm4moe"):
        assert data["n_leading_dense"] == 1
        assert data["n_experts_shared"] >= 1
