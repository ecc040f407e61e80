"""`moetune alias`."""

from __future__ import annotations

from typing import Annotated

import typer

from moetune.cli.app import app, err, handle_errors
from moetune.cli.options import (
    Command,
    CtxOpt,
    DraftOpt,
    GpuProfileOpt,
    MmprojOpt,
    ModelArg,
    PickCacheTypeOpt,
    PickRpcOpt,
    PickTargetOpt,
    ProfileOpt,
    TimeoutOpt,
    VramOpt,
    selectors,
)
from moetune.hub.env import DEFAULT_TIMEOUT_S


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
    profile: ProfileOpt = None,
    target_vram: PickTargetOpt = None,
    rpc: PickRpcOpt = None,
    mmproj: MmprojOpt = None,
    draft: DraftOpt = None,
    gpu: GpuProfileOpt = None,
    vram: VramOpt = None,
    require_tuned: Annotated[
        bool,
        typer.Option("--require-tuned", help="Refuse when no tuned profile matches (no plan)."),
    ] = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
) -> None:
    """Print a shell function that starts the tuned llama-server, for your dotfiles.

    Add it with e.g. `moetune alias qwen MODEL >> ~/.bashrc`; `qwen --port 8081` passes
    extra arguments to llama-server. With --mmproj/--draft: the profile tuned with them.
    Without a tuned profile: moetune's plan for the detected GPU (or --gpu/--vram), marked
    as predicted (--require-tuned refuses instead).
    """
    import os

    from moetune.errors import BadValueError
    from moetune.jobs.alias import alias_for_model, check_name, parse_shell, shell_from_path
    from moetune.report.render import TextView, render

    check_name(name)
    target_shell = parse_shell(shell) if shell else shell_from_path(os.environ.get("SHELL"))
    if ctx is not None and ctx.is_max:
        raise BadValueError("alias picks the profile tuned at one context: give --ctx N")
    text = alias_for_model(
        name,
        model,
        target_shell,
        ctx=ctx,
        cache_type=cache_type,
        mmproj=mmproj,
        draft=draft,
        hardware=(gpu, vram),
        require_tuned=require_tuned,
        select=selectors(profile, target_vram, rpc),
        warn=lambda line: err().print(f"warning: {line}", style="yellow", highlight=False),
    )
    render(TextView(text))
