"""``moetune profiles``: the hardware profiles (shipped and the user's) and the tuned ones (saved
by run), listed, found by name, and removed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from moetune.errors import BadValueError, ProfileError, ProfileNotFoundError

if TYPE_CHECKING:
    from moetune.store.hardware import HardwareProfile
    from moetune.store.tuned import TunedProfile


class Profiles(NamedTuple):
    """Every hardware profile (and the files of them that do not load), and every tuned one
    (those that do not load as errors) in the folder ``root``."""

    hardware: list[HardwareProfile]
    hardware_broken: list[ProfileError]
    tuned: list[TunedProfile | ProfileError]
    root: str


class TunedFound(NamedTuple):
    """A tuned profile, and the file it is kept in."""

    profile: TunedProfile
    path: str


def every_profile() -> Profiles:
    from moetune.store.hardware import scan_hardware_profiles
    from moetune.store.tuned import ProfileStore

    hardware, broken = scan_hardware_profiles()
    store = ProfileStore()
    return Profiles(hardware, broken, store.scan(), str(store.root))


def _hardware_or_none(name: str) -> HardwareProfile | None:
    from moetune.store.hardware import find_hardware_profile

    try:
        return find_hardware_profile(name)
    except (ProfileNotFoundError, BadValueError):
        return None


def find_profile(name: str) -> TunedFound | HardwareProfile:
    """The tuned profile of ``name`` (or its start), else the hardware profile of that id."""
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
        return hardware
    return TunedFound(tuned, str(store.path_for(name)))


def remove_profile(name: str) -> Path:
    """Delete the tuned profile of ``name`` (or its start); its file. A hardware profile's
    name is refused."""
    from moetune.store.tuned import ProfileStore

    store = ProfileStore()
    try:
        found = store.resolve(name)
    except ProfileNotFoundError:
        if _hardware_or_none(name) is not None:
            raise BadValueError(
                f"{name!r} is a hardware profile: only tuned profiles can be removed",
                hint="a hardware profile of your own lives in $MOETUNE_HOME/hardware/",
            ) from None
        raise
    return store.remove(found)
