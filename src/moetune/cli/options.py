"""Options and defaults that several commands share, defined once (typer annotations only)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_CACHE_TYPE = "q8_0"
DEFAULT_HEADROOM = "1.5G"
DEFAULT_OVERHEAD = "512M"
CTX_DEFAULT_HELP = "default: 32768, or the training context if shorter"
RUN_HELP_EXTRA = "Arguments after -- are passed to llama-server (e.g. -- --rpc 127.0.0.1:50052)."

ModelArg = Annotated[
    Path,
    typer.Argument(help="GGUF model file (any shard of a split model).", readable=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
CacheTypeOpt = Annotated[str, typer.Option(help="K and V cache type.")]
CtxIntOpt = Annotated[int | None, typer.Option(help=f"Context tokens ({CTX_DEFAULT_HELP}).")]
HeadroomOpt = Annotated[str, typer.Option(help="VRAM left free under the device's total.")]
OverheadOpt = Annotated[
    str, typer.Option(help="Runtime overhead per GPU (CUDA context), added to llama.cpp's buffers.")
]
ServerOpt = Annotated[str | None, typer.Option(help="llama-server to use.")]
TargetVramOpt = Annotated[
    str | None,
    typer.Option(help="Device memory the server may use at its peak (default: total - headroom)."),
]
DeviceHeadroomOpt = Annotated[str, typer.Option(help="Left free when no --target-vram.")]
GpuProfileOpt = Annotated[
    str | None,
    typer.Option(help="Plan for a hardware profile instead of detecting, e.g. rtx4090."),
]
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
