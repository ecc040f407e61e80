"""The one check of a header (core/validate.py, gguf/, core/projector.py): a nonsense header
is a BAD_MODEL error naming the file, the key and the value, raised where the file is
opened; what llama.cpp accepts with a default is read with that default and a warning."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from gguf import GGUFValueType as VT

from moetune.core.devices import single_device
from moetune.core.facts import ModelFacts
from moetune.core.plan import PlanRequest, PlanResult, make_plan
from moetune.core.settings import Settings
from moetune.errors import ExitCode, GGUFFormatError, ProjectorError
from moetune.gguf.split import read_model
from moetune.jobs.loader import load_model_facts, load_projector

from support.badheaders import BASES, REFUSED, base_model, edited, write_refused
from support.factory import ModelFactory
from support.projector_factory import write_projector
from support.rawgguf import STR, U16, U32, RawGGUF, small_model

AT_LOAD = [name for name, case in REFUSED.items() if not case.at_plan]
AT_PLAN = [name for name, case in REFUSED.items() if case.at_plan]


def _plan(facts: ModelFacts) -> PlanResult:
    settings = Settings(n_ctx=4096)
    request = PlanRequest(
        model_path=facts.paths[0], devices=single_device(settings, 24 << 30), settings=settings
    )
    return make_plan(facts, request)


@pytest.mark.parametrize("name", AT_LOAD)
def test_a_nonsense_header_is_refused_where_it_is_opened(
    model_factory: ModelFactory, tmp_path: Path, name: str
) -> None:
    path = write_refused(model_factory, name, tmp_path / f"{name}.gguf")
    with pytest.raises(GGUFFormatError) as info:
        load_model_facts(path)
    assert info.value.exit_code is ExitCode.BAD_MODEL
    assert str(info.value).startswith(f"{name}.gguf: ")
    assert REFUSED[name].words in str(info.value)


@pytest.mark.parametrize("name", AT_PLAN)
def test_a_tensor_the_graph_needs_is_named_when_missing(
    model_factory: ModelFactory, tmp_path: Path, name: str
) -> None:
    facts = load_model_facts(write_refused(model_factory, name, tmp_path / f"{name}.gguf"))
    with pytest.raises(GGUFFormatError) as info:
        _plan(facts)
    assert str(info.value) == f"{name}.gguf: {REFUSED[name].words}"


@pytest.mark.parametrize("base", BASES)
def test_the_models_the_cases_edit_pass(
    model_factory: ModelFactory, tmp_path: Path, base: str
) -> None:
    """The check refuses the edits, not the models they edit (an unedited copy plans)."""
    facts = load_model_facts(edited(base_model(model_factory, base), tmp_path / "copy.gguf"))
    assert facts.warnings == []
    assert _plan(facts).fits


def test_a_context_length_of_0_is_unknown_with_a_warning(
    model_factory: ModelFactory, tmp_path: Path
) -> None:
    """llama.cpp loads it (n_ctx_train 0) and needs -c; moetune plans its default context."""
    path = edited(
        base_model(model_factory, "qwen3moe"),
        tmp_path / "ctx0.gguf",
        keys={"{arch}.context_length": (VT.UINT32, 0)},
    )
    facts = load_model_facts(path)
    assert facts.context_length is None
    assert facts.warnings == [
        "ctx0.gguf: qwen3moe.context_length is 0: the training context is unknown, and "
        "llama-server needs -c (moetune's commands give it)"
    ]
    result = _plan(facts)
    assert facts.warnings[0] in result.warnings
    assert "-c" in result.recommended.command


# --- the file: tensors in range, not overlapping, not in two shards -----------------------


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_overlapping_tensors_are_refused(tmp_path: Path) -> None:
    raw = small_model()
    raw.tensors[1] = ("blk.0.ffn_up_exps.weight", (32, 8, 4), 0, 352)  # token_embd ends at 384
    path = _write(tmp_path / "m.gguf", raw.build(data_bytes=4480))
    with pytest.raises(
        GGUFFormatError, match=r"'token_embd\.weight' .* 'blk\.0\.ffn_up_exps\.weight'.* overlap"
    ):
        load_model_facts(path)


def test_a_file_cut_inside_its_tensor_data_is_truncated(tmp_path: Path) -> None:
    """A file that ends where the data begins is header-only; one that holds part of the
    data is truncated (llama.cpp: "tensor data is not within the file bounds")."""
    raw = small_model()
    header_only = load_model_facts(_write(tmp_path / "h.gguf", raw.build(data_bytes=0)))
    assert header_only.header_only
    with pytest.raises(GGUFFormatError, match=r"c\.gguf is truncated: tensor 'blk\.0\.ffn_up_exps"):
        load_model_facts(_write(tmp_path / "c.gguf", raw.build(data_bytes=4000)))


def _shard(no: int, tensors: list[tuple[str, int]]) -> RawGGUF:
    raw = small_model() if no == 0 else RawGGUF()
    raw.tensors = [(name, (32,), 0, offset) for name, offset in tensors]
    raw.add("split.no", U16, no).add("split.count", U16, 2).add("split.tensors.count", U32, 3)
    return raw


def test_a_tensor_in_two_shards_is_refused(tmp_path: Path) -> None:
    first = _shard(0, [("token_embd.weight", 0), ("output_norm.weight", 128)])
    second = _shard(1, [("output_norm.weight", 0)])
    _write(tmp_path / "m-00002-of-00002.gguf", second.build(data_bytes=128))
    path = _write(tmp_path / "m-00001-of-00002.gguf", first.build(data_bytes=256))
    with pytest.raises(GGUFFormatError, match=r"'output_norm\.weight' is in two shards"):
        read_model(path)


def test_the_architecture_must_be_a_name(tmp_path: Path) -> None:
    raw = small_model()
    raw.kv = [(k, t, v) for k, t, v in raw.kv if k != "general.architecture"]
    with pytest.raises(GGUFFormatError, match=r"general\.architecture is missing"):
        load_model_facts(_write(tmp_path / "m.gguf", raw.build(data_bytes=4480)))
    raw.kv.insert(0, ("general.architecture", STR, ""))
    with pytest.raises(GGUFFormatError, match=r"general\.architecture is ''"):
        load_model_facts(_write(tmp_path / "m.gguf", raw.build(data_bytes=4480)))


# --- projectors: clip.cpp's sanity checks ----------------------------------------------------

PROJECTOR_REFUSED = {
    "patch-size-0": ("clip.vision.patch_size", (VT.UINT32, 0), "clip.vision.patch_size is 0"),
    "head-count-0": (
        "clip.vision.attention.head_count",
        (VT.UINT32, 0),
        "clip.vision.attention.head_count is 0",
    ),
    "merge-0": (
        "clip.vision.projector.scale_factor",
        (VT.UINT32, 0),
        "clip.vision.projector.scale_factor is 0",
    ),
    "image-size-huge": (
        "clip.vision.image_size",
        (VT.UINT32, 9000),
        "clip.vision.image_size is 9000 (0 to 8192)",
    ),
    "embedding-nan": (
        "clip.vision.embedding_length",
        (VT.FLOAT32, math.nan),
        "clip.vision.embedding_length is nan (must be a whole number)",
    ),
    "blocks-beyond-tensors": (
        "clip.vision.block_count",
        (VT.UINT32, 1 << 30),
        f"clip.vision.block_count is {1 << 30} (the file has",
    ),
    "eps-inf": (
        "clip.vision.attention.layer_norm_epsilon",
        (VT.FLOAT32, math.inf),
        "clip.vision.attention.layer_norm_epsilon is inf",
    ),
}


@pytest.mark.parametrize("name", PROJECTOR_REFUSED)
def test_a_nonsense_projector_is_refused(
    model_factory: ModelFactory, tmp_path: Path, name: str
) -> None:
    base = model_factory.written("mmproj-gemma3", write_projector)
    key, value, words = PROJECTOR_REFUSED[name]
    path = edited(base, tmp_path / "mmproj.gguf", keys={key: value})
    with pytest.raises(ProjectorError) as info:
        load_projector(path)
    assert str(info.value).startswith(f"mmproj.gguf: {words}")
