"""moetune bench refuses an image without a projector, and a file that is not one, before
anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from moetune.errors import ExitCode

from support.factory import ModelFactory
from support.helpers import moetune

# --- the real llama-server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(model_factory: ModelFactory) -> Path:
    return model_factory("qwen3moe", n_layers=8)


def test_image_needs_a_projector_and_an_image(model: Path, tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    done = moetune("bench", str(model), "--image", str(text), "--no-save")
    assert done.returncode == ExitCode.BAD_VALUE and "not a PNG" in done.stderr
    image = tmp_path / "cat.png"
    from support.projector_factory import png_bytes

    image.write_bytes(png_bytes())
    done = moetune("bench", str(model), "--image", str(image), "--no-save")
    assert done.returncode == ExitCode.BAD_VALUE and "--mmproj" in done.stderr
