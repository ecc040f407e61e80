"""`moetune profiles list|show|rm`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from moetune.cli.base import Argument, command, err, group, handle_errors
from moetune.cli.options import JsonOpt

if TYPE_CHECKING:
    from moetune.store.hardware import HardwareProfile

group("profiles", help="Hardware profiles (for plan --gpu) and tuned profiles (saved by run).")


@command("list", group="profiles")
@handle_errors
def list_profiles(as_json: JsonOpt = False) -> None:
    """Hardware profiles shipped with moetune (and yours), and tuned profiles saved by run."""
    from moetune.report.render import ProfilesView, render
    from moetune.store.hardware import scan_hardware_profiles
    from moetune.store.tuned import ProfileStore

    hardware, broken = scan_hardware_profiles()
    store = ProfileStore()
    render(ProfilesView(hardware, store.scan(), str(store.root), broken), as_json)


def _hardware_or_none(name: str) -> HardwareProfile | None:
    from moetune.errors import BadValueError, ProfileNotFoundError
    from moetune.store.hardware import find_hardware_profile

    try:
        return find_hardware_profile(name)
    except (ProfileNotFoundError, BadValueError):
        return None


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
    from moetune.errors import ProfileNotFoundError
    from moetune.report.render import HardwareView, TunedView, render
    from moetune.store.tuned import ProfileStore

    store = ProfileStore()
    try:
        name = store.resolve(name)
        tuned = store.load(name)
    except ProfileNotFoundError:
        if (hardware := _hardware_or_none(name)) is None:
            raise ProfileNotFoundError(
                f"no tuned or hardware profile {name!r}", hint="`moetune profiles list` shows them"
            ) from None
        render(HardwareView(hardware), as_json)
        return
    render(TunedView(tuned, str(store.path_for(name))), as_json)


@command("rm", group="profiles")
@handle_errors
def rm(
    names: Annotated[
        list[str], Argument(help="Tuned profile names (or their starts).", metavar="NAME...")
    ],
) -> None:
    """Delete tuned profiles (the next `moetune run` tunes again)."""
    from moetune.errors import BadValueError, ProfileNotFoundError
    from moetune.store.tuned import ProfileStore

    store = ProfileStore()
    for name in names:
        try:
            found = store.resolve(name)
        except ProfileNotFoundError:
            if _hardware_or_none(name) is not None:
                raise BadValueError(
                    f"{name!r} is a hardware profile: only tuned profiles can be removed",
                    hint="a hardware profile of your own lives in $MOETUNE_HOME/hardware/",
                ) from None
            raise
        err().print(f"removed {store.remove(found)}", highlight=False)
