"""Tuned profiles: what `moetune run` found, as JSON files in ``$MOETUNE_HOME/profiles/``.

One per model file, device set, target, context and cache types (each gets its own name, so
tuning for a second target keeps the first). A saved profile matches a later run only when the
model file (name, size, a hash of its header), the offload device (name, memory), the llama.cpp
build, the target and the pass-through arguments are all the same; anything else makes it out
of date. Everything here returns data; report/profiles.py renders it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from moetune.errors import BadValueError, ProfileError, ProfileNotFoundError, denied
from moetune.gguf.split import SPLIT_NAME_RE, read_model
from moetune.records.server import Device, ServerInfo
from moetune.store.files import DENIED_HINT, json_files, parse_json, read_text, save_text
from moetune.store.hardware import gpu_key, same_memory
from moetune.store.paths import tuned_dir
from moetune.store.validate import validated
from moetune.units import GIB, KIB, MIB, TIB, format_bytes, size_arg, tokens_arg

# --- tuned profiles: identities ----------------------------------------------------------------


class ModelIdentity(BaseModel):
    """Which model file: name, size and a hash of the header (metadata and tensor table)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file_name: str
    file_bytes: int = Field(ge=0)
    header_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    path: str  # where it was when tuned: informative, not compared


class DeviceIdentity(BaseModel):
    """The offload device as llama-server lists it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # "NVIDIA GeForce RTX 4090", or "127.0.0.1:50052" for an RPC server
    device: str  # CUDA0, RPC0, Vulkan0, ...
    vram_total_bytes: int = Field(ge=0)


class BuildIdentity(BaseModel):
    """The llama.cpp build; when it recorded neither build number nor commit, its binary."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    build_number: int | None
    commit: str | None
    version: str | None
    binary: str
    binary_fingerprint: str  # "size:mtime_ns" of the llama-server file

    def same_as(self, other: BuildIdentity) -> bool:
        if self.build_number or self.commit or other.build_number or other.commit:
            return (self.build_number, self.commit) == (other.build_number, other.commit)
        return (self.version, self.binary, self.binary_fingerprint) == (
            other.version,
            other.binary,
            other.binary_fingerprint,
        )

    def describe(self) -> str:
        if self.build_number or self.commit:
            return f"build {self.build_number or '?'} ({self.commit or 'commit unknown'})"
        return f"{self.version or 'unknown version'} (unrecorded build, {self.binary})"


class TogetherSet(BaseModel):
    """Models tuned to stay loaded together (``run A B --together``): the set's id (the same
    in each member's profile) and its members' model files, in the order they were named."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[0-9a-f]{8,64}$")
    members: list[str] = Field(min_length=2)  # the model files' names
    weights: list[float] = []  # --weights (empty: equal)


def together_set(
    models: Sequence[ModelIdentity], weights: Sequence[float], targets: Sequence[int]
) -> TogetherSet:
    """The set of ``models`` tuned together within ``targets`` (each device's budget, shared),
    its id a digest of the members' headers, the weights and the targets."""
    text = "|".join(
        [
            *(f"{m.file_name}:{m.header_sha256}" for m in models),
            repr(list(weights)),
            repr(list(targets)),
        ]
    )
    return TogetherSet(
        id=hashlib.sha256(text.encode()).hexdigest()[:8],
        members=[m.file_name for m in models],
        weights=list(weights) if len(set(weights)) > 1 else [],
    )


class TuneSettings(BaseModel):
    """What the tuning was asked for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_ctx: int = Field(gt=0)
    type_k: str
    type_v: str
    target_bytes: int = Field(gt=0)
    device_targets: list[int] = []  # several devices: each one's target
    extra_args: list[str] = []  # the pass-through arguments (after --), as profiles store them
    objective: str | None = None  # run --objective / --workload: what the winner is fastest at
    # GGML_OP_OFFLOAD_MIN_BATCH the server ran with (None: unset, ggml's 32); the command
    # needs it set beside its flags
    op_offload_min_batch: int | None = Field(default=None, ge=1)
    # run --parallel N: the slots it ran with, -np N (None: not given, llama-server's auto)
    parallel: int | None = Field(default=None, ge=1)
    # the moetune command that tunes it again (server, target, context, after --): not compared
    command: list[str] = []
    together: TogetherSet | None = None  # tuned loaded together with other models (run --together)

    def same_as(self, other: TuneSettings) -> bool:
        return self.model_dump(exclude={"command"}) == other.model_dump(exclude={"command"})


class TuneKey(BaseModel):
    """Everything a tuned result depends on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelIdentity
    gpu: DeviceIdentity
    llama_cpp: BuildIdentity
    settings: TuneSettings
    devices: tuple[DeviceIdentity, ...] = ()  # several devices, in order (gpu: the first)


def _hash_header(path: Path, n_bytes: int, digest: Any) -> None:
    with path.open("rb") as file:
        while n_bytes > 0 and (chunk := file.read(min(n_bytes, 1 << 20))):
            digest.update(chunk)
            n_bytes -= len(chunk)


def model_identity(path: str | os.PathLike[str]) -> ModelIdentity:
    """Name, total size and SHA-256 of the header bytes of every shard."""
    model = read_model(path)
    digest = hashlib.sha256()
    for shard in model.shards:
        _hash_header(shard.path, min(shard.data_offset, shard.file_bytes), digest)
    first = model.paths[0]
    return ModelIdentity(
        file_name=first.name,
        file_bytes=model.file_bytes,
        header_sha256=digest.hexdigest(),
        path=str(first.resolve()),
    )


def device_identity(device: Device) -> DeviceIdentity:
    return DeviceIdentity(
        name=device.description, device=device.name, vram_total_bytes=device.total_bytes
    )


def build_identity(info: ServerInfo) -> BuildIdentity:
    try:
        stat = info.path.stat()
        fingerprint = f"{stat.st_size}:{stat.st_mtime_ns}"
    except OSError:
        fingerprint = "unknown"
    return BuildIdentity(
        build_number=info.build_number,
        commit=info.commit,
        version=info.version,
        binary=str(info.path),
        binary_fingerprint=fingerprint,
    )


# --- tuned profiles: the files -----------------------------------------------------------------


class TunedPlacement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    n_cpu_moe: int | None = Field(default=None, ge=0)  # with override_tensor: N beside it
    override_tensor: list[str] = []  # the -ot form's rules (the command holds them, not N)
    tensor_split: list[float] = []  # -ts on several devices
    n_ubatch: int | None = Field(default=None, gt=0)  # run --objective's -ub (None: the run's)


class TunedFigures(BaseModel):
    """What the tuned placement measured: its device memory and speeds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vram_bytes: int | None = None
    ttft_s: float | None = None
    decode_tps: float | None = None  # median of the timed requests
    decode_tps_min: float | None = None
    decode_tps_max: float | None = None
    repeats: int = 0  # timed requests behind decode_tps (0: one sample, an older profile)
    prompt_tps: float | None = None


class TunedProfile(BaseModel):
    """One saved tuning result (a JSON file in ``$MOETUNE_HOME/profiles``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    tuned_at: str
    confirmed_at: str | None = None
    model: ModelIdentity
    gpu: DeviceIdentity
    llama_cpp: BuildIdentity
    settings: TuneSettings
    placement: TunedPlacement
    measured: TunedFigures
    command: list[str] = Field(min_length=1)  # llama-server's argv, argv[0] the binary tuned with
    devices: list[DeviceIdentity] = []  # several devices, in llama.cpp's order

    @property
    def device_set(self) -> list[DeviceIdentity]:
        """Every device it was tuned on, in llama.cpp's order (one: the GPU)."""
        return list(self.devices) or [self.gpu]

    def describe_devices(self) -> str:
        """The whole device set in one phrase: ``NVIDIA GeForce RTX 4090 (23.99 GiB)``, or
        ``RPC0 127.0.0.1:50052 (23.50 GiB) + RPC1 127.0.0.1:50053 (23.50 GiB)``."""
        found = self.device_set
        if len(found) == 1:
            return f"{found[0].name} ({format_bytes(found[0].vram_total_bytes)})"
        return " + ".join(
            f"{d.device} {d.name} ({format_bytes(d.vram_total_bytes)})" for d in found
        )

    @property
    def key(self) -> TuneKey:
        return TuneKey(
            model=self.model,
            gpu=self.gpu,
            llama_cpp=self.llama_cpp,
            settings=self.settings,
            devices=tuple(self.devices),
        )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "model"


def profile_name(key: TuneKey, *, legacy: bool = False) -> str:
    """``Qwen3-30B-A3B-Q4_K_M-32k-q8_0-22.5G-1f0c2a``: the model file's stem, context, cache
    types, target (as typed: units.size_arg), a short tag of the devices, the objective and
    the slots (``-np4``: run --parallel 4): one profile per thing a result depends on (a
    second target or device set gets its own file).
    ``legacy``: the name moetune gave the same profile before, its targets in whole units
    (``23040M``): a profile saved then keeps it (ProfileStore.match finds it by it)."""
    s = key.settings
    split = SPLIT_NAME_RE.match(key.model.file_name)
    stem = split["prefix"] if split else key.model.file_name.removesuffix(".gguf")
    cache = s.type_k if s.type_k == s.type_v else f"{s.type_k}-{s.type_v}"
    devices = "/".join(
        f"{d.device}|{d.name}|{d.vram_total_bytes}" for d in (key.devices or (key.gpu,))
    ).encode()
    tag = hashlib.sha256(devices).hexdigest()[:6]
    spell = _whole_units if legacy else size_arg
    targets = "_".join(spell(t) for t in (s.device_targets or [s.target_bytes]))
    goal = f"-{_slug(s.objective)}" if s.objective else ""
    slots = f"-np{s.parallel}" if s.parallel is not None else ""  # run --parallel N
    together = f"-together-{s.together.id}" if s.together is not None else ""
    tail = f"{goal}{slots}{together}"
    return f"{_slug(stem)}-{tokens_arg(s.n_ctx)}-{_slug(cache)}-{targets}-{tag}{tail}"


def _whole_units(n_bytes: int) -> str:
    """A size in the largest unit that divides it (``23040M``): how profile names gave their
    targets before they were written as typed."""
    for unit, scale in (("T", TIB), ("G", GIB), ("M", MIB), ("K", KIB)):
        if n_bytes and n_bytes % scale == 0:
            return f"{n_bytes // scale}{unit}"
    return f"{n_bytes}B" if n_bytes else "0"


def retune_command(profile: TunedProfile) -> list[str]:
    """The ``moetune run ... --retune`` that tunes ``profile`` again, as the user first typed
    it (server, target, context, cache types and the arguments after ``--``)."""
    command = list(profile.settings.command) or ["moetune", "run", profile.model.path]
    at = command.index("--") if "--" in command else len(command)
    return [*command[:at], "--retune", *command[at:]]


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def mismatches(saved: TuneKey, wanted: TuneKey) -> list[str]:
    """Why a saved profile does not apply to this run (empty: it matches)."""
    reasons = []
    if saved.model.model_dump(exclude={"path"}) != wanted.model.model_dump(exclude={"path"}):
        reasons.append(f"the model file changed ({wanted.model.file_name}: size or header)")
    if saved.devices != wanted.devices:
        reasons.append("the devices changed: " + ", ".join(d.device for d in wanted.devices))
    elif saved.gpu != wanted.gpu:
        reasons.append(
            f"the GPU changed (was {saved.gpu.name}, {format_bytes(saved.gpu.vram_total_bytes)}; "
            f"now {wanted.gpu.name}, {format_bytes(wanted.gpu.vram_total_bytes)})"
        )
    if not saved.llama_cpp.same_as(wanted.llama_cpp):
        reasons.append(
            f"llama.cpp changed (was {saved.llama_cpp.describe()}, "
            f"now {wanted.llama_cpp.describe()})"
        )
    if not saved.settings.same_as(wanted.settings):
        reasons.append("it was tuned for another target or other arguments after --")
    return reasons


class Match(BaseModel):
    """A saved profile that applies to this run, or why none does."""

    name: str
    profile: TunedProfile | None
    notes: list[str]


class ProfileStore:
    """Tuned profiles as JSON files in one directory."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = tuned_dir() if root is None else root

    def path_for(self, name: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name) or name.startswith("."):
            raise BadValueError(f"not a profile name: {name!r}")
        return self.root / f"{name}.json"

    def load(self, name: str) -> TunedProfile:
        path = self.path_for(name)
        hint = "remove it with `moetune profiles rm` and tune again"
        try:
            text = read_text(path)
        except FileNotFoundError:
            if path.is_symlink():
                raise ProfileError(
                    f"{path}: a link to {path.readlink()}, which does not exist", hint=hint
                ) from None
            raise ProfileNotFoundError(
                f"no tuned profile {name!r}", hint="`moetune profiles list` shows them"
            ) from None
        except UnicodeDecodeError:
            raise ProfileError(f"{path}: not UTF-8 text", hint=hint) from None
        except PermissionError as exc:
            raise denied(path, exc, hint=DENIED_HINT) from None
        except OSError as exc:
            raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}", hint=hint) from None
        return parse_tuned_profile(text, str(path))

    def resolve(self, name: str) -> str:
        """The profile called ``name``, or the one whose name starts with it."""
        names = self.names()
        if name in names:
            return name
        found = [n for n in names if n.startswith(name)]
        if len(found) == 1:
            return found[0]
        if found:
            raise BadValueError(
                f"{name!r} names {len(found)} tuned profiles",
                hint="give more of the name: " + ", ".join(found),
            )
        raise ProfileNotFoundError(
            f"no tuned profile {name!r}", hint="`moetune profiles list` shows them"
        )

    def names(self) -> list[str]:
        """The saved profiles' names; none where there is no folder yet (PermissionDeniedError
        where it may not be listed)."""
        return sorted(p.stem for p in json_files(self.root))

    def scan(self) -> list[TunedProfile | ProfileError]:
        """Every tuned profile; a broken file is returned as its error."""
        found: list[TunedProfile | ProfileError] = []
        for name in self.names():
            try:
                found.append(self.load(name))
            except ProfileError as exc:
                found.append(exc)
        return found

    def good(self, warn: Callable[[str], None]) -> list[TunedProfile]:
        """The tuned profiles that load; ``warn`` names each broken file."""
        found = []
        for entry in self.scan():
            if isinstance(entry, ProfileError):
                warn(f"skipping a broken tuned profile: {entry.message}")
            else:
                found.append(entry)
        return found

    def save(self, profile: TunedProfile) -> Path:
        """Write atomically (a crash never leaves half a file)."""
        return save_text(self.path_for(profile.name), profile.model_dump_json(indent=2) + "\n")

    def remove(self, name: str) -> Path:
        path = self.path_for(name)
        try:
            path.unlink()
        except FileNotFoundError:
            raise ProfileNotFoundError(
                f"no tuned profile {name!r}", hint="`moetune profiles list` shows them"
            ) from None
        except PermissionError as exc:
            raise denied(path, exc, doing="cannot remove", hint=DENIED_HINT) from None
        except OSError as exc:
            raise ProfileError(f"cannot remove {path}: {exc.strerror or exc}") from None
        return path

    def match(self, key: TuneKey) -> Match:
        """The saved profile for this model, context and cache types, if it still applies;
        one saved under its legacy name (profile_name) is found by it and keeps it."""
        name = profile_name(key)
        legacy = profile_name(key, legacy=True)
        if not os.path.lexists(self.path_for(name)) and os.path.lexists(self.path_for(legacy)):
            name = legacy
        try:
            saved = self.load(name)
        except ProfileNotFoundError:
            return Match(name=name, profile=None, notes=[])
        except ProfileError as exc:
            return Match(name=name, profile=None, notes=[f"ignoring a broken profile: {exc}"])
        if reasons := mismatches(saved.key, key):
            note = f"tuned profile {name} is out of date: {'; '.join(reasons)}"
            return Match(name=name, profile=None, notes=[note])
        return Match(name=name, profile=saved, notes=[])

    def for_model(self, identity: ModelIdentity, warn: Callable[[str], None]) -> list[TunedProfile]:
        """Profiles of this model file name, newest first (they may be out of date); ``warn``
        names each broken profile file."""
        return _newest([p for p in self.good(warn) if p.model.file_name == identity.file_name])


def parse_tuned_profile(text: str, source: str) -> TunedProfile:
    try:
        data = parse_json(text)
    except ValueError as exc:
        raise ProfileError(
            f"{source}: not valid JSON: {exc}", hint="remove it and run `moetune run` again"
        ) from None
    hint = "fix it, or remove it with `moetune profiles rm` and tune again"
    profile: TunedProfile = validated(TunedProfile, data, source, hint)
    return profile


def new_profile(
    key: TuneKey,
    n_cpu_moe: int,
    measured: TunedFigures,
    command: list[str],
    previous: TunedProfile | None = None,
    *,
    tensor_split: list[float] | None = None,
    n_ubatch: int | None = None,
    name: str | None = None,
    override_tensor: list[str] | None = None,
) -> TunedProfile:
    """The profile to save for a run's winner (``previous``: the one it confirmed; ``name``:
    the name it is saved under, default profile_name's; ``override_tensor``: the ``-ot``
    form's rules where it won, ``n_cpu_moe`` the N it was planned beside)."""
    s = key.settings
    stamp = now()
    return TunedProfile(
        name=name or profile_name(key),
        tuned_at=previous.tuned_at if previous else stamp,
        confirmed_at=stamp if previous else None,
        model=key.model,
        gpu=key.gpu,
        llama_cpp=key.llama_cpp,
        settings=s,
        placement=TunedPlacement(
            n_cpu_moe=n_cpu_moe,
            override_tensor=override_tensor or [],
            tensor_split=tensor_split or [],
            n_ubatch=n_ubatch,
        ),
        measured=measured,
        command=command,
        devices=list(key.devices),
    )


class Selectors(BaseModel):
    """What ``alias`` and ``export`` choose a tuned profile by, beside the context and cache
    type (as ``run`` does): its name (``--profile``, or the start of it), its targets
    (``--target-vram``, one or one per device) and its device set: its RPC servers
    (``--rpc``), each device's memory (``--vram``, one size or one per device, within 10 %
    of what was detected, as a hardware profile matches a card) and the GPU's name (``--gpu``:
    one GPU of that hardware profile); and its slots (``--parallel N``: tuned with -np N)."""

    model_config = ConfigDict(frozen=True)

    name: str | None = None
    targets: tuple[int, ...] | None = None
    rpc: tuple[str, ...] | None = None
    vram: tuple[int, ...] | None = None
    gpu_name: str | None = None
    parallel: int | None = None  # --parallel N: tuned with -np N

    def admits(self, profile: TunedProfile) -> bool:
        if self.name is not None and not profile.name.startswith(self.name):
            return False
        if self.parallel is not None and profile.settings.parallel != self.parallel:
            return False
        if self.targets is not None and not _each(_targets(profile), self.targets, _same):
            return False
        devices = profile.device_set
        if self.vram is not None:
            totals = [d.vram_total_bytes for d in devices]
            if not _each(totals, self.vram, same_memory):
                return False
        if self.gpu_name is not None and (
            len(devices) != 1 or gpu_key(devices[0].name) != gpu_key(self.gpu_name)
        ):
            return False
        return self.rpc is None or _servers(profile) == self.rpc


def _same(mine: int, wanted: int) -> bool:
    return mine == wanted


def _each(mine: Sequence[int], wanted: tuple[int, ...], same: Callable[[int, int], bool]) -> bool:
    """Whether ``mine`` (one figure per device) is ``wanted``: one figure for every device, or
    one per device."""
    per_device = wanted * len(mine) if len(wanted) == 1 else wanted
    return len(per_device) == len(mine) and all(map(same, mine, per_device))


def _targets(profile: TunedProfile) -> list[int]:
    s = profile.settings
    return s.device_targets or [s.target_bytes]


def _servers(profile: TunedProfile) -> tuple[str, ...]:
    """The RPC servers it was tuned on, in order (their device names are RPC0, RPC1...)."""
    return tuple(d.name for d in profile.device_set if d.device.startswith("RPC"))


def _telling(profile: TunedProfile, among: Sequence[TunedProfile]) -> str:
    """The selectors that tell ``profile`` apart from the others ``among``."""
    said: dict[str, Callable[[TunedProfile], str]] = {
        "--ctx": lambda p: tokens_arg(p.settings.n_ctx),
        "--cache-type": lambda p: p.settings.type_k,
        "--target-vram": lambda p: ",".join(size_arg(t) for t in _targets(p)),
        "--rpc": lambda p: ",".join(_servers(p)) or "none",
        "--vram": lambda p: ",".join(size_arg(d.vram_total_bytes) for d in p.device_set),
        "--parallel": lambda p: str(p.settings.parallel or "none"),
    }
    parts = [
        f"{flag} {value(profile)}"
        for flag, value in said.items()
        if len({value(p) for p in among}) > 1
    ]
    return ", ".join(parts) or f"--profile {profile.name}"


def model_profile(
    store: ProfileStore,
    identity: ModelIdentity,
    n_ctx: int | None = None,
    cache_type: str | None = None,
    beside: Sequence[tuple[str, str]] = (),
    *,
    warn: Callable[[str], None],
    select: Selectors | None = None,
) -> TunedProfile:
    """The tuned profile for this model file (at ``n_ctx``/``cache_type`` if given, tuned
    with the files ``beside`` it among its arguments: ``("--mmproj", FILE)``, ``("--draft",
    FILE)``, and as ``select`` says); of several that match, the newest, named in a warning
    beside the others (with what tells each apart: how to choose it); ``warn`` names each
    broken profile file, and when none is found the error says how many were skipped."""
    broken: list[str] = []

    def skipped(line: str) -> None:
        broken.append(line)
        warn(line)

    found = _chosen(
        _newest(store.for_model(identity, skipped)), n_ctx, cache_type, beside, select, warn=warn
    )
    if not found:
        with_files = f" with {', '.join(Path(f).name for _, f in beside)}" if beside else ""
        raise ProfileNotFoundError(
            f"no tuned profile for {identity.file_name}"
            + (f" at ctx {n_ctx}" if n_ctx else "")
            + with_files
            + (f" ({len(broken)} broken tuned profile(s) skipped)" if broken else ""),
            hint=f"run `moetune run {identity.path}"
            + "".join(f" {flag} {file}" for flag, file in beside)
            + "` first",
        )
    profile = found[0]
    if reasons := mismatches(profile.key, profile.key.model_copy(update={"model": identity})):
        raise ProfileError(
            f"tuned profile {profile.name} is out of date: {'; '.join(reasons)}",
            hint="tune again: " + shlex.join(retune_command(profile)),
        )
    return profile


def every_model_profile(
    store: ProfileStore,
    n_ctx: int | None = None,
    cache_type: str | None = None,
    *,
    warn: Callable[[str], None],
    select: Selectors | None = None,
) -> list[TunedProfile]:
    """The tuned profile of each model file that has one (at ``n_ctx``/``cache_type`` if
    given, and as ``select`` says), newest first; of a model with several that match, the
    newest, as model_profile chooses it."""
    by_model: dict[str, list[TunedProfile]] = {}
    for profile in store.good(warn):
        by_model.setdefault(profile.model.path, []).append(profile)
    found = [
        chosen[0]
        for profiles in by_model.values()
        if (chosen := _chosen(_newest(profiles), n_ctx, cache_type, (), select, warn=warn))
    ]
    return _newest(found)


def _newest(profiles: list[TunedProfile]) -> list[TunedProfile]:
    return sorted(profiles, key=lambda p: p.confirmed_at or p.tuned_at, reverse=True)


def _chosen(
    profiles: list[TunedProfile],
    n_ctx: int | None,
    cache_type: str | None,
    beside: Sequence[tuple[str, str]],
    select: Selectors | None,
    *,
    warn: Callable[[str], None],
) -> list[TunedProfile]:
    """The ``profiles`` of one model (newest first) that match: at most one. A profile named
    exactly by ``--profile`` is the one; of several others, the newest (what a user who tuned
    one model on two device sets, or at two targets, means by the model), and ``warn`` says
    so, each other one listed with what tells it apart (the option that chooses it). A
    profile tuned together with other models is chosen only by its whole name."""
    chosen = select or Selectors()
    found = [
        p
        for p in profiles
        if (n_ctx is None or p.settings.n_ctx == n_ctx)
        and (cache_type is None or cache_type in (p.settings.type_k, p.settings.type_v))
        and all(file in p.settings.extra_args for _, file in beside)
        and chosen.admits(p)
    ]
    exact = [p for p in found if p.name == chosen.name]
    # a profile tuned together with other models (run --together) is chosen as one of its
    # set (together_profiles), or by its whole name
    found = exact or [p for p in found if p.settings.together is None]
    if len(found) > 1:
        newest, others = found[0], found[1:]
        warn(
            f"{len(found)} tuned profiles of {newest.model.file_name} match: using the newest, "
            f"{newest.name} ({_telling(newest, found)}); "
            + "; ".join(f"{p.name} ({_telling(p, found)})" for p in others)
            + " also (choose one with --profile NAME, or with the option shown beside it)"
        )
    return found[:1]


def together_profiles(
    profiles: Sequence[TunedProfile],
    models: Sequence[ModelIdentity],
    *,
    n_ctx: int | None = None,
    targets: Sequence[int] = (),
) -> list[TunedProfile] | None:
    """The tuned profiles of ``models`` tuned together as one set (``run A B --together``),
    in the order of ``models``: the newest set whose members are exactly these model files
    (name, size and header), at context ``n_ctx`` and within ``targets`` where given; None
    where no set has them all."""
    wanted = [m.model_dump(exclude={"path"}) for m in models]
    sets: dict[str, dict[int, TunedProfile]] = {}
    for profile in profiles:
        found = profile.settings.together
        if found is None or found.members != [m.file_name for m in models]:
            continue
        if n_ctx is not None and profile.settings.n_ctx != n_ctx:
            continue
        mine_targets = _targets(profile)
        if targets and mine_targets != [
            targets[min(i, len(targets) - 1)] for i in range(len(mine_targets))
        ]:
            continue
        mine = profile.model.model_dump(exclude={"path"})
        if mine not in wanted:
            continue
        sets.setdefault(found.id, {})[wanted.index(mine)] = profile
    complete = [members for members in sets.values() if len(members) == len(models)]
    if not complete:
        return None
    newest = max(complete, key=lambda ms: max(p.confirmed_at or p.tuned_at for p in ms.values()))
    return [newest[i] for i in range(len(models))]
