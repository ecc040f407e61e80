"""The committed header-only examples are what their script writes, and read as expected."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from moetune.gguf import SkippedArray, read_model
from moetune.jobs.loader import load_model_facts
from moetune.units import GIB

from support.helpers import EXAMPLES


def test_script_reproduces_the_committed_files(tmp_path: Path) -> None:
    script = tmp_path / "make_header_only.py"
    script.write_bytes((EXAMPLES / "make_header_only.py").read_bytes())
    subprocess.run([sys.executable, str(script)], check=True, capture_output=True, timeout=120)
    written = sorted(p.name for p in tmp_path.glob("*.gguf"))
    assert written == sorted(p.name for p in EXAMPLES.glob("*.gguf"))
    for name in written:
        assert (tmp_path / name).read_bytes() == (EXAMPLES / name).read_bytes(), name


@pytest.mark.parametrize(
    ("name", "arch", "layers", "experts", "used", "total_gib", "expert_share"),
    [
        # Public file sizes: Qwen3-30B-A3B Q4_K_M 18.6 GB, gpt-oss-120b MXFP4 63.4 GB;
        # gpt-oss-20b MXFP4 "11.27 GiB | 20.91 B" in llama-bench's table
        # (https://github.com/ggml-org/llama.cpp/pull/16991, RTX PRO 6000 rows).
        ("Qwen3-30B-A3B-Q4_K_M.header.gguf", "qwen3moe", 48, 128, 8, 17.28, 0.9),
        ("gpt-oss-120b-MXFP4.header.gguf", "gpt-oss", 36, 128, 4, 59.02, 0.9),
        ("gpt-oss-20b-MXFP4.header.gguf", "gpt-oss", 24, 32, 4, 11.27, 0.8),
    ],
)
def test_examples_read(
    name: str,
    arch: str,
    layers: int,
    experts: int,
    used: int,
    total_gib: float,
    expert_share: float,
) -> None:
    facts = load_model_facts(EXAMPLES / name)
    assert facts.header_only
    assert facts.file_bytes < 1 << 20
    assert (facts.architecture, facts.n_layers, facts.n_experts, facts.n_experts_used) == (
        arch,
        layers,
        experts,
        used,
    )
    assert round(facts.total_bytes / GIB, 2) == total_gib
    assert all(layer.has_experts for layer in facts.layers)
    assert facts.expert_bytes > expert_share * facts.total_bytes


# llama-bench -o csv's model_size (bytes) and model_n_params of the public files, as posted in
# chrisdesrochers/MoEArc's logs (the same figures as benchmarks/data/public_sweeps/moearc-*):
# https://github.com/chrisdesrochers/MoEArc/blob/48f1e4920cf8ce5c4d7da98067c2a066277cb02d/bench/results/tuning/qwen30-ncmoe.txt
# https://github.com/chrisdesrochers/MoEArc/blob/48f1e4920cf8ce5c4d7da98067c2a066277cb02d/bench/results/tuning/oss120-ncmoe.txt
# https://github.com/chrisdesrochers/MoEArc/blob/48f1e4920cf8ce5c4d7da98067c2a066277cb02d/bench/results/tuning/oss20-ncmoe-hi.txt
@pytest.mark.parametrize(
    ("name", "model_size", "n_params"),
    [
        ("Qwen3-30B-A3B-Q4_K_M.header.gguf", 18550716416, 30532122624),
        ("gpt-oss-120b-MXFP4.header.gguf", 63374323968, 116829156672),
        ("gpt-oss-20b-MXFP4.header.gguf", 12096558336, 20914757184),
    ],
)
def test_examples_match_the_public_files(name: str, model_size: int, n_params: int) -> None:
    """Every tensor's bytes and elements, summed, are what llama-bench printed for the real
    file: the shapes and the llama-quantize types of the header are the file's."""
    model = read_model(EXAMPLES / name)
    assert sum(t.nbytes or 0 for t in model.tensors) == model_size
    assert sum(math.prod(t.shape) for t in model.tensors) == n_params


def test_full_vocabulary_header(header_only_big: Path) -> None:
    """The benchmark's header: full vocabulary skipped, not decoded; same weights as the
    example written independently by examples/models/make_header_only.py."""
    model = read_model(header_only_big)
    assert model.metadata["tokenizer.ggml.tokens"] == SkippedArray("STRING", 151936)
    assert model.metadata["tokenizer.ggml.merges"] == SkippedArray("STRING", 151387)
    assert len(model.tensors) >= 500
    assert not model.has_tensor_data
    example = load_model_facts(EXAMPLES / "Qwen3-30B-A3B-Q4_K_M.header.gguf")
    assert load_model_facts(header_only_big).total_bytes == example.total_bytes
