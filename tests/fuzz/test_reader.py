"""Mutated header bytes straight into the reader and the model summary (seeded): only
moetune's own errors may escape."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moetune.core.facts import facts_from_gguf
from moetune.errors import MoetuneError
from moetune.gguf.reader import read_header_bytes
from moetune.gguf.split import GGUFModel

from support.rawgguf import ARR, F32, STR, U32, small_model


def _seed() -> bytes:
    raw = small_model()
    raw.add("qwen3moe.attention.head_count_kv", ARR, (U32, (4,)))
    raw.add("tokenizer.ggml.merges", ARR, (STR, ("a b", "ab c")))
    raw.add("qwen3moe.attention.layer_norm_rms_epsilon", F32, 1e-6)
    raw.tensor("blk.0.ffn_down_exps.weight", (32, 8, 4), 8, 4480)  # Q8_0
    raw.tensor("output_norm.weight", (32,), 0, 4480 + 1088)
    return raw.build(data_bytes=4480 + 1088 + 128)


SEED = _seed()

mutation = st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255))


def _mutate(
    edits: list[tuple[int, int]], cut: int | None, insert: tuple[int, bytes] | None
) -> bytes:
    data = bytearray(SEED)
    for pos, byte in edits:
        data[pos] = byte
    if insert is not None:
        pos, blob = insert
        data[pos:pos] = blob
    if cut is not None:
        del data[cut:]
    return bytes(data)


@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(
    edits=st.lists(mutation, min_size=1, max_size=8),
    cut=st.none() | st.integers(0, len(SEED)),
    insert=st.none() | st.tuples(st.integers(0, len(SEED)), st.binary(min_size=1, max_size=16)),
)
def test_mutated_headers_raise_only_moetune_errors(
    edits: list[tuple[int, int]], cut: int | None, insert: tuple[int, bytes] | None
) -> None:
    data = _mutate(edits, cut, insert)
    try:
        header = read_header_bytes(data, "fuzz.gguf")
        facts_from_gguf(GGUFModel((header,), header.tensors))
    except MoetuneError:
        pass


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(max_size=256))
def test_random_bytes_after_magic(tail: bytes) -> None:
    try:
        header = read_header_bytes(b"GGUF" + tail, "fuzz.gguf")
        facts_from_gguf(GGUFModel((header,), header.tensors))
    except MoetuneError:
        pass
