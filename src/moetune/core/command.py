"""Pure: settings and a placement -> the llama-server argv (and its shell form); the
pass-through arguments after ``--``: which ones moetune owns, and the values it reads."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from moetune.core.flags import FlagRole, Pair, flag, pairs, words
from moetune.core.placement import ALL_LAYERS, CPU, Override, Placement
from moetune.core.settings import OP_OFFLOAD_ENV, Settings
from moetune.errors import BadValueError
from moetune.record import record


@record(frozen=True)
class FitMode:
    """llama.cpp places the tensors itself: ``--fit on`` (with a margin of free memory)."""

    target_mib: int | None = None  # --fit-target; None: llama.cpp's default margin
    target_mibs: tuple[int, ...] = ()  # several devices: one margin each (-fitt M0,M1)


@record(frozen=True)
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
    pass_through: tuple[str, ...] = ()
    fit: FitMode | None = None  # set: no placement flags, llama.cpp's --fit decides
    tensor_split: tuple[float, ...] = ()  # -ts, one value per device
    bufts: tuple[str, ...] = ()  # the devices' buffer types, for -ot rules that name them
    model_flag: str = "-m"  # -hf when the model is a Hugging Face name, -mu for a URL


def args_for(
    model: str,
    settings: Settings,
    placement: Placement | None,
    *,
    threads: int | None = None,
    pass_through: tuple[str, ...] = (),
    with_ubatch: bool = True,
    fit: FitMode | None = None,
    bufts: tuple[str, ...] = (),
    model_flag: str = "-m",
) -> ServerArgs:
    """The arguments for ``placement`` at ``settings`` (``--n-cpu-moe N`` when the placement
    came from it, else its ``-ot`` rules), or for llama.cpp's own ``fit`` when ``placement``
    is None. ``with_ubatch=False`` when ``pass_through`` carries -ub (and -b)."""
    place = placement if placement is not None else Placement()
    by_n = place.n_cpu_moe is not None
    return ServerArgs(
        model=model,
        n_ctx=settings.n_ctx,
        type_k=settings.type_k,
        type_v=settings.type_v,
        n_gpu_layers=place.n_gpu_layers,
        n_cpu_moe=place.n_cpu_moe,
        overrides=() if by_n else place.overrides,
        threads=threads,
        n_ubatch=settings.n_ubatch if with_ubatch and settings.n_ubatch != 512 else None,
        # a -ub above the default batch needs -b (llama.cpp clamps -ub to -b)
        n_batch=settings.n_batch if with_ubatch and settings.n_batch != 2048 else None,
        flash_attn=settings.flash_attn,
        n_parallel=settings.n_seq if settings.explicit_parallel else None,
        pass_through=pass_through,
        fit=fit if placement is None else None,
        tensor_split=place.tensor_split,
        bufts=bufts,
        model_flag=model_flag,
    )


def server_argv(args: ServerArgs, binary: str = "llama-server") -> list[str]:
    """``llama-server -m MODEL -ngl 99 -fa on -ctk q8_0 -ctv q8_0 -c CTX ... --fit off``.

    ``--fit off``: moetune places tensors itself, and llama.cpp's own fit would otherwise
    only warn that it gives up because placement flags are set (common/fit.cpp).  With
    ``args.fit`` the placement flags are left out and ``--fit on`` decides instead.
    """
    devices: list[str] = []
    pass_through = list(args.pass_through)
    if any(rule.target != CPU for rule in args.overrides):  # -ot names a device --rpc adds
        devices, pass_through = device_args(args.pass_through)
    argv = [binary, args.model_flag, args.model, *devices]
    if args.fit is None:
        argv += ["-ngl", "99" if args.n_gpu_layers >= ALL_LAYERS else str(args.n_gpu_layers)]
        if args.tensor_split:
            argv += ["-ts", ",".join(_number(v) for v in args.tensor_split)]
    argv += ["-fa", "on" if args.flash_attn else "off"]
    argv += ["-ctk", args.type_k, "-ctv", args.type_v, "-c", str(args.n_ctx)]
    if args.overrides and args.fit is None:
        argv += ["-ot", ",".join(rule.arg(args.bufts) for rule in args.overrides)]
    if args.n_cpu_moe and args.fit is None:
        argv += ["--n-cpu-moe", str(args.n_cpu_moe)]
    if args.threads:
        argv += ["-t", str(args.threads)]
    # the user's own -ub / -b after -- stand (llama-server takes the last of a repeated flag)
    if args.n_ubatch and pass_through_value(pass_through, "-ub", "--ubatch-size") is None:
        argv += ["-ub", str(args.n_ubatch)]
    if args.n_batch and pass_through_value(pass_through, "-b", "--batch-size") is None:
        argv += ["-b", str(args.n_batch)]
    if args.n_parallel:
        argv += ["-np", str(args.n_parallel)]
    return [*argv, *_fit_flags(args.fit), *pass_through]


def hf_argv(argv: Sequence[str], name: str, sibling: str | None = None) -> list[str]:
    """A command launched on the files of a Hugging Face name as the user would type it:
    ``-hf NAME`` for the first ``-m FILE``, and without the ``--mmproj`` of the sibling -hf
    brings (every spelling, ``--flag=value`` too)."""
    found: list[Pair] = []
    named = False
    for pair in pairs(argv):
        if not named and pair.is_("-m") and pair.values:
            found.append(Pair("-hf", (name,), flag("-hf")))
            named = True
        elif sibling is None or not pair.is_("-mm") or pair.value != sibling:
            found.append(pair)
    return words(found)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def device_args(pass_through: Sequence[str]) -> tuple[list[str], list[str]]:
    """The device-choosing flags among ``pass_through`` (with their values), and the rest."""
    found = pairs(pass_through)
    devices = [pair for pair in found if pair.role is FlagRole.DEVICE]
    return words(devices), words(pair for pair in found if pair.role is not FlagRole.DEVICE)


def _fit_flags(fit: FitMode | None) -> list[str]:
    if fit is None:
        return ["--fit", "off"]
    margins = fit.target_mibs or ((fit.target_mib,) if fit.target_mib is not None else ())
    target = ["--fit-target", ",".join(map(str, margins))] if margins else []
    return ["--fit", "on", *target]


def command_env(settings: Settings) -> dict[str, str]:
    """The environment a command sets for llama-server beside its flags: the op-offload
    threshold (``GGML_OP_OFFLOAD_MIN_BATCH``, which ggml reads from the environment, not from
    a flag) where ``settings`` name one; nothing at ggml's default."""
    found = settings.op_offload_min_batch
    return {} if found is None else {OP_OFFLOAD_ENV: str(found)}


def env_words(env: Mapping[str, str]) -> list[str]:
    """``NAME=VALUE`` for each variable, in order (a shell's assignment words, llama-swap's
    ``env`` list)."""
    return [f"{name}={value}" for name, value in env.items()]


def shell_join(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The argv as one line a POSIX shell runs unchanged (regexes and paths quoted), after
    the assignments of ``env`` (``GGML_OP_OFFLOAD_MIN_BATCH=1024 llama-server ...``: set
    for that one command)."""
    assignments = [f"{name}={shlex.quote(value)}" for name, value in (env or {}).items()]
    return " ".join([*assignments, shlex.join(argv)])


# --- the pass-through arguments after -- ------------------------------------------------------


def conflicting_args(pass_through: Sequence[str]) -> list[str]:
    """Arguments after ``--`` that would fight moetune's own placement or measurement (each
    flag as written, without its value)."""
    return [pair.words()[0] for pair in pairs(pass_through) if pair.role is FlagRole.PLACEMENT]


def check_pass_through(pass_through: Sequence[str]) -> None:
    """BadValueError for pass-through arguments that fight the placement moetune decides."""
    if clashes := conflicting_args(pass_through):
        raise BadValueError(
            f"{' '.join(clashes)} after -- conflicts with the placement moetune tunes",
            hint="drop it: moetune sets -ngl, --n-cpu-moe, -ot, -ts, -c, -ctk/-ctv, -fa and --fit",
        )


def pass_through_value(pass_through: Sequence[str], *names: str) -> str | None:
    """The value llama-server takes for one of ``names`` among pass-through arguments
    (``-dev CUDA1``): the last one given; "" when the flag ends the arguments."""
    found = [pair for pair in pairs(pass_through) if pair.is_(*names)]
    if not found:
        return None
    return found[-1].value or ""


# what llama.cpp's std::stoi reads of an integer flag's value: C's white space, a sign, ASCII
# digits (the rest is ignored: ``-ub 1e3`` is 1), within a 32-bit int (else it is refused)
_STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_INT_MAX = 2**31 - 1


def pass_through_int(pass_through: Sequence[str], *names: str) -> int | None:
    """The integer value of one of ``names`` among pass-through arguments (``-ub 2048``),
    read as llama-server reads it; None when not given or below 0 (``-t -1``: llama.cpp's
    default). A value llama-server refuses (``nan``, ``²``, none, past a 32-bit int) is a
    BadValueError naming it."""
    text = pass_through_value(pass_through, *names)
    if text is None:
        return None
    match = _STOI.match(text)
    digits = match[1].lstrip("+-").lstrip("0") if match else ""
    if match is None or len(digits) > len(str(_INT_MAX)) or abs(int(match[1])) > _INT_MAX:
        shown = repr(text[:40] + "...") if len(text) > 40 else repr(text)
        raise BadValueError(
            f"{names[0]} after -- has no value"
            if not text
            else f"{names[0]} {shown} after -- is not a whole number llama-server takes",
            hint=f"give {names[0]} an integer from 0 to {_INT_MAX}",
        )
    value = int(match[1])
    return value if value >= 0 else None


def rpc_endpoints(pass_through: Sequence[str]) -> list[str]:
    """The ``--rpc host:port,...`` servers among the pass-through arguments."""
    return [
        endpoint
        for pair in pairs(pass_through)
        if pair.is_("--rpc") and pair.value is not None
        for endpoint in pair.value.split(",")
    ]


_RPC_BUFT = re.compile(r"=RPC(\d+)\[([^\]]+)\]")


def buft_notes(argv: Sequence[str]) -> list[str]:
    """What a ``-ot`` rule's RPC buffer type means where its name is not the device's: the
    buffer type is ``RPC<index on that server>[host:port]`` (``RPC0[...]`` for every
    single-device server), the device is RPC<its place in --rpc> (RPC0, RPC1...)."""
    endpoints = rpc_endpoints(argv)
    notes: list[str] = []
    for pair in pairs(argv):
        if not pair.is_("-ot") or pair.value is None:
            continue
        for found in _RPC_BUFT.finditer(pair.value):
            buft, endpoint = found[0].removeprefix("="), found[2]
            if endpoint not in endpoints:
                continue
            device = f"RPC{endpoints.index(endpoint)}"
            if buft.startswith(device + "["):
                continue  # the same name: nothing to say
            note = f"-ot's {buft} is llama.cpp's buffer-type name of {device} ({endpoint})"
            if note not in notes:
                notes.append(note)
    return notes
