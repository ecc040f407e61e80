"""`moetune alias`."""

from __future__ import annotations

from typing import Annotated

import typer

from moetune.cli.app import app, handle_errors, write_text
from moetune.cli.options import Command, CtxOpt, DraftOpt, MmprojOpt, ModelArg, PickCacheTypeOpt


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
) -> None:
    """Print a shell function that starts the tuned llama-server, for your dotfiles.

    Add it with e.g. `moetune alias qwen MODEL >> ~/.bashrc`; `qwen --port 8081` passes
    extra arguments to llama-server. With --mmproj/--draft: the profile tuned with them.
    """
    import os

    from moetune.cli.models import open_model, require_weights
    from moetune.errors import BadValueError
    from moetune.jobs.alias import alias_text, check_name, parse_shell, shell_from_path
    from moetune.store.tuned import ProfileStore, model_identity, model_profile

    check_name(name)
    chosen = parse_shell(shell) if shell else shell_from_path(os.environ.get("SHELL"))
    if ctx is not None and ctx.is_max:
        raise BadValueError("alias picks the profile tuned at one context: give --ctx N")
    tokens = ctx.tokens if ctx is not None else None
    beside = [(flag, str(path.absolute())) for flag, path in (("--mmproj", mmproj),
              ("--draft", draft)) if path is not None]  # fmt: skip
    named = require_weights(open_model(model))  # a tuned profile is of a file on disk
    assert named.path is not None
    profile = model_profile(ProfileStore(), model_identity(named.path), tokens, cache_type,
                            beside)  # fmt: skip
    write_text(alias_text(name, profile, chosen))
