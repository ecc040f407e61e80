"""The projector (mmproj) memory model on its own: header facts, the warm-up graph and its
caps, unmodelled types (server/test_projector.py holds it to clip's own log lines)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from moetune.core.projector import projector_compute
from moetune.errors import GGUFFormatError, ProjectorError
from moetune.jobs.loader import load_projector
from moetune.units import MIB

from support.extras import TEXT_WIDTH, projector_files
from support.factory import ModelFactory


@pytest.fixture(scope="module")
def files(model_factory: ModelFactory) -> dict[str, Path]:
    return projector_files(model_factory)


# --- header facts ---------------------------------------------------------------------------


def test_facts(files: dict[str, Path]) -> None:
    p = load_projector(files["gemma3"])
    assert p.projector_types == ("gemma3",) and p.has_vision and not p.has_audio
    assert p.n_embd_out == TEXT_WIDTH and p.image_size == 224 and p.patch_size == 14
    assert p.hparams.n_embd == 64 and p.hparams.n_merge == 4
    assert p.weights_bytes == sum(t.nbytes or 0 for t in p.tensors) > 0
    q = load_projector(files["qwen3vl"])
    assert q.n_deepstack_layers == 1 and q.n_embd_out == TEXT_WIDTH  # 128 x (1 + 1)


def test_text_model_is_not_a_projector(files: dict[str, Path]) -> None:
    with pytest.raises(ProjectorError, match=r"not a projector .*'qwen3moe', expected 'clip'"):
        load_projector(files["text"])


def test_truncated_projector(files: dict[str, Path], tmp_path: Path) -> None:
    data = files["gemma3"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 1000])
    with pytest.raises(GGUFFormatError, match="truncated"):
        load_projector(cut)
    cut.write_bytes(data[:200])
    with pytest.raises(GGUFFormatError):
        load_projector(cut)


def test_warmup_and_caps(files: dict[str, Path]) -> None:
    q = load_projector(files["qwen3vl"])
    assert projector_compute(q, kind="cpu").warmup == "1472x1472 image, 8464 patches"
    small = projector_compute(q, kind="rpc", image_max_tokens=256)
    assert small.warmup == "512x512 image, 1024 patches" and small.exact
    no_fa = projector_compute(q, kind="rpc", flash_attn=False, image_max_tokens=256)
    assert no_fa.device_bytes > small.device_bytes + 8 * MIB  # KQ = 1024^2 x 4 heads x 4 B
    g = load_projector(files["gemma3"])  # non-causal: llama-server caps it to n_ubatch
    assert projector_compute(g, kind="cpu", n_ubatch=64).warmup.startswith("224x224")


def test_unmodelled_type_is_an_estimate(files: dict[str, Path]) -> None:
    p = load_projector(files["gemma3"])
    assert p.vision is not None
    other = replace(p, vision=replace(p.vision, projector_type="pixtral"))
    estimate = projector_compute(other, kind="rpc")
    assert not estimate.exact and estimate.device_bytes > 0 and estimate.host_bytes > 0
    with pytest.raises(ValueError, match="kind"):
        projector_compute(p, kind="metal")
