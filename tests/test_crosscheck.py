"""moetune's reader against gguf.GGUFReader and against the buffers llama-server allocates."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gguf
import pytest
from typer.testing import CliRunner

from moetune.cli import app
from moetune.errors import ExitCode
from moetune.gguf import read_model
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from factory import EXPERT_TYPES, MOE_ARCHS, make_split, write_model
from llama import CPU_PLAIN, running_server

VARIANTS = [("qwen3", "F16")] + [(a, t) for a in MOE_ARCHS for t in EXPERT_TYPES]
EXPERT_NAME = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.")


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("variants")
    return {(a, t): write_model(root / f"{a}-{t}.gguf", a, expert_type=t) for a, t in VARIANTS}


@pytest.mark.parametrize(("arch", "expert_type"), VARIANTS)
def test_tensor_infos_equal_ggufreader(
    variants: dict[tuple[str, str], Path], arch: str, expert_type: str
) -> None:
    path = variants[arch, expert_type]
    ours = read_model(path)
    reference = gguf.GGUFReader(path)
    shard = ours.shards[0]
    assert shard.data_offset == reference.data_offset
    assert [
        (t.name, list(t.shape), t.type_name, shard.data_offset + t.offset, t.nbytes)
        for t in ours.tensors
    ] == [
        (t.name, [int(d) for d in t.shape], t.tensor_type.name, t.data_offset, t.n_bytes)
        for t in reference.tensors
    ]


@pytest.mark.parametrize(("arch", "expert_type"), VARIANTS)
def test_inspect_json_matches_an_independent_count(
    variants: dict[tuple[str, str], Path], arch: str, expert_type: str
) -> None:
    path = variants[arch, expert_type]
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


@pytest.mark.server
@pytest.mark.parametrize(("arch", "expert_type"), [v for v in VARIANTS if v[1] != "Q8_0"])
def test_total_equals_llama_server_model_buffers(
    variants: dict[tuple[str, str], Path], arch: str, expert_type: str
) -> None:
    """Without mmap, the model buffers llama-server allocates sum to exactly our total."""
    path = variants[arch, expert_type]
    with running_server(path, "--load-mode", "none", "-c", "512", *CPU_PLAIN) as server:
        buffers = parse_buffers(server.log_text())
    printed = total_mib(buffers, "model")
    assert printed > 0
    facts = load_model_facts(path)
    n_model_buffers = sum(b.kind == "model" for b in buffers)
    assert abs(facts.total_bytes / MIB - printed) <= 0.005 * n_model_buffers + 1e-9


@pytest.mark.server
def test_split_model_reads_as_one(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    shards = make_split(tiny_models["glm4moe"], tmp_path / "glm", max_tensors=20)
    assert len(shards) >= 2
    whole = load_model_facts(tiny_models["glm4moe"])
    for shard in (shards[0], shards[-1]):
        split = load_model_facts(shard)
        assert split.paths == [str(p) for p in shards]
        assert [t.name for t in split.tensors] == [t.name for t in whole.tensors]
        assert split.total_bytes == whole.total_bytes
        assert split.layers == whole.layers
    shards[1].unlink()
    result = CliRunner().invoke(app, ["inspect", str(shards[0])])
    assert result.exit_code == ExitCode.FILE_NOT_FOUND
    assert "missing shard" in result.output
