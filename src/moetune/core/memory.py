"""Pure memory model: ModelFacts x placement x settings x devices -> bytes per device and on
the host.

A device's peak = weights placed there + the KV/RS cache of the layers on it + its compute
buffer + a runtime overhead (CUDA context, cuBLAS workspace, memory pools) that llama.cpp does
not report (``DeviceSpec.overhead_bytes``; ``DEFAULT_GPU_OVERHEAD_BYTES`` on CUDA). The
``gpu_*`` figures add up every device; one device: its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar

from moetune.core.backends import KINDS
from moetune.core.compute.estimate import compute_for
from moetune.core.devices import DeviceSpec, bufts, single_device
from moetune.core.extras import Draft, Extras, Projector
from moetune.core.facts import ModelFacts
from moetune.core.kvcache import cache_for
from moetune.core.placement import CPU, SKIPPED, Placement, WeightSplit, split_weights
from moetune.core.settings import (
    DEFAULT_CTX,
    DEFAULT_GPU_OVERHEAD_BYTES,
    Settings,
    default_n_ctx,
)
from moetune.errors import BadValueError
from moetune.record import OMIT_EMPTY, record

if TYPE_CHECKING:
    from moetune.core.projector import ProjectorCompute

__all__ = [
    "DEFAULT_CTX",
    "DEFAULT_GPU_OVERHEAD_BYTES",
    "DeviceMemory",
    "DraftMemory",
    "MemoryEstimate",
    "MtpMemory",
    "ProjectorMemory",
    "Settings",
    "default_n_ctx",
    "estimate",
    "estimate_from_split",
    "weights_on",
]


# the parts that only a projector or a draft model brings: left out of the JSON when zero, so
# an estimate without them serializes exactly as before they existed
_EXTRA_PARTS = (
    "mmproj_weights_bytes",
    "mmproj_compute_bytes",
    "draft_weights_bytes",
    "draft_kv_bytes",
    "draft_compute_bytes",
    "mtp_weights_bytes",
    "mtp_kv_bytes",
    "mtp_compute_bytes",
)


@record(kw_only=True)
class DeviceMemory:
    """Predicted bytes on one device."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("total_bytes",)

    name: str
    weights_bytes: int
    expert_bytes: int
    kv_bytes: int
    compute_bytes: int
    overhead_bytes: int
    correction_bytes: int = 0  # llama.cpp's dry run found this much more (or less)
    # what the projector (--mmproj) and the draft model (-md) hold on this device
    mmproj_weights_bytes: int = field(default=0, metadata=OMIT_EMPTY)
    mmproj_compute_bytes: int = field(default=0, metadata=OMIT_EMPTY)
    draft_weights_bytes: int = field(default=0, metadata=OMIT_EMPTY)
    draft_kv_bytes: int = field(default=0, metadata=OMIT_EMPTY)
    draft_compute_bytes: int = field(default=0, metadata=OMIT_EMPTY)
    # and what MTP (--spec-type draft-mtp) adds: the NextN blocks, the MTP context's cache
    # (with the main recurrent state's rollback rows) and its compute buffer
    mtp_weights_bytes: int = field(default=0, metadata=OMIT_EMPTY)
    mtp_kv_bytes: int = field(default=0, metadata=OMIT_EMPTY)
    mtp_compute_bytes: int = field(default=0, metadata=OMIT_EMPTY)

    @property
    def extras_bytes(self) -> int:
        """The projector's, the draft's and MTP's bytes here."""
        return sum(getattr(self, part) for part in _EXTRA_PARTS)

    @property
    def total_bytes(self) -> int:
        return (
            self.weights_bytes
            + self.kv_bytes
            + self.compute_bytes
            + self.overhead_bytes
            + self.correction_bytes
            + self.extras_bytes
        )


@record(kw_only=True)
class ProjectorMemory:
    """The projector's bytes: on one device (or ``CPU``), and in the host's compute buffer."""

    device: str  # a device name, or "CPU" (--no-mmproj-offload)
    projector_type: str
    mmproj_weights_bytes: int
    mmproj_compute_bytes: int  # on the device (on the CPU: the host's buffer)
    host_compute_bytes: int  # the CPU backend's buffer beside a device's
    warmup: str  # the warm-up image clip reserves for
    exact: bool  # False: the graph of this projector type is estimated, not replayed

    @property
    def host_bytes(self) -> int:
        """What it holds in host memory (weights and compute when on the CPU)."""
        on_cpu = self.device == CPU_NAME
        return self.host_compute_bytes + (
            self.mmproj_weights_bytes + self.mmproj_compute_bytes if on_cpu else 0
        )


@record(kw_only=True)
class _HostParts:
    """What a companion holds in host memory."""

    host_weights_bytes: int
    host_kv_bytes: int
    host_compute_bytes: int

    @property
    def host_bytes(self) -> int:
        return self.host_weights_bytes + self.host_kv_bytes + self.host_compute_bytes


@record(kw_only=True)
class DraftMemory(_HostParts):
    """The draft model's bytes: all its devices together, and in host memory."""

    model: str
    devices: list[str]  # where its layers are (empty: the CPU only)
    draft_weights_bytes: int
    draft_kv_bytes: int
    draft_compute_bytes: int


@record(kw_only=True)
class MtpMemory(_HostParts):
    """What MTP adds: every device together, and in host memory."""

    mtp_weights_bytes: int  # the NextN blocks, loaded
    mtp_kv_bytes: int  # the MTP context's cache, and the main recurrent state's rollback rows
    mtp_compute_bytes: int


CPU_NAME = "CPU"


@record(kw_only=True)
class MemoryEstimate:
    """Predicted bytes per device for one placement (``gpu_*``: every device together)."""

    gpu_weights_bytes: int
    gpu_expert_bytes: int
    gpu_kv_bytes: int
    gpu_compute_bytes: int
    gpu_overhead_bytes: int
    cpu_weights_bytes: int
    cpu_expert_bytes: int
    host_kv_bytes: int
    host_compute_bytes: int
    n_ctx: int
    cache_exact: bool
    devices: list[DeviceMemory] = field(default_factory=list)
    # --mmproj: where and how much; -md: how much, on which devices and the host;
    # --spec-type draft-mtp: the NextN blocks and their context
    mmproj: ProjectorMemory | None = field(default=None, metadata=OMIT_EMPTY)
    draft: DraftMemory | None = field(default=None, metadata=OMIT_EMPTY)
    mtp: MtpMemory | None = field(default=None, metadata=OMIT_EMPTY)

    @property
    def gpu_extras_bytes(self) -> int:
        """The projector's and the draft's bytes on every device together."""
        return sum(d.extras_bytes for d in self.devices)

    @property
    def gpu_bytes(self) -> int:
        return (
            self.gpu_weights_bytes
            + self.gpu_kv_bytes
            + self.gpu_compute_bytes
            + self.gpu_overhead_bytes
            + self.gpu_extras_bytes
        )

    @property
    def host_extras_bytes(self) -> int:
        """The projector's and the draft's bytes in host memory."""
        return (
            (self.mmproj.host_bytes if self.mmproj else 0)
            + (self.draft.host_bytes if self.draft else 0)
            + (self.mtp.host_bytes if self.mtp else 0)
        )

    @property
    def host_bytes(self) -> int:
        return (
            self.cpu_weights_bytes
            + self.host_kv_bytes
            + self.host_compute_bytes
            + self.host_extras_bytes
        )

    def over(self, budgets: Sequence[int]) -> list[int]:
        """The devices whose predicted peak is above their budget."""
        return [i for i, d in enumerate(self.devices) if d.total_bytes > budgets[i]]


def pipeline_parallel(weights: WeightSplit, placement_has_overrides: bool) -> bool:
    """llama.cpp turns pipeline parallelism on (src/llama-context.cpp) with several devices,
    every layer offloaded, layer split, the KV cache offloaded and no tensor overrides; CUDA
    and RPC devices both have the async compute and events it needs."""
    loaded = [home for home in weights.homes if home != SKIPPED]
    return weights.n_devices > 1 and not placement_has_overrides and CPU not in loaded


def estimate_from_split(
    facts: ModelFacts,
    weights: WeightSplit,
    settings: Settings,
    devices: Sequence[DeviceSpec] | None = None,
    *,
    pipeline: bool = False,
    extras: Extras | None = None,
) -> MemoryEstimate:
    """The estimate for an already computed weight split (lets the planner skip regexes);
    ``extras``: what the same llama-server loads beside the model."""
    specs = tuple(devices) if devices is not None else single_device(settings)
    cache = cache_for(facts, settings)
    host_layers = [layer.index for layer in facts.layers if weights.homes[layer.index] < 0]
    compute = compute_for(
        facts,
        settings,
        homes=weights.homes,
        moves=weights.moves,
        kinds=[d.kind for d in specs],
        pipeline=pipeline,
    )
    beside = _extras_on(facts, settings, extras, specs, weights, pipeline=pipeline)
    per_device: list[DeviceMemory] = []
    for index, spec in enumerate(specs):
        layers = weights.layers_on(index)
        used = bool(layers) or weights.homes[-1] == index or weights.device_bytes[index] > 0
        parts = beside.devices[index]
        used = used or any(parts.values())
        per_device.append(
            DeviceMemory(
                name=spec.name,
                weights_bytes=weights.device_bytes[index],
                expert_bytes=weights.device_expert_bytes[index],
                kv_bytes=cache.kv_bytes_for(layers) + cache.rs_bytes_for(layers),
                compute_bytes=compute.devices[index] if used else 0,
                overhead_bytes=spec.overhead_bytes if used else 0,
                correction_bytes=spec.correction_bytes if used else 0,
                **parts,
            )
        )
    return MemoryEstimate(
        gpu_weights_bytes=weights.gpu_bytes,
        gpu_expert_bytes=weights.gpu_expert_bytes,
        gpu_kv_bytes=sum(d.kv_bytes for d in per_device),
        gpu_compute_bytes=sum(d.compute_bytes for d in per_device),
        gpu_overhead_bytes=sum(d.overhead_bytes + d.correction_bytes for d in per_device),
        cpu_weights_bytes=weights.cpu_bytes,
        cpu_expert_bytes=weights.cpu_expert_bytes,
        host_kv_bytes=cache.kv_bytes_for(host_layers) + cache.rs_bytes_for(host_layers),
        host_compute_bytes=compute.host_bytes,
        n_ctx=cache.n_ctx,
        cache_exact=cache.exact,
        devices=per_device,
        mmproj=beside.mmproj,
        draft=beside.draft,
        mtp=beside.mtp,
    )


# --- what runs beside the model: a projector, a draft model ------------------------------------


@record(kw_only=True)
class _ExtrasOn:
    """The extras' parts per device (DeviceMemory's field names), and their summaries."""

    devices: list[dict[str, int]]
    mmproj: ProjectorMemory | None = None
    draft: DraftMemory | None = None
    mtp: MtpMemory | None = None


def _extras_on(
    facts: ModelFacts,
    settings: Settings,
    extras: Extras | None,
    specs: tuple[DeviceSpec, ...],
    weights: WeightSplit,
    *,
    pipeline: bool,
) -> _ExtrasOn:
    """Where the projector, the draft and MTP land and what they hold, beside the model
    ``facts`` split as ``weights``."""
    homes = weights.homes
    found = _ExtrasOn(devices=[{} for _ in specs])
    if extras is None:
        return found
    if extras.projector is not None:
        index, found.mmproj = _projector_memory(extras.projector, settings, specs)
        if index != CPU:
            found.devices[index].update(
                mmproj_weights_bytes=found.mmproj.mmproj_weights_bytes,
                mmproj_compute_bytes=found.mmproj.mmproj_compute_bytes,
            )
    if extras.draft is not None:
        counts = tuple(sum(1 for h in homes if h == i) for i in range(len(specs)))
        draft = _draft_estimate(
            extras.draft, _draft_settings(settings, extras.draft), specs, counts
        )
        indices = _draft_devices(extras.draft, specs)
        for memory, index in zip(draft.devices[: len(indices)], indices, strict=True):
            found.devices[index].update(
                draft_weights_bytes=memory.weights_bytes,
                draft_kv_bytes=memory.kv_bytes,
                draft_compute_bytes=memory.compute_bytes,
            )
        found.draft = DraftMemory(
            model=extras.draft.path,
            devices=[d.name for d in draft.devices if d.total_bytes],
            draft_weights_bytes=draft.gpu_weights_bytes,
            draft_kv_bytes=draft.gpu_kv_bytes,
            draft_compute_bytes=draft.gpu_compute_bytes,
            host_weights_bytes=draft.cpu_weights_bytes,
            host_kv_bytes=draft.host_kv_bytes,
            host_compute_bytes=draft.host_compute_bytes,
        )
    if extras.mtp:
        found.mtp, parts = _mtp_on(facts, extras, settings, specs, weights, pipeline=pipeline)
        for index, part in enumerate(parts):
            found.devices[index].update(part)
    return found


def _mtp_on(
    facts: ModelFacts,
    extras: Extras,
    settings: Settings,
    specs: tuple[DeviceSpec, ...],
    weights: WeightSplit,
    *,
    pipeline: bool,
) -> tuple[MtpMemory, list[dict[str, int]]]:
    """MTP's summary, and its parts on each device."""
    from moetune.core.mtp import mtp_memory

    loaded = dict(weights.nextn_homes)
    homes = tuple(loaded.get(i, home) for i, home in enumerate(weights.homes))
    mtp = mtp_memory(
        facts,
        settings,
        homes=homes,
        moves=weights.moves,
        kinds=[d.kind for d in specs],
        type_k=extras.mtp_type_k,
        type_v=extras.mtp_type_v,
        pipeline=pipeline,
        nextn_moves=weights.nextn_moves,
    )
    parts = [
        {
            "mtp_weights_bytes": mtp.weights_bytes[i],
            "mtp_compute_bytes": mtp.compute_bytes[i],
            "mtp_kv_bytes": mtp.kv_bytes[i] + mtp.main_rs_bytes[i],
        }
        for i in range(len(specs))
    ]
    return MtpMemory(
        mtp_weights_bytes=sum(mtp.weights_bytes),
        mtp_kv_bytes=sum(mtp.kv_bytes) + sum(mtp.main_rs_bytes),
        mtp_compute_bytes=sum(mtp.compute_bytes),
        host_weights_bytes=mtp.host_weights_bytes,
        host_kv_bytes=mtp.host_kv_bytes + mtp.host_main_rs_bytes,
        host_compute_bytes=mtp.host_compute_bytes,
    ), parts


def projector_home(projector: Projector, specs: Sequence[DeviceSpec]) -> int:
    """The device clip puts the projector on (common/arg.cpp, clip.cpp): ``-mmdev``, else the
    first ``-dev`` device, else the first GPU-type device (CUDA's before RPC's); ``CPU`` with
    ``--no-mmproj-offload`` or when there is no device."""
    if not projector.offload:
        return CPU
    if projector.device is not None:
        names = [spec.name for spec in specs]
        if projector.device in names:
            return names.index(projector.device)
        if len(specs) == 1:
            return 0  # a one-device plan names its device generically
        raise BadValueError(
            f"-mmdev {projector.device}: not one of the devices",
            hint="the devices: " + ", ".join(names),
        )
    for kind in KINDS:
        for index, spec in enumerate(specs):
            if spec.kind == kind:
                return index
    return CPU


def _projector_memory(
    projector: Projector, settings: Settings, specs: Sequence[DeviceSpec]
) -> tuple[int, ProjectorMemory]:
    index = projector_home(projector, specs)
    kind = "cpu" if index == CPU else "cuda" if specs[index].kind == "cuda" else "rpc"
    compute = _projector_compute(projector, kind, settings.flash_attn, settings.n_ubatch)
    on_cpu = index == CPU
    facts = projector.facts
    return index, ProjectorMemory(
        device=CPU_NAME if on_cpu else specs[index].name,
        projector_type="+".join(facts.projector_types),
        mmproj_weights_bytes=facts.weights_bytes,
        mmproj_compute_bytes=compute.host_bytes if on_cpu else compute.device_bytes,
        host_compute_bytes=0 if on_cpu else compute.host_bytes,
        warmup=compute.warmup,
        exact=compute.exact,
    )


@lru_cache(maxsize=64)
def _projector_compute(
    projector: Projector, kind: str, flash_attn: bool, n_ubatch: int
) -> ProjectorCompute:
    from moetune.core.projector import projector_compute

    return projector_compute(
        projector.facts,
        kind=kind,
        flash_attn=flash_attn,
        image_min_tokens=projector.image_min_tokens,
        image_max_tokens=projector.image_max_tokens,
        n_ubatch=n_ubatch,
    )


def _draft_devices(draft: Draft, specs: Sequence[DeviceSpec]) -> list[int]:
    """The indices (among ``specs``) of the draft's devices: ``-devd``, else the main ones."""
    if draft.devices is None:
        return list(range(len(specs)))
    names = [spec.name for spec in specs]
    missing = [name for name in draft.devices if name not in names]
    if missing and not (len(specs) == 1 and len(draft.devices) == 1):
        raise BadValueError(
            f"-devd {','.join(draft.devices)}: {missing[0]} is not one of the devices",
            hint="the devices: " + ", ".join(names),
        )
    return [names.index(name) if name in names else 0 for name in draft.devices]


def _draft_settings(settings: Settings, draft: Draft) -> Settings:
    """The draft's context (common_base_params_to_speculative): the target's cells, slots,
    batch sizes and flash attention; its own cache types; logits for one row per slot."""
    return replace(
        settings,
        type_k=draft.type_k,
        type_v=draft.type_v,
        n_draft=0,
        all_outputs=False,
        gpu_overhead_bytes=0,
        device_correction_bytes=0,
    )


@lru_cache(maxsize=256)
def _draft_estimate(
    draft: Draft, settings: Settings, specs: tuple[DeviceSpec, ...], counts: tuple[int, ...]
) -> MemoryEstimate:
    """The draft's own estimate over its devices: ``-ngld`` layers, its ``-otd`` rules, the
    target's ``-ts`` (moetune's is the layer count per device, ``counts``; by position when
    ``-devd`` picks fewer devices)."""
    indices = _draft_devices(draft, specs)
    mine = tuple(replace(specs[i], overhead_bytes=0, correction_bytes=0) for i in indices)
    if not mine:  # -devd none: every draft layer on the CPU
        return estimate(draft.facts, Placement(n_gpu_layers=0), settings, single_device(settings))
    split = counts[: len(mine)] if len(mine) > 1 and any(counts[: len(mine)]) else ()
    placement = Placement(
        n_gpu_layers=draft.n_gpu_layers,
        overrides=draft.overrides(bufts(mine)),
        tensor_split=tuple(float(c) for c in split),
    )
    return estimate(draft.facts, placement, settings, mine)


def weights_on(facts: ModelFacts, placement: Placement, specs: Sequence[DeviceSpec]) -> WeightSplit:
    """``placement``'s weight split over ``specs``; without ``-ts``, by their free memory (or
    their total) as llama.cpp splits, when every device's is known."""
    free = [d.free_bytes or d.total_bytes or 0 for d in specs]
    return split_weights(facts, placement, len(specs), free if all(free) else ())


def estimate(
    facts: ModelFacts,
    placement: Placement,
    settings: Settings,
    devices: Sequence[DeviceSpec] | None = None,
    *,
    extras: Extras | None = None,
) -> MemoryEstimate:
    """Predicted peak bytes on each device and on the host for ``placement`` at ``settings``
    over ``devices`` (default: the one device ``settings`` describes), with ``extras`` (a
    projector, a draft, MTP) beside the model."""
    specs = tuple(devices) if devices is not None else single_device(settings)
    weights = weights_on(facts, placement, specs)
    pipeline = pipeline_parallel(weights, bool(placement.overrides))
    return estimate_from_split(facts, weights, settings, specs, pipeline=pipeline, extras=extras)
