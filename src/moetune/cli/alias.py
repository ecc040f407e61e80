"""`moetune alias`."""

from __future__ import annotations

from typing import Annotated

from moetune.cli.base import Argument, Option, command, handle_errors
from moetune.cli.options import (
    PICK_DEFAULTS,
    DraftOpt,
    MmprojOpt,
    ModelArg,
    PickOptions,
    TimeoutOpt,
    pick_options,
)
from moetune.jobs.names import DEFAULT_TIMEOUT_S


@command("alias")
@handle_errors
@pick_options
def alias(
    name: Annotated[str, Argument(help="The command to define, e.g. qwen.", metavar="NAME")],
    model: ModelArg,
    shell: Annotated[str | None, Option(help="bash, zsh or fish (default: from $SHELL).")] = None,
    picking: PickOptions = PICK_DEFAULTS,
    mmproj: MmprojOpt = None,
    draft: DraftOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
) -> None:
    """Print a shell function that starts the tuned llama-server, for your dotfiles.

    Add it with e.g. `moetune alias qwen MODEL >> ~/.bashrc`; `qwen --port 8081` passes
    extra arguments to llama-server. With --mmproj/--draft: the profile tuned with them.
    The device set (--gpu, --vram, --rpc) and --target-vram pick a profile as run tunes one.
    Without a tuned profile: moetune's plan for the same options (default: the detected
    GPU), marked as predicted (--require-tuned refuses instead).
    """
    import os

    from moetune.jobs.alias import alias_for_model, check_name, parse_shell, shell_from_path
    from moetune.report.line import warn
    from moetune.report.render import TextView, render

    check_name(name)
    target_shell = parse_shell(shell) if shell else shell_from_path(os.environ.get("SHELL"))
    chosen = picking.pick("alias")
    text = alias_for_model(
        name,
        model,
        target_shell,
        chosen,
        mmproj=mmproj,
        draft=draft,
        require_tuned=picking.require_tuned,
        warn=warn,
    )
    render(TextView(text))
