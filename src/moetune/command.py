"""Pure: a plan -> the llama-server argv (and its shell form)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from moetune.memory import Settings
from moetune.placement import ALL_LAYERS, Override, Placement


@dataclass(frozen=True)
class ServerArgs:
    """What moetune passes to llama-server; everything else is left at llama.cpp's default."""

    model: str
    n_ctx: int
    type_k: str = "q8_0"
    type_v: str = "q8_0"
    n_gpu_layers: int = ALL_LAYERS
    n_cpu_moe: int | None = None
    overrides: tuple[Override, ...] = ()
    threads: int | None = None
    n_ubatch: int | None = None
    n_batch: int | None = None
    flash_attn: bool = True
    n_parallel: int | None = None  # -np; None = llama-server's auto (4 slots, unified KV)
    extra: tuple[str, ...] = ()


def args_for(
    model: str,
    settings: Settings,
    placement: Placement,
    *,
    threads: int | None = None,
    extra: tuple[str, ...] = (),
    with_ubatch: bool = True,
) -> ServerArgs:
    """The arguments for ``placement`` at ``settings`` (``--n-cpu-moe N`` when the placement
    came from it, else its ``-ot`` rules). ``with_ubatch=False`` when ``extra`` carries -ub."""
    by_n = placement.n_cpu_moe is not None
    return ServerArgs(
        model=model,
        n_ctx=settings.n_ctx,
        type_k=settings.type_k,
        type_v=settings.type_v,
        n_gpu_layers=placement.n_gpu_layers,
        n_cpu_moe=placement.n_cpu_moe,
        overrides=() if by_n else placement.overrides,
        threads=threads,
        n_ubatch=settings.n_ubatch if with_ubatch and settings.n_ubatch != 512 else None,
        flash_attn=settings.flash_attn,
        n_parallel=settings.n_seq if settings.explicit_parallel else None,
        extra=extra,
    )


def server_argv(args: ServerArgs, binary: str = "llama-server") -> list[str]:
    """``llama-server -m MODEL -ngl 99 -fa on -ctk q8_0 -ctv q8_0 -c CTX ... --fit off``.

    ``--fit off``: moetune places tensors itself, and llama.cpp's own fit would otherwise
    only warn that it gives up because placement flags are set (common/fit.cpp).
    """
    ngl = "99" if args.n_gpu_layers >= ALL_LAYERS else str(args.n_gpu_layers)
    argv = [binary, "-m", args.model, "-ngl", ngl, "-fa", "on" if args.flash_attn else "off"]
    argv += ["-ctk", args.type_k, "-ctv", args.type_v, "-c", str(args.n_ctx)]
    if args.overrides:
        argv += ["-ot", ",".join(rule.arg for rule in args.overrides)]
    if args.n_cpu_moe:
        argv += ["--n-cpu-moe", str(args.n_cpu_moe)]
    if args.threads:
        argv += ["-t", str(args.threads)]
    if args.n_ubatch:
        argv += ["-ub", str(args.n_ubatch)]
    if args.n_batch:
        argv += ["-b", str(args.n_batch)]
    if args.n_parallel:
        argv += ["-np", str(args.n_parallel)]
    return [*argv, "--fit", "off", *args.extra]


def shell_join(argv: Sequence[str]) -> str:
    """The argv as one line a POSIX shell runs unchanged (regexes and paths quoted)."""
    return shlex.join(argv)
