"""The full-size header-only example models (examples/models) the tests read, and the script
that writes them (examples/models/make_header_only.py) for the headers not shipped."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from support.helpers import EXAMPLES

V3 = EXAMPLES / "DeepSeek-V3-0324-Q4_K_M.header.gguf"
SCOUT = EXAMPLES / "Llama-4-Scout-17B-16E-Q4_K_M.header.gguf"
CTX = 32768  # the context the DeepSeek-V3 and Llama-4-Scout headers are checked at


def header_script() -> ModuleType:
    """examples/models/make_header_only.py, imported."""
    script = EXAMPLES / "make_header_only.py"
    spec = importlib.util.spec_from_file_location("make_header_only", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def write_v32_header(path: Path) -> Path:
    """A DeepSeek-V3.2 header (V3 with the sparse attention's indexer) at ``path``."""
    script = header_script()
    spec = script.DeepSeekV3(indexer=(64, 128, 2048))
    script.write(path, spec.arch, spec)
    return path
