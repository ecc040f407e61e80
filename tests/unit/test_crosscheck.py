"""moetune's reader against gguf.GGUFReader: the same tensor infos on every fixture."""

from __future__ import annotations

import gguf
import pytest

from moetune.gguf import read_model

from support.factory import VARIANTS, ModelFactory


@pytest.mark.parametrize(("arch", "expert_type"), VARIANTS)
def test_tensor_infos_equal_ggufreader(
    model_factory: ModelFactory, arch: str, expert_type: str
) -> None:
    path = model_factory(arch, expert_type=expert_type)
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
