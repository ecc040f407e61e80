"""Options and defaults that several commands share, defined once, with their parsers (a
function of the text that raises BadValueError: typer calls it as the option's parser).

Every shared name means one thing wherever it appears:
- ``--target-vram SIZE``: the peak the device may reach, at most its total (and what is free
  on it, where that is known) unless ``--force``; ``--headroom SIZE`` applies only when no
  target is given, as the device's total minus it;
- ``--ctx N|32k|max``: a token count or the largest context that fits, one parser;
- ``--vram SIZE``, ``--gpu ID``, ``--ram SIZE``: the machine to plan for (``--vram`` and
  ``--gpu`` exclude each other);
- ``--cache-type TYPE``: K and V cache type; ``--json``: one JSON document on stdout;
- ``--timeout SECONDS``: how long one network step may take (commands that take a name or URL).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from moetune.cli.base import PASS_THROUGH, Argument, CommandContext, Option
from moetune.errors import BadValueError
from moetune.jobs.names import (
    MAX_PARALLEL,
    MAX_REPEATS,
    MAX_SECONDS,
    MAX_SHARE,
    MAX_THREADS,
    RPC_ENV,
)
from moetune.record import record
from moetune.units import (
    MAX_TOKENS,
    Ctx,
    RamRate,
    Sizes,
    Workload,
    parse_ctx,
    parse_rate,
    parse_size,
    parse_sizes,
    parse_vram,
    parse_workload,
    shown,
    tokens_arg,
)

if TYPE_CHECKING:
    from moetune.jobs.pick import Pick

CTX_DEFAULT_HELP = "default: 32768, or the training context if shorter"
SIZE_BOUND = "below 1024T"  # units.MAX_SIZE_BYTES, 1 PiB
TOKENS_BOUND = f"at most {tokens_arg(MAX_TOKENS)}"  # units.MAX_TOKENS


def parse_positive_sizes(text: str) -> Sizes:
    return parse_sizes(text)


def parse_sizes_or_zero(text: str) -> Sizes:
    return parse_sizes(text, allow_zero=True)


def parse_positive_size(text: str) -> int:
    return parse_size(text)


def parse_seconds(text: str) -> float:
    """A duration above 0 in seconds, at most a day: ``30``, ``2.5``."""
    try:
        seconds = float(text)
    except ValueError:
        raise BadValueError(f"{shown(text)} is not a number of seconds") from None
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
        raise BadValueError(
            f"need a number of seconds above 0 and at most {MAX_SECONDS:.0f}, got {shown(text)}"
        )
    return seconds


def parse_share(text: str) -> float:
    """A share from 0 to 10: ``10%`` or ``0.1`` (at most ``1000%``)."""
    body = text.strip()
    percent = body.endswith("%")
    try:
        value = float(body.removesuffix("%").strip())
    except ValueError:
        raise BadValueError(f"{shown(text)} is not a share", hint="e.g. 10% or 0.1") from None
    share = value / 100 if percent else value
    if not (math.isfinite(share) and 0 <= share <= MAX_SHARE):
        raise BadValueError(f"need a share from 0 to {MAX_SHARE:.0f} (1000%), got {shown(text)}")
    return share


MAX_DIGITS = 18  # a longer whole number is out of every option's range
_WHOLE_RE = re.compile(r"^\s*([+-]?)0*(\d+)\s*$")


def whole(least: int, most: int) -> Callable[[str], int]:
    """The parser of an option's whole number from ``least`` to ``most`` (``1 to 256``, as
    ``bounds`` writes it in the help): anything else, ``abc``, ``1e3``, ``inf`` or 5,000
    digits, is refused with the range."""

    def parse_whole(text: str) -> int:
        match = _WHOLE_RE.match(text)
        if match is None:
            raise BadValueError(f"not a whole number: {shown(text)}", hint=bounds(least, most))
        sign, digits = match.groups()
        # the length first: int() refuses 4,300 digits and more
        value = int(sign + digits) if len(digits) <= MAX_DIGITS else None
        if value is None or not least <= value <= most:
            raise BadValueError(
                f"need a whole number from {bounds(least, most)}, got {shown(text)}"
            )
        return value

    return parse_whole


def bounds(least: int, most: int) -> str:
    """A whole number's range as the help and the errors say it: ``1 to 256``."""
    return f"{least} to {most}"


parse_repeats = whole(1, MAX_REPEATS)  # timed requests, llama-bench's repetitions
parse_threads = whole(1, MAX_THREADS)  # llama-bench's -t


def _network_timeout(context: CommandContext, seconds: float) -> float:
    """--timeout holds for the command's network steps, and for nothing after it."""
    from moetune.jobs.models import network_timeout

    context.with_resource(network_timeout(seconds))
    return seconds


def parse_cache(text: str) -> str:
    from moetune.jobs.values import parse_cache_type

    return parse_cache_type(text)


SIZE = "SIZE"
SIZES = "SIZE[,SIZE]"
ModelArg = Annotated[
    str,
    Argument(
        help="GGUF model file (any shard of a split model), user/model[:quant] on the "
        "Hugging Face hub, or a URL of a .gguf.",
        metavar="MODEL",
    ),
]
JsonOpt = Annotated[bool, Option("--json", help="Machine-readable output.")]
# how often a timed request is repeated (bench at each depth, run at each launch that fits)
RepeatsOpt = Annotated[
    int,
    Option(
        help="Timed requests at the least; more until they agree within --max-spread "
        f"({bounds(1, MAX_REPEATS)}).",
        parser=parse_repeats,
        metavar="N",
    ),
]
MaxRepeatsOpt = Annotated[
    int | None,
    Option(
        help="Timed requests at the most, while they disagree (default: 10, or --repeats if "
        f"more; {bounds(1, MAX_REPEATS)}).",
        parser=parse_repeats,
        metavar="N",
    ),
]
MaxSpreadOpt = Annotated[
    float,
    Option(
        help="How far the requests may spread, (max-min)/median of decode and of prefill "
        "tok/s: 10% or 0.1 (0 to 1000%).",
        parser=parse_share,
        metavar="SHARE",
    ),
]
MaxTimeOpt = Annotated[
    float,
    Option(
        help="No more repeats after this many seconds at one depth (run: one launch); the "
        f"spread is then shown as it is (above 0, at most {MAX_SECONDS:.0f}).",
        parser=parse_seconds,
        metavar="SECONDS",
    ),
]
CacheTypeOpt = Annotated[
    str, Option(help="K and V cache type.", parser=parse_cache, metavar="TYPE")
]
PickCacheTypeOpt = Annotated[
    str | None,
    Option(
        "--cache-type",
        help="Pick the profile tuned with this K/V cache type.",
        parser=parse_cache,
        metavar="TYPE",
    ),
]
CtxOpt = Annotated[
    Ctx | None,
    Option(
        help=f"Context: tokens (32768, 32k; {TOKENS_BOUND}) or max ({CTX_DEFAULT_HELP}).",
        parser=parse_ctx,
        metavar="N|max",
    ),
]
VramOpt = Annotated[
    Sizes | None,
    Option(
        help="Device memory, one size or one per device in llama.cpp's order (RPC hosts, "
        f"then GPUs), e.g. 24G or 24G,12G, each {SIZE_BOUND}; SIZE:ID names the card (a "
        "hardware profile as --gpu takes, e.g. 16G:rtx4080) for its speed figures, else "
        "those typical of its size are assumed (default: detect).",
        parser=parse_vram,
        metavar="SIZE[:ID][,...]",
    ),
]
RamOpt = Annotated[
    int | None,
    Option(
        help=f"Host RAM, e.g. 64G, {SIZE_BOUND} (default: detect).",
        parser=parse_positive_size,
        metavar=SIZE,
    ),
]


def parse_objective(text: str) -> str:
    """``--objective``: decode, prefill, balanced, throughput or latency (core/goal.py)."""
    from moetune.jobs.values import parse_objective as parse

    return parse(text)


def parse_weights(text: str) -> str:
    """``--weights w1,w2,...``: positive finite numbers (their count is checked against the
    models)."""
    from moetune.jobs.values import check_weights

    return check_weights(text)


WeightsOpt = Annotated[
    str | None,
    Option(
        help="With --together: how much each model's forecast speed counts in the split, one "
        "positive number per model in order, e.g. 2,1 (default: equal).",
        parser=parse_weights,
        metavar="W1,W2,...",
    ),
]
ObjectiveOpt = Annotated[
    str | None,
    Option(
        help="Order the speed frontier by decode, prefill (of 4096 tokens), balanced "
        "(their geometric mean), or under --parallel N throughput (the N streams' decode "
        "together) or latency (one stream's).",
        parser=parse_objective,
        metavar="decode|prefill|balanced|throughput|latency",
    ),
]
WorkloadOpt = Annotated[
    Workload | None,
    Option(
        help="Order the speed frontier by time per request: PROMPT:GEN tokens (8k:512), "
        f"each {TOKENS_BOUND}; the request must fit the context (one slot's with --parallel).",
        parser=parse_workload,
        metavar="PROMPT:GEN",
    ),
]
RamBandwidthOpt = Annotated[
    RamRate | None,
    Option(
        help="Host RAM read bandwidth: GB/s (60, 60GB/s), a size per second (56G/s) or the "
        "RAM's type, rate and channels, its peak (ddr5-6000x2), above 0 and at most 100 TB/s "
        "(default: this machine's, as doctor measured and saved it, else measured once and "
        "saved).",
        parser=parse_rate,
        metavar="GB/s",
    ),
]
GpuProfileOpt = Annotated[
    str | None,
    Option(help="Plan for a hardware profile instead of detecting, e.g. rtx4090.", metavar="ID"),
]
RpcOpt = Annotated[
    str | None,
    Option(
        help="RPC servers as devices, HOST:PORT[,HOST:PORT], as llama-server's --rpc (default: "
        f"${RPC_ENV}, as llama-server reads it, unless --gpu or --vram names the devices).",
        metavar="HOST:PORT[,...]",
        envvar=RPC_ENV,
        show_envvar=False,
    ),
]
TargetVramOpt = Annotated[
    Sizes | None,
    Option(
        help=f"Peak device memory allowed, one size or one per device, each {SIZE_BOUND} "
        "(default: each device's total - --headroom).",
        parser=parse_positive_sizes,
        metavar=SIZES,
    ),
]
ProfileOpt = Annotated[
    str | None,
    Option(
        "--profile",
        help="Pick the tuned profile of this name (or its start; `moetune profiles list`).",
        metavar="NAME",
    ),
]
PickTargetOpt = Annotated[
    Sizes | None,
    Option(
        "--target-vram",
        help=f"Pick the profile tuned for this peak, one size or one per device ({SIZE_BOUND}); "
        "without one, plan for it.",
        parser=parse_positive_sizes,
        metavar=SIZES,
    ),
]
PickRpcOpt = Annotated[
    str | None,
    Option(
        "--rpc",
        help="Pick the profile tuned on these RPC servers, HOST:PORT[,HOST:PORT] (default: "
        f"${RPC_ENV}); without one, plan for them.",
        metavar="HOST:PORT[,...]",
        envvar=RPC_ENV,
        show_envvar=False,
    ),
]

PickGpuOpt = Annotated[
    str | None,
    Option(
        "--gpu",
        help="Pick the profile tuned on this GPU (a hardware profile, e.g. rtx4090); without "
        "one, plan for it.",
        metavar="ID",
    ),
]
PickVramOpt = Annotated[
    Sizes | None,
    Option(
        "--vram",
        help="Pick the profile tuned on devices of this memory (within 10 %), one size or one "
        f"per device ({SIZE_BOUND}); without one, plan for it (default: detect).",
        parser=parse_positive_sizes,
        metavar=SIZES,
    ),
]
PickParallelOpt = Annotated[
    int | None,
    Option(
        "--parallel",
        help="Pick the profile tuned with this many slots (run --parallel N, -np N); without "
        f"one, plan for them; {bounds(1, MAX_PARALLEL)}.",
        parser=whole(1, MAX_PARALLEL),
        metavar="N",
    ),
]
ParallelOpt = Annotated[
    int | None,
    Option(
        "--parallel",
        help=f"llama-server slots, -np N, each its own cache, {bounds(1, MAX_PARALLEL)} "
        "(default: auto, 4 sharing one cache).",
        parser=whole(1, MAX_PARALLEL),
        metavar="N",
    ),
]


RequireTunedOpt = Annotated[
    bool,
    Option("--require-tuned", help="Refuse when no tuned profile matches (no plan)."),
]


@record(frozen=True)
class PickOptions:
    """The options alias and export choose a tuned profile by (as run tunes one: context,
    cache type, name, target, device set) and whether they may plan instead, declared once:
    a command takes them as one parameter of this type (``pick_options``), each field an
    option of its own."""

    ctx: CtxOpt = None
    cache_type: PickCacheTypeOpt = None
    profile: ProfileOpt = None
    target_vram: PickTargetOpt = None
    rpc: PickRpcOpt = None
    gpu: PickGpuOpt = None
    vram: PickVramOpt = None
    parallel: PickParallelOpt = None
    require_tuned: RequireTunedOpt = False

    def pick(self, command: str, ram: int | None = None) -> Pick:
        """What ``command`` serves: the tuned profile these options choose, else the plan
        for them (``ram``: the host RAM it plans for)."""
        from moetune.jobs.pick import pick

        return pick(
            command,
            ctx=self.ctx,
            cache_type=self.cache_type,
            profile=self.profile,
            target_vram=self.target_vram,
            rpc=self.rpc,
            gpu=self.gpu,
            vram=self.vram,
            ram=ram,
            parallel=self.parallel,
        )


PICK_DEFAULTS = PickOptions()  # a command's PickOptions parameter's default: each option's


def pick_options(func: Callable[..., None]) -> Callable[..., None]:
    """``func`` with its ``PickOptions`` parameter given as the options of its fields (in its
    place, named by the fields): what cli/base.py's parsers read of a command."""
    signature = inspect.signature(func)
    hints = typing.get_type_hints(func, include_extras=True)
    group = next(name for name, hint in hints.items() if hint is PickOptions)
    fields = typing.get_type_hints(PickOptions, include_extras=True)
    parameters: list[inspect.Parameter] = []
    for name, parameter in signature.parameters.items():
        if name != group:
            parameters.append(parameter.replace(annotation=hints[name]))
            continue
        parameters += [
            inspect.Parameter(
                field.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=field.default,
                annotation=fields[field.name],
            )
            for field in dataclasses.fields(PickOptions)
        ]

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> None:
        names = [field.name for field in dataclasses.fields(PickOptions)]
        given = {name: kwargs.pop(name) for name in names if name in kwargs}
        func(*args, **kwargs, **{group: PickOptions(**given)})

    command.__annotations__ = {p.name: p.annotation for p in parameters}
    command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    del command.__wrapped__  # the signature is this one, not func's
    return command


ForceOpt = Annotated[
    bool,
    Option(
        "--force",
        help="Accept a --target-vram above a device's size or its free memory.",
    ),
]
HeadroomOpt = Annotated[
    Sizes,
    Workload,
    Option(
        help="Left free when no --target-vram is given, one size or one per device "
        f"(0 or more, {SIZE_BOUND}).",
        parser=parse_sizes_or_zero,
        metavar=SIZES,
    ),
]
OverheadOpt = Annotated[
    Sizes | None,
    Option(
        help=f"Runtime overhead per device beyond llama.cpp's buffers, 0 or more, {SIZE_BOUND} "
        "(default: 512M on CUDA, 0 on RPC).",
        parser=parse_sizes_or_zero,
        metavar=SIZES,
    ),
]
ServerOpt = Annotated[str | None, Option(help="llama-server to use.", metavar="PATH")]
MmprojOpt = Annotated[
    Path | None,
    Option(
        "--mmproj",
        help="A multimodal projector (mmproj GGUF) beside the model, counted where "
        "llama-server puts it (also: -- --mmproj FILE, --no-mmproj-offload, -mmdev DEV).",
        metavar="FILE",
    ),
]
TimeoutOpt = Annotated[
    float,
    Option(
        "--timeout",
        help="Seconds one network step may take in all (a repository's listing, one "
        f"model's headers) before it fails with NETWORK (above 0, at most {MAX_SECONDS:.0f}).",
        parser=parse_seconds,
        callback=_network_timeout,
        metavar="SECONDS",
    ),
]
DraftOpt = Annotated[
    Path | None,
    Option(
        "--draft",
        help="A draft model for speculative decoding (-md, with --spec-type draft-simple); "
        "its weights, KV and compute are counted (its flags after --: -ngld, -devd, -otd, "
        "-ncmoed, -ctkd, -ctvd).",
        metavar="FILE",
    ),
]


def pass_through_of(context: CommandContext) -> tuple[str, ...]:
    """The arguments after ``--``, for llama-server."""
    return tuple(context.meta.get(PASS_THROUGH, ()))
