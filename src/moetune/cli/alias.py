"""`moetune alias`."""

from __future__ import annotations

from typing import Annotated

import typer

from moetune.cli.app import app, handle_errors, write_text
from moetune.cli.options import ModelArg


@app.command("alias")
@handle_errors
def alias(
    name: Annotated[str, typer.Argument(help="The command to define, e.g. qwen.")],
    model: ModelArg,
    shell: Annotated[
        str | None, typer.Option(help="bash, zsh or fish (default: from $SHELL).")
    ] = None,
    ctx: Annotated[int | None, typer.Option(help="Pick the profile tuned at this context.")] = None,
    cache_type: Annotated[
        str | None, typer.Option(help="Pick the profile tuned with this cache type.")
    ] = None,
) -> None:
    """Print a shell function that starts the tuned llama-server, for your dotfiles.

    Add it with e.g. `moetune alias qwen MODEL >> ~/.bashrc`; `qwen --port 8081` passes
    extra arguments to llama-server.
    """
    import os

    from moetune.core.kvcache import parse_cache_type
    from moetune.jobs.alias import alias_text, check_name, parse_shell, shell_from_path
    from moetune.store.tuned import ProfileStore, model_identity, model_profile

    check_name(name)
    chosen = parse_shell(shell) if shell else shell_from_path(os.environ.get("SHELL"))
    cache = parse_cache_type(cache_type) if cache_type else None
    profile = model_profile(ProfileStore(), model_identity(model), ctx, cache)
    write_text(alias_text(name, profile, chosen))
