"""`moetune profiles list|show|rm`."""

from __future__ import annotations

from typing import Annotated

from moetune.cli.base import Argument, command, err, group, handle_errors
from moetune.cli.options import JsonOpt

group("profiles", help="Hardware profiles (for plan --gpu) and tuned profiles (saved by run).")


@command("list", group="profiles")
@handle_errors
def list_profiles(as_json: JsonOpt = False) -> None:
    """Hardware profiles shipped with moetune (and yours), and tuned profiles saved by run."""
    from moetune.jobs.profiles import every_profile
    from moetune.report.render import ProfilesView, render

    found = every_profile()
    render(ProfilesView(found.hardware, found.tuned, found.root, found.hardware_broken), as_json)


@command("show", group="profiles")
@handle_errors
def show(
    name: Annotated[
        str,
        Argument(
            help="A tuned profile's name (or its start), or a hardware profile id.", metavar="NAME"
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """One profile in full: a tuned one (with its llama-server command) or a hardware one."""
    from moetune.jobs.profiles import TunedFound, find_profile
    from moetune.report.render import HardwareView, TunedView, render

    found = find_profile(name)
    if isinstance(found, TunedFound):
        render(TunedView(found.profile, found.path), as_json)
    else:
        render(HardwareView(found), as_json)


@command("rm", group="profiles")
@handle_errors
def rm(
    names: Annotated[
        list[str], Argument(help="Tuned profile names (or their starts).", metavar="NAME...")
    ],
) -> None:
    """Delete tuned profiles (the next `moetune run` tunes again)."""
    from moetune.jobs.profiles import remove_profile

    for name in names:
        err().print(f"removed {remove_profile(name)}", highlight=False)
