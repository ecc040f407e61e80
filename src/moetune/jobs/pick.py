"""What ``alias`` and ``export`` serve for a model: the tuned profile their options choose
(as ``run`` would tune it: context, cache type, target, device set, name), else moetune's plan
for the same options, marked predicted. One place for both commands."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from moetune.store.tuned import Selectors

if TYPE_CHECKING:
    from moetune.core.plan import PlanResult
    from moetune.errors import ProfileNotFoundError
    from moetune.jobs.models import Model
    from moetune.store.tuned import ProfileStore, TunedProfile
    from moetune.units import Ctx, Sizes


class Pick(NamedTuple):
    """The options a tuned profile is chosen by (``select``: its name, targets and device
    set), and what the plan is made for when none is tuned: ``gpu`` (a hardware profile),
    ``vram``, ``targets`` (``--target-vram``), ``rpc`` (servers, as ``--rpc``) and ``ram``."""

    ctx: Ctx | None = None
    cache_type: str | None = None
    select: Selectors = Selectors()
    gpu: str | None = None
    vram: Sizes | None = None
    targets: Sizes | None = None
    rpc: str | None = None
    ram: int | None = None
    parallel: int | None = None  # --parallel N: -np N, tuned or planned


def pick(
    command: str,
    *,
    ctx: Ctx | None,
    cache_type: str | None,
    profile: str | None,
    target_vram: Sizes | None,
    rpc: str | None,
    gpu: str | None,
    vram: Sizes | None,
    ram: int | None = None,
    parallel: int | None = None,
) -> Pick:
    """What ``command`` (alias, export) chooses a tuned profile by, as run tunes one (context,
    cache type, target, device set, name), and plans for when none is tuned."""
    from moetune.errors import BadValueError

    if ctx is not None and ctx.is_max:
        raise BadValueError(f"{command} picks the profile tuned at one context: give --ctx N")
    gpu_name, sizes = None, vram.values if vram else None
    if gpu is not None:
        from moetune.store.hardware import find_hardware_profile, load_hardware_profiles

        card = find_hardware_profile(gpu, load_hardware_profiles())
        gpu_name, sizes = card.name, sizes or (card.vram_bytes,)
    servers = tuple(e.strip() for e in rpc.split(",") if e.strip()) if rpc else None
    select = Selectors(
        name=profile,
        targets=target_vram.values if target_vram else None,
        rpc=servers,
        vram=sizes,
        gpu_name=gpu_name,
        parallel=parallel,
    )
    return Pick(ctx, cache_type, select, gpu, vram, target_vram, rpc, ram, parallel)


def tuned_profile(
    store: ProfileStore,
    named: Model,
    pick: Pick,
    beside: Sequence[tuple[str, str]] = (),
    *,
    require_tuned: bool,
    warn: Callable[[str], None],
) -> TunedProfile | ProfileNotFoundError:
    """The tuned profile of ``named`` that ``pick`` chooses (with the files ``beside`` it:
    ``("--mmproj", FILE)``), or why there is none, to fall back to the plan on; with
    ``require_tuned`` that is the error, raised (a model not on disk: how to get it)."""
    from moetune.errors import ProfileNotFoundError
    from moetune.jobs.models import require_weights
    from moetune.store.tuned import model_identity, model_profile

    if named.path is None:
        if require_tuned:
            require_weights(named)  # a tuned profile is of a file on disk: says how to get it
        return ProfileNotFoundError(f"no tuned profile for {named.facts.paths[0]}")
    try:
        return model_profile(
            store,
            model_identity(named.path),
            pick.ctx.tokens if pick.ctx is not None else None,
            pick.cache_type,
            beside,
            warn=warn,
            select=pick.select,
        )
    except ProfileNotFoundError as exc:
        if require_tuned:
            raise
        return exc


def fallback_plan(
    named: Model,
    pick: Pick,
    missing: ProfileNotFoundError,
    pass_through: tuple[str, ...] = (),
) -> tuple[PlanResult, str]:
    """moetune's plan of ``named`` for the devices, targets and RAM ``pick`` gives (default:
    this machine's), as `moetune plan` makes it with these options; and which devices it is
    for. ``missing``: why nothing tuned is used, said when there is nothing to plan for."""
    from moetune.jobs.names import DEFAULT_CACHE_TYPE
    from moetune.jobs.plan import predicted_plan

    return predicted_plan(
        named,
        vram=pick.vram,
        gpu=pick.gpu,
        rpc=pick.rpc,
        targets=pick.targets,
        ctx=pick.ctx,
        cache_type=pick.cache_type or DEFAULT_CACHE_TYPE,
        pass_through=pass_through,
        missing=missing,
        ram=pick.ram,
        parallel=pick.parallel,
    )


def run_args(pick: Pick) -> list[str]:
    """The options of ``moetune run`` that tune the profile ``pick`` would choose: its
    context, cache type, target and RPC servers, where given (run finds the GPUs itself)."""
    from moetune.units import tokens_arg

    args: list[str] = []
    if pick.ctx is not None and pick.ctx.tokens is not None:
        args += ["--ctx", tokens_arg(pick.ctx.tokens)]
    if pick.cache_type is not None:
        args += ["--cache-type", pick.cache_type]
    if pick.targets is not None:
        args += ["--target-vram", pick.targets.arg]
    if pick.rpc is not None:
        args += ["--rpc", pick.rpc]
    if pick.parallel is not None:
        args += ["--parallel", str(pick.parallel)]
    return args
