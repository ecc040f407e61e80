"""The header-only reader on hand-built and GGUFWriter-written headers."""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from moetune.errors import GGUFFormatError, ModelFileError, UnsupportedModelError
from moetune.gguf import SkippedArray, read_header, read_model
from moetune.gguf.reader import read_header_bytes, read_header_prefix
from moetune.jobs.loader import load_model_facts

from support.rawgguf import ARR, BOOL, STR, U32, U64, RawGGUF, small_model

BIG = 1 << 60


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_reads_metadata_and_tensor_infos(tmp_path: Path) -> None:
    header = read_header(write(tmp_path / "m.gguf", small_model().build(data_bytes=4480)))
    assert header.version == 3
    assert header.metadata["general.architecture"] == "qwen3moe"
    assert header.metadata["qwen3moe.block_count"] == 1
    assert header.metadata["qwen3moe.swa_layers"] == [True, False]
    assert header.metadata["tokenizer.ggml.tokens"] == SkippedArray("STRING", 3)
    assert header.metadata["tokenizer.ggml.scores"] == SkippedArray("FLOAT32", 3)
    embd, experts = header.tensors
    assert (embd.name, embd.shape, embd.type_name, embd.nbytes) == (
        "token_embd.weight",
        (32, 3),
        "F32",
        384,
    )
    assert (experts.offset, experts.nbytes) == (384, 4096)
    assert header.data_offset % 32 == 0
    assert header.data_offset >= len(small_model().header())
    assert header.has_tensor_data


def test_header_only_file_is_recognised(tmp_path: Path) -> None:
    path = write(tmp_path / "h.gguf", small_model().build(data_bytes=0))
    assert not read_header(path).has_tensor_data
    facts = load_model_facts(path)
    assert facts.header_only
    assert facts.total_bytes == 4480


def test_version_2_is_read_version_1_refused() -> None:
    assert read_header_bytes(small_model(version=2).build()).version == 2
    with pytest.raises(UnsupportedModelError, match="version 1"):
        read_header_bytes(small_model(version=1).build())
    with pytest.raises(GGUFFormatError, match="unknown GGUF version 7"):
        read_header_bytes(small_model(version=7).build())


def test_big_endian_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "be.gguf"
    writer = gguf.GGUFWriter(path, "qwen3moe", endianess=gguf.GGUFEndian.BIG)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match="big-endian"):
        read_header(path)


def test_unknown_ggml_type_has_unknown_size(tmp_path: Path) -> None:
    raw = small_model()
    raw.tensor("blk.0.ffn_down_exps.weight", (32, 8, 4), 200, 4480)
    path = write(tmp_path / "u.gguf", raw.build(data_bytes=4480))
    tensor = read_header(path).tensors[-1]
    assert tensor.nbytes is None
    assert tensor.type_name == "TYPE_200"
    facts = load_model_facts(path)
    assert facts.unknown_size_tensors == 1
    assert facts.total_bytes == 4480


def test_alignment_is_honoured(tmp_path: Path) -> None:
    path = tmp_path / "a.gguf"
    writer = gguf.GGUFWriter(path, "qwen3moe")
    writer.add_custom_alignment(256)
    writer.add_tensor("token_embd.weight", np.zeros((3, 32), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.zeros((32,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    header = read_header(path)
    reference = gguf.GGUFReader(path)
    assert header.alignment == 256
    assert header.data_offset == reference.data_offset
    assert header.data_offset % 256 == 0
    assert [header.data_offset + t.offset for t in header.tensors] == [
        t.data_offset for t in reference.tensors
    ]


@pytest.mark.parametrize("alignment", [0, 3, 48])
def test_bad_alignment_is_refused(alignment: int) -> None:
    raw = small_model().add("general.alignment", U32, alignment)
    with pytest.raises(GGUFFormatError, match="power of two"):
        read_header_bytes(raw.build())


def _huge_string() -> bytes:
    head = RawGGUF(n_kv=1).header()
    return head + struct.pack("<Q", BIG) + b"x" * 16


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(RawGGUF(n_tensors=BIG).header(), id="tensor-count"),
        pytest.param(RawGGUF(n_kv=BIG).header(), id="kv-count"),
        pytest.param(
            RawGGUF(n_kv=1).header()
            + struct.pack("<Q", 3)
            + b"key"
            + struct.pack("<IIQ", ARR, U64, BIG),
            id="array-length",
        ),
        pytest.param(
            RawGGUF(n_kv=1).header()
            + struct.pack("<Q", 3)
            + b"key"
            + struct.pack("<IIQ", ARR, STR, BIG),
            id="string-array-length",
        ),
        pytest.param(_huge_string(), id="string-length"),
    ],
)
def test_absurd_counts_fail_fast_without_allocating(data: bytes) -> None:
    with pytest.raises(GGUFFormatError):
        read_header_bytes(data + b"\0" * 64)


def test_every_truncation_is_a_format_error() -> None:
    full = small_model().header()
    for end in range(len(full)):
        with pytest.raises(GGUFFormatError):
            read_header_bytes(full[:end])


def test_deeply_nested_arrays_are_refused() -> None:
    value: tuple[int, tuple[object, ...]] = (BOOL, (True,))
    for _ in range(20):
        value = (ARR, (value,))
    with pytest.raises(GGUFFormatError, match="nests arrays"):
        read_header_bytes(RawGGUF().add("deep", ARR, value).build())


def test_row_not_multiple_of_block_size_is_refused() -> None:
    raw = RawGGUF().tensor("blk.0.ffn_up_exps.weight", (33, 4), 8, 0)  # Q8_0, block 32
    with pytest.raises(GGUFFormatError, match="block size"):
        read_header_bytes(raw.build())


def test_duplicate_tensor_names_are_refused() -> None:
    raw = RawGGUF().tensor("a.weight", (32,), 0, 0).tensor("a.weight", (32,), 0, 128)
    with pytest.raises(GGUFFormatError, match="duplicate"):
        read_header_bytes(raw.build())


def test_path_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="no such file"):
        read_model(tmp_path / "missing.gguf")
    with pytest.raises(ModelFileError, match="directory"):
        read_model(tmp_path)
    with pytest.raises(GGUFFormatError, match="empty"):
        read_model(write(tmp_path / "empty.gguf", b""))
    with pytest.raises(GGUFFormatError, match="not a GGUF file"):
        read_model(write(tmp_path / "text.gguf", b"hello world, not a model\n"))


def test_large_vocabulary_is_skipped_not_decoded(tmp_path: Path) -> None:
    tokens = tuple(f"tok{i}" for i in range(50_000))
    raw = small_model().add("tokenizer.ggml.merges", ARR, (STR, tokens))
    header = read_header_bytes(raw.build())
    assert header.metadata["tokenizer.ggml.merges"] == SkippedArray("STRING", 50_000)
    assert header.tensors[1].name == "blk.0.ffn_up_exps.weight"


def test_a_second_parse_jumps_over_the_arrays_the_first_walked() -> None:
    tokens = tuple(f"tok{i}" for i in range(5_000))
    data = small_model().add("tokenizer.ggml.merges", ARR, (STR, tokens)).build()
    first = read_header_bytes(data)
    (start, count, end), *_ = [s for s in first.skips if s[1] == 5_000]
    assert end - start == sum(8 + len(t) for t in tokens)
    assert read_header_prefix(data, len(data), "<bytes>", first.skips) == first
    # a skip that does not fit these bytes (another count, past the end) is walked instead
    for wrong in ((start, count + 1, end), (start, count, len(data) + 1)):
        assert read_header_prefix(data, len(data), "<bytes>", [wrong]) == first


def test_ggml_type_table_matches_gguf_py() -> None:
    """moetune's own table of ggml types (so the reader needs no numpy) is gguf-py's."""
    from moetune.gguf.types import GGML_TYPES, ggml_type

    expected = {int(t): (t.name, *gguf.GGML_QUANT_SIZES[t]) for t in gguf.GGML_QUANT_SIZES}
    assert expected == GGML_TYPES
    assert ggml_type(999).known is False and ggml_type(999).name == "TYPE_999"


def test_metadata_keys_match_gguf_py() -> None:
    from moetune.gguf import keys

    assert (keys.ALIGNMENT, keys.ARCHITECTURE, keys.NAME) == (
        gguf.Keys.General.ALIGNMENT,
        gguf.Keys.General.ARCHITECTURE,
        gguf.Keys.General.NAME,
    )
    split = gguf.Keys.Split
    assert (keys.SPLIT_NO, keys.SPLIT_COUNT, keys.SPLIT_TENSORS_COUNT) == (
        split.LLM_KV_SPLIT_NO,
        split.LLM_KV_SPLIT_COUNT,
        split.LLM_KV_SPLIT_TENSORS_COUNT,
    )
    llm = gguf.Keys.LLM
    for ours, theirs in (
        (keys.BLOCK_COUNT, llm.BLOCK_COUNT),
        (keys.EXPERT_COUNT, llm.EXPERT_COUNT),
        (keys.EXPERT_USED_COUNT, llm.EXPERT_USED_COUNT),
        (keys.EXPERT_SHARED_COUNT, llm.EXPERT_SHARED_COUNT),
        (keys.CONTEXT_LENGTH, llm.CONTEXT_LENGTH),
        (keys.NEXTN_PREDICT_LAYERS, llm.NEXTN_PREDICT_LAYERS),
    ):
        assert theirs == "{arch}." + ours
