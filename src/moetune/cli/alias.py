"""`moetune alias`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from moetune.cli.app import app, handle_errors
from moetune.cli.options import (
    Command,
    CtxOpt,
    DraftOpt,
    GpuProfileOpt,
    MmprojOpt,
    ModelArg,
    PickCacheTypeOpt,
    VramOpt,
)

if TYPE_CHECKING:
    from moetune.errors import ProfileNotFoundError
    from moetune.jobs.alias import Shell
    from moetune.jobs.models import Model


@app.command("alias", cls=Command)
@handle_errors
def alias(
    name: Annotated[str, typer.Argument(help="The command to define, e.g. qwen.", metavar="NAME")],
    model: ModelArg,
    shell: Annotated[
        str | None, typer.Option(help="bash, zsh or fish (default: from $SHELL).")
    ] = None,
    ctx: CtxOpt = None,
    cache_type: PickCacheTypeOpt = None,
    mmproj: MmprojOpt = None,
    draft: DraftOpt = None,
    gpu: GpuProfileOpt = None,
    vram: VramOpt = None,
    require_tuned: Annotated[
        bool,
        typer.Option("--require-tuned", help="Refuse when no tuned profile matches (no plan)."),
    ] = False,
) -> None:
    """Print a shell function that starts the tuned llama-server, for your dotfiles.

    Add it with e.g. `moetune alias qwen MODEL >> ~/.bashrc`; `qwen --port 8081` passes
    extra arguments to llama-server. With --mmproj/--draft: the profile tuned with them.
    Without a tuned profile: moetune's plan for the detected GPU (or --gpu/--vram), marked
    as predicted (--require-tuned refuses instead).
    """
    import os

    from moetune.errors import BadValueError, ProfileNotFoundError
    from moetune.jobs.alias import alias_text, check_name, parse_shell, shell_from_path
    from moetune.jobs.models import open_model, require_weights
    from moetune.report.render import TextView, render
    from moetune.store.tuned import ProfileStore, model_identity, model_profile

    check_name(name)
    chosen = parse_shell(shell) if shell else shell_from_path(os.environ.get("SHELL"))
    if ctx is not None and ctx.is_max:
        raise BadValueError("alias picks the profile tuned at one context: give --ctx N")
    tokens = ctx.tokens if ctx is not None else None
    beside = [
        (flag, str(path.absolute()))
        for flag, path in (("--mmproj", mmproj), ("--draft", draft))
        if path is not None
    ]
    named = open_model(model)
    missing: ProfileNotFoundError | None = None
    if named.path is not None:
        try:
            profile = model_profile(
                ProfileStore(), model_identity(named.path), tokens, cache_type, beside
            )
            render(TextView(alias_text(name, profile, chosen)))
            return
        except ProfileNotFoundError as exc:
            if require_tuned:
                raise
            missing = exc
    elif require_tuned:
        require_weights(named)  # a tuned profile is of a file on disk: says how to get it
    options = (gpu, vram, ctx, cache_type, mmproj, draft)
    render(TextView(_predicted(name, named.absolute(), chosen, options, missing)))


def _predicted(
    name: str,
    named: Model,
    shell: Shell,
    options: tuple[Any, ...],
    missing: ProfileNotFoundError | None,
) -> str:
    """The alias of moetune's plan when nothing is tuned, with a warning on stderr."""
    from moetune.cli.app import err
    from moetune.cli.options import DEFAULT_CACHE_TYPE
    from moetune.core.extras import extras_args
    from moetune.errors import DoesNotFitError
    from moetune.jobs.alias import predicted_comments, render_function
    from moetune.jobs.plan import predicted_plan
    from moetune.llamacpp.process import server_for_commands

    gpu, vram, ctx, cache_type, mmproj, draft = options
    extra = extras_args(
        (), mmproj=str(mmproj) if mmproj else None, draft=str(draft) if draft else None
    )
    cache = cache_type or DEFAULT_CACHE_TYPE
    plan, source = predicted_plan(
        named, vram=vram, gpu=gpu, ctx=ctx, cache_type=cache, extra=extra, missing=missing
    )
    if not plan.fits:
        raise DoesNotFitError(f"does not fit: {plan.reason}")
    argv = [server_for_commands(), *plan.recommended.command[1:]]
    err().print(
        f"warning: no tuned profile for {named.facts.paths[0]}: the alias runs "
        "moetune's plan (predicted, not measured); `moetune run` tunes it",
        style="yellow",
        highlight=False,
    )
    return render_function(name, argv, shell, predicted_comments(name, plan, source))
