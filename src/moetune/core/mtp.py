"""MTP / NextN speculative decoding: what ``--spec-type draft-mtp`` adds to llama-server's
memory, as build 11434 allocates it. Pure: model facts x placement x settings -> bytes.

Which switch (common/arg.cpp, common/common.cpp, common/speculative.cpp,
tools/server/server-context.cpp): ``--spec-type draft-mtp`` (alone or among other types) is
the only llama-server switch. It sets ``mparams.load_mtp`` (common_model_params_to_llama) and
makes llama-server create a second llama_context, ``ctx_type`` MTP, on the TARGET model (no
``-md``: ``shares_model``). ``--nextn`` only exists for llama-imatrix; ``--mtp`` only for the
download tool (it fetches an MTP sidecar file).

What it costs, each term on the device llama.cpp puts it:

- weights: the NextN blocks (``blk.N.*`` for the last ``nextn_predict_layers`` blocks, NextN
  tensors and the whole decoder block) are loaded instead of skipped (TENSOR_SKIP). They are
  ordinary repeating-layer tensors (llama-arch.cpp: ``LLM_TENSOR_LAYER_REPEATING``, also
  ``nextn.embed_tokens``/``shared_head_head``): on their layer's device by ``-ngl``/``-ts``
  (block N counts in ``n_layer_all`` whether loaded or not), and ``-ot``/``--n-cpu-moe``/
  ``--cpu-moe`` rules apply to their names like to any tensor.
- MTP KV cache (src/llama-model.cpp create_memory): a plain llama_kv_cache whose filter keeps
  only ``il >= n_layer()`` (also on the hybrid Qwen3.5/3-Next: no recurrent state), with the
  target's ``n_ctx`` (llama_n_ctx of the main context), its slots and unified flag, and the
  DRAFT cache types ``-ctkd``/``-ctvd`` (f16 by default; ``-ctk`` does not reach it); each
  layer's K/V on that layer's device (CPU with ``-nkvo``).
- MTP compute buffer: the DECODER_MTP graph reserved like any context's (core/compute/mtp.py):
  T = min(n_ctx, n_ubatch) tokens over the MTP cache, ``n_outputs_max = n_parallel`` logits rows.
- the MAIN context changes too: its logits rows become ``n_parallel * (1 + n_max)``
  (server_output_limits; ``Settings.n_outputs`` does that from ``n_draft``), and on
  the architectures with recurrent rollback (rs_rollback in core/archs.py, e.g. qwen35moe) its RS
  buffer holds ``n_seq * (1 + n_max)`` rows instead of ``n_seq`` (``cparams.n_rs_seq =
  need_n_rs_seq()`` = the draft ``n_max``, ``--spec-draft-n-max``, default 3): the
  ``main_rs_bytes`` fields here. Its KV is unchanged (NextN layers are filtered out of it
  either way) and so is its weight placement otherwise.

Not modelled: the output buffers (host; llama.cpp grows them at decode time), ``-md`` with
``draft-mtp`` (an MTP context on a separate draft model), more than one NextN block per graph
(glm4moe/qwen35moe assert one), MLA/DSA NextN caches (DeepSeek/GLM-DSA), SWA NextN layers,
and CPU_REPACK of the NextN weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from moetune.core.compute.estimate import ComputeEstimate, _options
from moetune.core.compute.mtp import mtp_peaks
from moetune.core.compute.params import LayerHomes, run_params
from moetune.core.facts import ModelFacts, TensorFacts
from moetune.core.kvcache import cache_for, nextn_cache, rs_snapshots
from moetune.core.placement import CPU, EXPS_REGEX, SKIPPED, Placement, _compiled, homes_for
from moetune.core.settings import Settings
from moetune.record import record

__all__ = [
    "DEFAULT_DRAFT_N_MAX",
    "MtpEstimate",
    "mtp_compute",
    "mtp_layer_homes",
    "mtp_memory",
    "nextn_layers",
]

DEFAULT_DRAFT_N_MAX = 3  # common/common.h: speculative.draft.n_max (--spec-draft-n-max)


@record(kw_only=True)
class MtpEstimate:
    """What ``--spec-type draft-mtp`` adds, per device (one entry per index of ``kinds``)
    and on the host. ``main_rs_bytes``: the growth of the MAIN context's RS buffer."""

    weights_bytes: tuple[int, ...]
    expert_bytes: tuple[int, ...]  # part of weights_bytes: the NextN blocks' routed experts
    kv_bytes: tuple[int, ...]
    compute_bytes: tuple[int, ...]
    main_rs_bytes: tuple[int, ...]
    host_weights_bytes: int
    host_expert_bytes: int
    host_kv_bytes: int
    host_compute_bytes: int
    host_main_rs_bytes: int
    nextn_homes: tuple[int, ...]  # each NextN block's device, or CPU (-1)
    n_rs_seq: int  # the main context's rollback snapshots (0: none)

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("device_bytes", "host_bytes")

    @property
    def device_bytes(self) -> tuple[int, ...]:
        """Everything MTP adds on each device."""
        terms = (self.weights_bytes, self.kv_bytes, self.compute_bytes, self.main_rs_bytes)
        return tuple(sum(t) for t in zip(*terms, strict=True))

    @property
    def host_bytes(self) -> int:
        return (
            self.host_weights_bytes
            + self.host_kv_bytes
            + self.host_compute_bytes
            + self.host_main_rs_bytes
        )


def nextn_layers(facts: ModelFacts) -> tuple[int, ...]:
    """The NextN/MTP blocks (ModelFacts marks them: the last ``nextn_predict_layers``)."""
    return tuple(layer.index for layer in facts.layers if layer.is_nextn)


def mtp_layer_homes(
    facts: ModelFacts,
    homes: Sequence[int],
    placement: Placement | None = None,
    free: Sequence[int] = (),
    n_devices: int = 1,
) -> tuple[int, ...]:
    """``homes`` (a WeightSplit's: SKIPPED for NextN blocks, the output layer last) with each
    NextN block's device once it is loaded.

    With ``placement`` (over ``n_devices``, with ``free``: llama.cpp's split without ``-ts``)
    this is exact: llama.cpp's own layer split over ``len(homes) - 1`` blocks. Without it,
    derived from the neighbours: a NextN block sits between the last trunk block and the
    output layer, so it shares the output layer's device when the last trunk block is
    offloaded (exact on one device; on several, unless the last device gets only the output
    layer), and is on the CPU when the last trunk block is (``-ngl 1``; ``-ngl 2`` would put
    it on the device)."""
    nextn = set(nextn_layers(facts))
    if placement is not None:
        exact = homes_for(len(homes) - 1, placement, n_devices, free)
        return tuple(exact[i] if i in nextn else h for i, h in enumerate(homes))
    trunk = [h for i, h in enumerate(homes[:-1]) if i not in nextn]
    last_trunk = trunk[-1] if trunk else homes[-1]
    derived = homes[-1] if last_trunk >= 0 else CPU
    return tuple(derived if i in nextn and h == SKIPPED else h for i, h in enumerate(homes))


def _nextn_home(
    tensor: TensorFacts, homes: Sequence[int], placement: Placement | None, moved: dict[str, int]
) -> int:
    """A NextN tensor's home: the first matching override (or where ``moved`` says one put
    it), else its block's device."""
    if tensor.name in moved:
        return moved[tensor.name]
    for rule in placement.overrides if placement is not None else ():
        if _compiled(rule.pattern).search(tensor.name):
            return rule.target
    assert tensor.layer is not None
    return homes[tensor.layer]


_Weights = tuple[list[int], list[int], frozenset[tuple[str, int]]]


def _weights(
    facts: ModelFacts,
    homes: Sequence[int],
    placement: Placement | None,
    n_devices: int,
    moved: dict[str, int],
) -> _Weights:
    """Bytes per home (the CPU last) of the NextN blocks, their experts apart, and the
    tensors an override moved away from their block."""
    nextn = set(nextn_layers(facts))
    total, experts = [0] * (n_devices + 1), [0] * (n_devices + 1)
    moves: set[tuple[str, int]] = set()
    for tensor in facts.tensors:
        if tensor.layer not in nextn:
            continue
        home = _nextn_home(tensor, homes, placement, moved)
        slot = home if home >= 0 else n_devices
        total[slot] += tensor.nbytes or 0
        if _compiled(EXPS_REGEX).search(tensor.name):
            experts[slot] += tensor.nbytes or 0
        if tensor.layer is not None and home != homes[tensor.layer]:
            moves.add((tensor.name, home))
    return total, experts, frozenset(moves)


def mtp_compute(
    facts: ModelFacts,
    settings: Settings,
    *,
    homes: tuple[int, ...],
    moves: frozenset[tuple[str, int]],
    kinds: Sequence[str],
    type_k: str = "f16",
    type_v: str = "f16",
    pipeline: bool = False,
) -> ComputeEstimate:
    """The MTP context's compute buffers: ``homes`` with the NextN blocks' devices filled in
    (mtp_layer_homes), ``moves`` including the NextN tensors an override moved."""
    run = run_params(
        settings.n_ctx,
        settings.n_ubatch,
        settings.n_batch,
        settings.n_seq,
        None if settings.all_outputs else settings.n_seq,
    )
    opts = _options(
        kinds,
        flash_attn=settings.flash_attn,
        type_k=type_k,
        type_v=type_v,
        n_copies=4 if pipeline else 1,
    )
    devices, host = mtp_peaks(facts, run, LayerHomes(homes, moves), opts, kinds)
    return ComputeEstimate(devices=devices, host_bytes=host)


def _main_rs_growth(facts: ModelFacts, settings: Settings, n_rs_seq: int) -> dict[int, int]:
    """Bytes the main context's RS buffer grows by, per block."""
    if rs_snapshots(facts.architecture, n_rs_seq) == 0:
        return {}
    base = cache_for(facts, settings)
    grown = cache_for(facts, settings, n_rs_seq=n_rs_seq)
    return {
        b.layer: g.rs_bytes - b.rs_bytes for b, g in zip(base.layers, grown.layers, strict=True)
    }


def _draft_n_max(settings: Settings) -> int:
    return settings.n_draft if settings.n_draft > 0 else DEFAULT_DRAFT_N_MAX


def mtp_memory(
    facts: ModelFacts,
    settings: Settings,
    *,
    homes: tuple[int, ...],
    moves: frozenset[tuple[str, int]],
    kinds: Sequence[str],
    placement: Placement | None = None,
    free: Sequence[int] = (),
    type_k: str = "f16",
    type_v: str = "f16",
    n_rs_seq: int | None = None,
    offload_kqv: bool = True,
    pipeline: bool = False,
    nextn_moves: frozenset[tuple[str, int]] = frozenset(),
) -> MtpEstimate:
    """What ``--spec-type draft-mtp`` adds to the estimate core/memory.py makes from ``homes``,
    ``moves`` and ``kinds`` (exactly what it passes to compute_for).

    ``placement``/``free``: the placement those came from, for the NextN blocks' exact devices
    and the override rules that match their tensors (without it: mtp_layer_homes' derivation,
    no overrides). ``type_k``/``type_v``: ``-ctkd``/``-ctvd``. ``n_rs_seq``: the draft's
    ``n_max`` (default: ``settings.n_draft``, else 3). ``offload_kqv``: False with
    ``-nkvo`` (the MTP cache on the CPU). ``pipeline``: as for the main context.
    ``nextn_moves``: the NextN tensors an override puts elsewhere than their block (a
    WeightSplit's, which also has the blocks' homes: pass those in ``homes`` instead of
    SKIPPED, and no ``placement``)."""
    n_dev = len(kinds)
    full = mtp_layer_homes(facts, homes, placement, free, n_dev)
    total, experts, moved = _weights(facts, full, placement, n_dev, dict(nextn_moves))
    cache = nextn_cache(
        facts,
        n_ctx=settings.n_ctx,
        type_k=type_k,
        type_v=type_v,
        n_seq=settings.n_seq,
        kv_unified=settings.kv_unified,
        flash_attn=settings.flash_attn,
    )
    kv = [0] * (n_dev + 1)
    for layer in cache.layers:
        home = full[layer.layer] if offload_kqv else CPU
        kv[home if home >= 0 else n_dev] += layer.kv_bytes
    compute = mtp_compute(
        facts,
        settings,
        homes=full,
        moves=moves | moved,
        kinds=kinds,
        type_k=type_k,
        type_v=type_v,
        pipeline=pipeline,
    )
    snapshots = rs_snapshots(
        facts.architecture, _draft_n_max(settings) if n_rs_seq is None else n_rs_seq
    )
    rs = [0] * (n_dev + 1)
    for il, grown in _main_rs_growth(facts, settings, snapshots).items():
        home = full[il] if offload_kqv else CPU
        rs[home if home >= 0 else n_dev] += grown
    return MtpEstimate(
        weights_bytes=tuple(total[:n_dev]),
        expert_bytes=tuple(experts[:n_dev]),
        kv_bytes=tuple(kv[:n_dev]),
        compute_bytes=compute.devices,
        main_rs_bytes=tuple(rs[:n_dev]),
        host_weights_bytes=total[n_dev],
        host_expert_bytes=experts[n_dev],
        host_kv_bytes=kv[n_dev],
        host_compute_bytes=compute.host_bytes,
        host_main_rs_bytes=rs[n_dev],
        nextn_homes=tuple(full[il] for il in nextn_layers(facts)),
        n_rs_seq=snapshots,
    )
