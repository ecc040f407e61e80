"""Hardware profiles (what a GPU model offers) and tuned profiles (what `moetune run` found).

Hardware profiles are TOML files, one GPU each: the ones shipped in ``moetune/profiles_data/``
(documented in the repository's ``profiles/``), then the user's own in
``$MOETUNE_HOME/hardware/``, which override a shipped one of the same id (the file stem).

Tuned profiles are JSON files in ``$MOETUNE_HOME/profiles/``, one per model file, context and
cache types. A saved profile matches a later run only when the model file (name, size, a hash
of its header), the offload device (name, memory), the llama.cpp build, the target and the
pass-through arguments are all the same; anything else makes it out of date.

``MOETUNE_HOME`` defaults to the user config dir (``$XDG_CONFIG_HOME/moetune``, usually
``~/.config/moetune``). Everything here returns data; report/profiles.py renders it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from platformdirs import user_config_dir
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from moetune.errors import BadValueError, ExitCode, MoetuneError
from moetune.gguf.split import SPLIT_NAME_RE, read_model
from moetune.server import Device, ServerInfo
from moetune.units import format_bytes, parse_size

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable

    import tomllib
else:  # pragma: no cover - Python 3.10
    from importlib.abc import Traversable

    import tomli as tomllib

ENV_HOME = "MOETUNE_HOME"
# Usable bandwidth of one PCIe lane per direction, GB/s (after 8b/10b or 128b/130b encoding).
PCIE_LANE_GB_S = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


class ProfileError(BadValueError):
    """A profile file cannot be used: not TOML/JSON, or a field is missing, unknown or wrong."""


class ProfileNotFoundError(MoetuneError):
    """No hardware or tuned profile has the name asked for."""

    exit_code = ExitCode.FILE_NOT_FOUND


# --- where things live -------------------------------------------------------------------------


def moetune_home() -> Path:
    """``$MOETUNE_HOME``, else the user config dir (XDG on Linux)."""
    if home := os.environ.get(ENV_HOME):
        return Path(home).expanduser()
    return Path(user_config_dir("moetune", appauthor=False))


def tuned_dir() -> Path:
    return moetune_home() / "profiles"


def user_hardware_dir() -> Path:
    return moetune_home() / "hardware"


def shipped_hardware_dir() -> Traversable:
    """The hardware profiles installed with moetune (package data)."""
    return resources.files("moetune").joinpath("profiles_data")


# --- reading files with one clear message ------------------------------------------------------


def _one_problem(error: Any) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"unknown field '{field}'"
    if error["type"] == "missing":
        return f"missing field '{field}'"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"field '{field}': {message} (got {error.get('input')!r})"


def describe_validation(exc: ValidationError, limit: int = 3) -> str:
    """A pydantic error as one line naming each field (the first ``limit`` problems)."""
    errors = exc.errors()
    text = "; ".join(_one_problem(error) for error in errors[:limit])
    more = len(errors) - limit
    return text + (f"; and {more} more problem{'s' if more > 1 else ''}" if more > 0 else "")


def _validated(model: type[Any], data: object, source: str, hint: str) -> Any:
    """``model.model_validate(data)``, or a ProfileError naming the file and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"{source}: {describe_validation(exc)}", hint=hint) from None


# --- hardware profiles -------------------------------------------------------------------------


class HardwareSpec(BaseModel):
    """What a hardware profile file holds (extra fields are an error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)  # as NVML / nvidia-smi report it
    aliases: list[str] = []
    vram: str  # a size as units.parse_size reads it: "24564MiB", "24G"
    memory_bandwidth_gb_s: float = Field(gt=0, le=100_000)
    pcie_gen: int = Field(ge=1, le=6)
    pcie_lanes: int
    notes: str | None = None

    @field_validator("vram")
    @classmethod
    def _size(cls, value: str) -> str:
        try:
            parse_size(value)
        except BadValueError as exc:
            raise ValueError(exc.message) from None
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
    source: str

    @property
    def vram_bytes(self) -> int:
        return parse_size(self.vram)

    @property
    def memory_bandwidth_bytes_per_s(self) -> int:
        return round(self.memory_bandwidth_gb_s * 1e9)

    @property
    def pcie_bytes_per_s(self) -> int:
        return pcie_bandwidth_bytes_per_s(self.pcie_gen, self.pcie_lanes)


PROFILES_HINT = "fields: " + ", ".join(HardwareSpec.model_fields) + "; see profiles/README.md"


def pcie_bandwidth_bytes_per_s(gen: int, lanes: int) -> int:
    """One direction of a PCIe link (gen 1-6, lanes) in bytes per second."""
    return round(PCIE_LANE_GB_S.get(gen, PCIE_LANE_GB_S[6]) * 1e9 * lanes)


def parse_hardware_profile(text: str, id: str, source: str) -> HardwareProfile:
    """One hardware profile from its TOML text; ProfileError names the file and the field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{source}: not valid TOML: {exc}", hint=PROFILES_HINT) from None
    spec: HardwareSpec = _validated(HardwareSpec, data, source, PROFILES_HINT)
    return HardwareProfile(**spec.model_dump(), id=id, source=source)


def _read_dir(entries: Iterable[Traversable], label: str) -> list[HardwareProfile]:
    found = []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name.endswith(".toml") and entry.is_file():
            stem = entry.name.removesuffix(".toml")
            text = entry.read_text("utf-8")
            found.append(parse_hardware_profile(text, stem, f"{label}{stem}.toml"))
    return found


def load_hardware_profiles(user_dir: Path | None = None) -> list[HardwareProfile]:
    """The shipped profiles, then the user's (``$MOETUNE_HOME/hardware``), by id."""
    user_dir = user_hardware_dir() if user_dir is None else user_dir
    by_id = {p.id: p for p in _read_dir(shipped_hardware_dir().iterdir(), "profiles/")}
    if user_dir.is_dir():
        by_id.update({p.id: p for p in _read_dir(user_dir.iterdir(), f"{user_dir}{os.sep}")})
    return sorted(by_id.values(), key=lambda p: p.id)


def _norm(text: str) -> str:
    """``NVIDIA GeForce RTX 4090`` -> ``rtx4090``; ``rtx-4090`` -> ``rtx4090``."""
    text = re.sub(r"\b(nvidia|geforce)\b", "", text.lower())
    return re.sub(r"[^a-z0-9]", "", text)


def _names(profile: HardwareProfile) -> set[str]:
    return {_norm(n) for n in (profile.id, profile.name, *profile.aliases)}


def find_hardware_profile(query: str, profiles: list[HardwareProfile]) -> HardwareProfile:
    """The profile called ``query`` (id, name or alias, loosely), or a ``.toml`` file path."""
    if query.endswith(".toml"):
        path = Path(query).expanduser()
        if not path.is_file():
            raise ProfileNotFoundError(f"no hardware profile file {path}")
        return parse_hardware_profile(path.read_text("utf-8"), path.stem, str(path))
    wanted = _norm(query)
    exact = [p for p in profiles if wanted in _names(p)]
    if len(exact) == 1:
        return exact[0]
    known = ", ".join(p.id for p in profiles)
    if len(exact) > 1:
        which = ", ".join(p.id for p in exact)
        raise BadValueError(f"GPU profile {query!r} is ambiguous ({which})")
    raise ProfileNotFoundError(
        f"no hardware profile {query!r}",
        hint=f"known: {known}; add yours as {user_hardware_dir() / 'NAME.toml'}",
    )


def match_detected(
    gpu_name: str, vram_bytes: int | None, profiles: list[HardwareProfile]
) -> HardwareProfile | None:
    """The profile for a detected GPU: same name, and memory within 10 % when known."""
    wanted = _norm(gpu_name)
    for profile in profiles:
        if _norm(profile.name) != wanted:
            continue
        if vram_bytes is None or abs(profile.vram_bytes - vram_bytes) <= 0.1 * vram_bytes:
            return profile
    return None


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


class TuneSettings(BaseModel):
    """What the tuning was asked for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_ctx: int = Field(gt=0)
    type_k: str
    type_v: str
    target_bytes: int = Field(gt=0)
    extra_args: list[str] = []


class TuneKey(BaseModel):
    """Everything a tuned result depends on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelIdentity
    gpu: DeviceIdentity
    llama_cpp: BuildIdentity
    settings: TuneSettings


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
        file_name=first.name, file_bytes=model.file_bytes, header_sha256=digest.hexdigest(),
        path=str(first.resolve()),
    )  # fmt: skip


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
        build_number=info.build_number, commit=info.commit, version=info.version,
        binary=str(info.path), binary_fingerprint=fingerprint,
    )  # fmt: skip


# --- tuned profiles: the files -----------------------------------------------------------------


class TunedPlacement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    n_cpu_moe: int | None = Field(default=None, ge=0)
    override_tensor: list[str] = []


class Measured(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    vram_bytes: int | None = None
    ttft_s: float | None = None
    decode_tps: float | None = None
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
    measured: Measured
    command: list[str]  # llama-server's argv, argv[0] the binary that was tuned with

    @property
    def key(self) -> TuneKey:
        return TuneKey(model=self.model, gpu=self.gpu, llama_cpp=self.llama_cpp,
                       settings=self.settings)  # fmt: skip


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "model"


def profile_name(file_name: str, n_ctx: int, type_k: str, type_v: str) -> str:
    """``Qwen3-30B-A3B-Q4_K_M-32k-q8_0``: the model file's stem, context and cache types."""
    split = SPLIT_NAME_RE.match(file_name)
    stem = split["prefix"] if split else file_name.removesuffix(".gguf")
    ctx = f"{n_ctx // 1024}k" if n_ctx % 1024 == 0 else str(n_ctx)
    cache = type_k if type_k == type_v else f"{type_k}-{type_v}"
    return f"{_slug(stem)}-{ctx}-{_slug(cache)}"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def mismatches(saved: TuneKey, wanted: TuneKey) -> list[str]:
    """Why a saved profile does not apply to this run (empty: it matches)."""
    reasons = []
    if saved.model.model_dump(exclude={"path"}) != wanted.model.model_dump(exclude={"path"}):
        reasons.append(f"the model file changed ({wanted.model.file_name}: size or header)")
    if saved.gpu != wanted.gpu:
        reasons.append(
            f"the GPU changed (was {saved.gpu.name}, {format_bytes(saved.gpu.vram_total_bytes)}; "
            f"now {wanted.gpu.name}, {format_bytes(wanted.gpu.vram_total_bytes)})"
        )
    if not saved.llama_cpp.same_as(wanted.llama_cpp):
        reasons.append(
            f"llama.cpp changed (was {saved.llama_cpp.describe()}, "
            f"now {wanted.llama_cpp.describe()})"
        )
    if saved.settings != wanted.settings:
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
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            raise ProfileNotFoundError(
                f"no tuned profile {name!r}", hint="`moetune profiles list` shows them"
            ) from None
        return parse_tuned_profile(text, str(path))

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json") if not p.name.startswith("."))

    def scan(self) -> list[TunedProfile | ProfileError]:
        """Every tuned profile; a broken file is returned as its error."""
        found: list[TunedProfile | ProfileError] = []
        for name in self.names():
            try:
                found.append(self.load(name))
            except ProfileError as exc:
                found.append(exc)
        return found

    def save(self, profile: TunedProfile) -> Path:
        """Write atomically (a crash never leaves half a file)."""
        path = self.path_for(profile.name)
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(profile.model_dump_json(indent=2) + "\n")
        Path(tmp).replace(path)
        return path

    def remove(self, name: str) -> Path:
        path = self.path_for(name)
        if not path.exists():
            raise ProfileNotFoundError(
                f"no tuned profile {name!r}", hint="`moetune profiles list` shows them"
            )
        path.unlink()
        return path

    def match(self, key: TuneKey) -> Match:
        """The saved profile for this model, context and cache types, if it still applies."""
        s = key.settings
        name = profile_name(key.model.file_name, s.n_ctx, s.type_k, s.type_v)
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

    def for_model(self, identity: ModelIdentity) -> list[TunedProfile]:
        """Profiles of this model file name, newest first (they may be out of date)."""
        found = [p for p in self.scan() if isinstance(p, TunedProfile)]
        same = [p for p in found if p.model.file_name == identity.file_name]
        return sorted(same, key=lambda p: p.confirmed_at or p.tuned_at, reverse=True)


def parse_tuned_profile(text: str, source: str) -> TunedProfile:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(
            f"{source}: not valid JSON: {exc}", hint="remove it and run `moetune run` again"
        ) from None
    hint = "fix it, or remove it with `moetune profiles rm` and tune again"
    profile: TunedProfile = _validated(TunedProfile, data, source, hint)
    return profile


def new_profile(key: TuneKey, n_cpu_moe: int, measured: Measured, command: list[str],
                previous: TunedProfile | None = None) -> TunedProfile:  # fmt: skip
    """The profile to save for a run's winner (``previous``: the one it confirmed)."""
    s = key.settings
    stamp = now()
    return TunedProfile(
        name=profile_name(key.model.file_name, s.n_ctx, s.type_k, s.type_v),
        tuned_at=previous.tuned_at if previous else stamp,
        confirmed_at=stamp if previous else None,
        model=key.model, gpu=key.gpu, llama_cpp=key.llama_cpp, settings=s,
        placement=TunedPlacement(n_cpu_moe=n_cpu_moe), measured=measured, command=command,
    )  # fmt: skip


def model_profile(
    store: ProfileStore, identity: ModelIdentity, n_ctx: int | None = None,
    cache_type: str | None = None,
) -> TunedProfile:  # fmt: skip
    """The newest tuned profile for this model file (at ``n_ctx``/``cache_type`` if given)."""
    found = [
        p for p in store.for_model(identity)
        if (n_ctx is None or p.settings.n_ctx == n_ctx)
        and (cache_type is None or cache_type in (p.settings.type_k, p.settings.type_v))
    ]  # fmt: skip
    if not found:
        raise ProfileNotFoundError(
            f"no tuned profile for {identity.file_name}" + (f" at ctx {n_ctx}" if n_ctx else ""),
            hint=f"run `moetune run {identity.path}` first",
        )
    profile = found[0]
    if reasons := mismatches(profile.key, profile.key.model_copy(update={"model": identity})):
        raise ProfileError(
            f"tuned profile {profile.name} is out of date: {'; '.join(reasons)}",
            hint=f"tune again: moetune run {identity.path} --retune",
        )
    return profile
