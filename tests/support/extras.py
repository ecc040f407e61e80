"""The files the companion tests (``--mmproj``, ``--draft``) plan and run with."""

from __future__ import annotations

from pathlib import Path

from support.factory import ModelFactory
from support.projector_factory import write_projector


def companion_files(models: ModelFactory) -> dict[str, Path]:
    """A tiny target, a smaller draft with its vocabulary, two projectors, and a header-only
    model with another vocabulary (a draft that must be refused)."""
    return {
        "model": models("qwen3moe", "target.gguf", n_layers=6),
        "draft": models("qwen3moe", "draft.gguf", n_layers=2, n_embd=128, seed=1),
        "mmproj": models.written("mmproj-448", lambda p: write_projector(p, image_size=448)),
        "wide": models.written("mmproj-wide", lambda p: write_projector(p, n_embd_out=512)),
        "other_vocab": models.header_only("other.gguf", n_vocab=4096, n_merges=10, n_layers=2),
    }


TEXT_WIDTH = 256  # tests/support/factory.py write_model's n_embd


def projector_files(models: ModelFactory) -> dict[str, Path]:
    """A tiny text model and two projectors for it: gemma3's and Qwen3-VL's (deepstack)."""
    return {
        "text": models("qwen3moe", "text.gguf", n_layers=2),
        "gemma3": models.written(
            "gemma3",
            lambda p: write_projector(p, projector_type="gemma3", n_embd_out=TEXT_WIDTH),
        ),
        "qwen3vl": models.written(
            "qwen3vl",
            lambda p: write_projector(
                p,
                projector_type="qwen3vl_merger",
                patch_size=16,
                n_embd_out=TEXT_WIDTH,
                deepstack_layers=(0,),
            ),
        ),
    }
