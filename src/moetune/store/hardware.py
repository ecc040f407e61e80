"""Hardware profiles: what a GPU model offers (VRAM, memory bandwidth, PCIe link, FP16 matrix
throughput).

TOML files, one GPU each: the ones shipped in ``moetune/profiles_data/`` (documented in the
repository's ``profiles/``), then the user's own in ``$MOETUNE_HOME/hardware/``, which override
a shipped one of the same id (the file stem). Everything here returns data.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from moetune.errors import BadValueError, ProfileError, ProfileNotFoundError, denied
from moetune.store.files import DENIED_HINT, read_text, update_text
from moetune.store.paths import user_hardware_dir
from moetune.store.validate import validated
from moetune.units import MIB, parse_size

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable

    import tomllib
else:  # pragma: no cover - Python 3.10
    from importlib.abc import Traversable

    import tomli as tomllib

# One PCIe lane per direction: the transfer rate (GT/s, one bit per transfer and lane) times
# the share of it that carries data after the line encoding. PCI-SIG's PCI Express Base
# Specifications 1.0a-6.0 (tabulated in Wikipedia's "PCI Express" article): 2.5 and 5 GT/s
# with 8b/10b (gen 1-2); 8, 16 and 32 GT/s with 128b/130b (gen 3-5); 64 GT/s PAM4 with 256-byte
# FLITs (gen 6), of which 242 bytes are TLP and DLLP (236 + 6; 8 CRC and 6 FEC bytes are not).
PCIE_GT_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}


# The figures of a profile that the plan and the speed forecast read, each of which a profile's
# `derived` may name (computed from published specifications rather than published as such).
FIGURE_FIELDS = ("vram", "memory_bandwidth_gb_s", "pcie_gen", "pcie_lanes", "fp16_tflops")

SHIPPED_LABEL = "moetune/profiles_data/"  # where shipped profiles are, when not plain files


def shipped_hardware_dir() -> Traversable:
    """The hardware profiles installed with moetune (package data)."""
    return resources.files("moetune").joinpath("profiles_data")


class HardwareSpec(BaseModel):
    """What a hardware profile file holds (extra fields are an error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)  # as NVML / nvidia-smi (or llama.cpp's device list) report it
    aliases: list[str] = []
    vram: str  # a size as units.parse_size reads it: "24564MiB", "24G"
    memory_bandwidth_gb_s: float = Field(gt=0, le=100_000)
    pcie_gen: int = Field(ge=1, le=6)
    pcie_lanes: int
    # Peak dense FP16 matrix throughput (tensor / matrix cores / XMX), FP16 accumulate, without
    # sparsity, in TFLOPS; None: no public figure.
    fp16_tflops: float | None = Field(default=None, gt=0, le=100_000)
    derived: list[str] = []  # figures derived from published specifications, not published as such
    notes: str | None = None
    # written by `moetune run` into the user's own profile of the card (never a shipped one):
    # the runtime overhead it measured, the server's device memory (NVML) minus llama.cpp's
    # own buffers after the context was filled, in MiB (the largest so far), and how
    runtime_overhead_mib: int | None = Field(default=None, ge=0, le=1_048_576)
    runtime_overhead_measured: str | None = None

    @field_validator("vram")
    @classmethod
    def _size(cls, value: str) -> str:
        try:
            parse_size(value)
        except BadValueError as exc:
            raise ValueError(exc.message) from None
        return value

    @field_validator("derived")
    @classmethod
    def _derived(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for name in value:
            if name not in FIGURE_FIELDS:
                raise ValueError(f"{name!r} is not a figure ({', '.join(FIGURE_FIELDS)})")
            if name in info.data and info.data[name] is None:
                raise ValueError(f"{name!r} is derived but the profile does not give it")
        if len(set(value)) != len(value):
            raise ValueError("a figure is named twice")
        return value

    @field_validator("pcie_lanes")
    @classmethod
    def _lanes(cls, value: int) -> int:
        if value not in (1, 2, 4, 8, 16):
            raise ValueError("PCIe lanes are 1, 2, 4, 8 or 16")
        return value


class HardwareProfile(HardwareSpec):
    """A hardware profile with its id (the file stem) and where it was read from."""

    id: str
    source: str  # the file it was read from
    shipped: bool = False  # installed with moetune (not one of the user's own)

    @property
    def vram_bytes(self) -> int:
        return parse_size(self.vram)

    @property
    def memory_bandwidth_bytes_per_s(self) -> int:
        return round(self.memory_bandwidth_gb_s * 1e9)

    @property
    def pcie_bytes_per_s(self) -> int:
        return pcie_bandwidth_bytes_per_s(self.pcie_gen, self.pcie_lanes)

    @property
    def flops_per_s(self) -> float | None:
        """The FP16 matrix figure in FLOP/s (``fp16_tflops`` x 1e12); None where unknown."""
        return None if self.fp16_tflops is None else self.fp16_tflops * 1e12

    @property
    def runtime_overhead_bytes(self) -> int | None:
        """The measured runtime overhead (``runtime_overhead_mib``) in bytes; None: none."""
        return None if self.runtime_overhead_mib is None else self.runtime_overhead_mib * MIB


PROFILES_HINT = "fields: " + ", ".join(HardwareSpec.model_fields) + "; see profiles/README.md"


def pcie_bandwidth_bytes_per_s(gen: int, lanes: int) -> int:
    """One direction of a PCIe link (gen 1-6, lanes) in bytes per second: GT/s x encoding
    / 8 bits x lanes. ValueError for another generation."""
    if gen not in PCIE_GT_S:
        raise ValueError(f"PCIe generation {gen} is not one of 1-6")
    return round(PCIE_GT_S[gen] * 1e9 * PCIE_ENCODING[gen] / 8 * lanes)


def parse_hardware_profile(text: str, id: str, source: str) -> HardwareProfile:
    """One hardware profile from its TOML text; ProfileError names the file and the field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{source}: not valid TOML: {exc}", hint=PROFILES_HINT) from None
    except RecursionError:
        raise ProfileError(
            f"{source}: not valid TOML: nested too deeply", hint=PROFILES_HINT
        ) from None
    spec: HardwareSpec = validated(HardwareSpec, data, source, PROFILES_HINT)
    return HardwareProfile(**spec.model_dump(), id=id, source=source)


def _read_one(entry: Traversable, shipped: bool) -> HardwareProfile:
    stem = entry.name.removesuffix(".toml")
    source = str(entry) if isinstance(entry, Path) else f"{SHIPPED_LABEL}{entry.name}"
    try:
        text = read_text(entry) if isinstance(entry, Path) else entry.read_text("utf-8")
    except UnicodeDecodeError:
        raise ProfileError(f"{source}: not UTF-8 text", hint=PROFILES_HINT) from None
    except PermissionError as exc:
        raise denied(source, exc, hint=DENIED_HINT) from None
    except OSError as exc:
        raise ProfileError(f"{source}: cannot read: {exc.strerror or exc}") from None
    profile = parse_hardware_profile(text, stem, source)
    return profile.model_copy(update={"shipped": shipped})


def _read_dir(
    entries: Iterable[Traversable], shipped: bool
) -> list[HardwareProfile | ProfileError]:
    """Every ``*.toml`` profile among ``entries`` (each names the file it was read from), a
    broken one as its error."""
    found: list[HardwareProfile | ProfileError] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name.endswith(".toml") and not entry.name.startswith("."):
            try:
                found.append(_read_one(entry, shipped))
            except ProfileError as exc:
                exc.path = str(entry)
                found.append(exc)
    return found


def shipped_hardware_profiles() -> list[HardwareProfile]:
    """The profiles installed with moetune, each that loads (core/figures.py's class table
    is their median)."""
    read = _read_dir(shipped_hardware_dir().iterdir(), shipped=True)
    return [p for p in read if isinstance(p, HardwareProfile)]


def scan_hardware_profiles(
    user_dir: Path | None = None,
) -> tuple[list[HardwareProfile], list[ProfileError]]:
    """The shipped profiles, then the user's (``$MOETUNE_HOME/hardware``), by id; and the
    files that do not load."""
    user_dir = user_hardware_dir() if user_dir is None else user_dir
    read = _read_dir(shipped_hardware_dir().iterdir(), shipped=True)
    if user_dir.is_dir():
        read += _read_dir(user_dir.iterdir(), shipped=False)
    by_id = {p.id: p for p in read if isinstance(p, HardwareProfile)}
    broken = [p for p in read if isinstance(p, ProfileError)]
    return sorted(by_id.values(), key=lambda p: p.id), broken


def load_hardware_profiles(user_dir: Path | None = None) -> list[HardwareProfile]:
    """The shipped profiles, then the user's, by id; ProfileError for the first file that
    does not load (a command that looks one up may have meant it)."""
    profiles, broken = scan_hardware_profiles(user_dir)
    if broken:
        raise broken[0]
    return profiles


def gpu_key(text: str) -> str:
    """A GPU's name as names are compared: ``NVIDIA GeForce RTX 4090`` -> ``rtx4090``;
    ``rtx-4090`` -> ``rtx4090``."""
    text = re.sub(r"\b(nvidia|geforce)\b", "", text.lower())
    return re.sub(r"[^a-z0-9]", "", text)


def _names(profile: HardwareProfile) -> set[str]:
    return {gpu_key(n) for n in (profile.id, profile.name, *profile.aliases)}


def find_hardware_profile(
    query: str, profiles: list[HardwareProfile] | None = None
) -> HardwareProfile:
    """The profile called ``query`` (id, name or alias, loosely), or a ``.toml`` file path.
    ``profiles`` default to those that load; a broken file of the user's is the answer only
    when its name is ``query`` (another broken file does not stop the lookup)."""
    if query.endswith(".toml"):
        path = Path(query).expanduser()
        if not path.is_file():
            raise ProfileNotFoundError(f"no hardware profile file {path}")
        return _read_one(path, shipped=False)
    broken: list[ProfileError] = []
    if profiles is None:
        profiles, broken = scan_hardware_profiles()
    wanted = gpu_key(query)
    exact = [p for p in profiles if wanted in _names(p)]
    if len(exact) == 1:
        return exact[0]
    known = ", ".join(p.id for p in profiles)
    if len(exact) > 1:
        which = ", ".join(p.id for p in exact)
        raise BadValueError(f"GPU profile {query!r} is ambiguous ({which})")
    for error in broken:
        if error.path is not None and gpu_key(Path(error.path).stem) == wanted:
            raise error
    # a shortened name (``4080``) that is part of one card's names is that card; of several
    # cards' names, ambiguous: name them all
    partial = [p for p in profiles if wanted and any(wanted in name for name in _names(p))]
    if len(partial) == 1:
        return partial[0]
    if len(partial) > 1:
        which = ", ".join(f"{p.id} ({p.name})" for p in partial)
        raise BadValueError(
            f"GPU profile {query!r} is ambiguous: {which}",
            hint="name one of them with --gpu ID",
        )
    raise BadValueError(
        f"no hardware profile {query!r}",
        hint=f"known: {known}; add yours as {user_hardware_dir() / 'NAME.toml'}",
    )


def match_detected(
    gpu_name: str, vram_bytes: int | None, profiles: list[HardwareProfile]
) -> HardwareProfile | None:
    """The profile for a detected GPU: same name, and memory within 10 % when known."""
    wanted = gpu_key(gpu_name)
    for profile in profiles:
        if gpu_key(profile.name) != wanted:
            continue
        if vram_bytes is None or same_memory(profile.vram_bytes, vram_bytes):
            return profile
    return None


def same_memory(one: int, other: int) -> bool:
    """Whether two figures of a card's memory are the same card's: within 10 % of ``other``
    (a card sold as 24G reports 23.99 GiB; a profile's size is the sold one)."""
    return abs(one - other) <= 0.1 * other


OVERHEAD_KEYS = ("runtime_overhead_mib", "runtime_overhead_measured")
OVERHEAD_COMMENT = (
    "# Measured by `moetune run` on this card (the largest so far): llama-server's device\n"
    "# memory (NVML) minus llama.cpp's own buffers after the context was filled: the CUDA\n"
    "# context, cuBLAS and the pools. A plan for this card counts it as its runtime overhead.\n"
)


def _without_overhead(text: str) -> str:
    """``text`` without the lines ``record_runtime_overhead`` writes."""
    comment = set(OVERHEAD_COMMENT.splitlines())
    kept = [
        line
        for line in text.splitlines()
        if line not in comment and line.split("=")[0].strip() not in OVERHEAD_KEYS
    ]
    return "\n".join(kept).rstrip("\n") + "\n"


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def record_runtime_overhead(
    profile: HardwareProfile, mib: int, how: str, user_dir: Path | None = None
) -> tuple[Path, int, bool]:
    """Record a measured runtime overhead of ``profile``'s card in the user's own profile
    (``$MOETUNE_HOME/hardware/ID.toml``; a shipped profile is copied there first, its
    comments with it, and the copy then replaces it): the largest figure so far is kept.
    Returns (the file, the figure it holds, whether this one was written)."""
    user_dir = user_hardware_dir() if user_dir is None else user_dir
    path = user_dir / f"{profile.id}.toml"
    written = False

    def merge(old: str | None) -> str:
        nonlocal written
        base = old
        if base is None and profile.shipped:
            base = shipped_hardware_dir().joinpath(f"{profile.id}.toml").read_text("utf-8")
        elif base is None:
            base = read_text(Path(profile.source))
        current = parse_hardware_profile(base, profile.id, str(path))
        if current.runtime_overhead_mib is not None and current.runtime_overhead_mib >= mib:
            return base
        written = True
        return (
            _without_overhead(base)
            + "\n"
            + OVERHEAD_COMMENT
            + f"runtime_overhead_mib = {mib}\n"
            + f"runtime_overhead_measured = {_toml_string(how)}\n"
        )

    try:
        user_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadValueError(f"cannot write {path}: {exc.strerror or exc}") from None
    update_text(path, merge)
    kept = parse_hardware_profile(read_text(path), profile.id, str(path)).runtime_overhead_mib
    assert kept is not None
    return path, kept, written
