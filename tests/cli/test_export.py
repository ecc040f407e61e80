"""``moetune export`` of a model without a tuned profile: the plan as a marked fallback."""

from __future__ import annotations

from pathlib import Path

from moetune.errors import ExitCode

from support.factory import write_model
from support.helpers import moetune


def test_a_model_without_a_profile_is_exported_from_its_plan(tmp_path: Path) -> None:
    model = write_model(tmp_path / "plain.gguf", "qwen3moe", n_layers=4)
    done = moetune("export", "preset", str(model), "--vram", "4G")
    assert done.returncode == 0, done.stderr
    assert "PREDICTED" in done.stdout and f"model = {model}" in done.stdout
    assert "predicted, not measured" in done.stderr
    refused = moetune("export", "preset", str(model), "--vram", "4G", "--require-tuned")
    assert refused.returncode == ExitCode.FILE_NOT_FOUND
