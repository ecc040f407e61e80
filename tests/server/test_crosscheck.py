"""moetune's reader against the buffers llama-server allocates, and a split model (by
llama-gguf-split) read as one."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from moetune.cli import app
from moetune.errors import ExitCode
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from support.factory import VARIANTS, ModelFactory, make_split
from support.llama import CPU_PLAIN, running_server


@pytest.mark.parametrize(("arch", "expert_type"), [v for v in VARIANTS if v[1] != "Q8_0"])
def test_total_equals_llama_server_model_buffers(
    model_factory: ModelFactory, arch: str, expert_type: str
) -> None:
    """Without mmap, the model buffers llama-server allocates sum to exactly our total."""
    path = model_factory(arch, expert_type=expert_type)
    with running_server(path, "--load-mode", "none", "-c", "512", *CPU_PLAIN) as server:
        buffers = parse_buffers(server.log_text())
    printed = total_mib(buffers, "model")
    assert printed > 0
    facts = load_model_facts(path)
    n_model_buffers = sum(b.kind == "model" for b in buffers)
    assert abs(facts.total_bytes / MIB - printed) <= 0.005 * n_model_buffers + 1e-9


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
