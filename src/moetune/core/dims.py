"""The one reader of per-layer dimensions: head counts, KV heads, head sizes, the sliding-window
pattern and window, recurrent layers and their state, MLA; read as src/llama-model.cpp's
``load_hparams`` (and each architecture's loader in src/models/) reads them, build 11434.

The KV cache (kvcache.py), the compute-buffer replay (compute/) and the model facts all take
their dimensions from ``dims_of(facts)``. What each architecture's loader does differently
comes from its record (core/archs.py); the rules here read the keys the way the records say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from moetune.core.archs import Arch, arch_of
from moetune.core.hparams import HParams, first, largest, per_layer, scalar
from moetune.errors import GGUFFormatError
from moetune.record import record


class _Layer(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def is_nextn(self) -> bool: ...


class _Tensor(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def layer(self) -> int | None: ...
    @property
    def shape(self) -> Sequence[int]: ...


class DimsSource(Protocol):
    """What ``dims_of`` reads of a model: core/facts.py's ModelFacts is one (a Protocol, so
    that facts.py, which gives every ModelFacts its dims, is not imported back)."""

    @property
    def architecture(self) -> str: ...
    @property
    def hparams(self) -> HParams: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def n_experts_used(self) -> int: ...
    @property
    def layers(self) -> Sequence[_Layer]: ...
    @property
    def tensors(self) -> Sequence[_Tensor]: ...


@record(frozen=True)
class SsmDims:
    """The ``ssm.*`` keys (0 when absent) of Mamba-style and gated-delta-net layers."""

    conv_kernel: int
    inner_size: int
    state_size: int
    group_count: int
    time_step_rank: int
    n_embd: int = 0
    shortconv_l_cache: int = 0  # LFM2's shortconv.l_cache

    @property
    def n_embd_r(self) -> int:
        """Conv state row (llama-hparams.cpp): LFM2's n_embd * (l_cache - 1), else Mamba's
        (d_conv - 1) * (d_inner + 2 * groups * d_state)."""
        if self.shortconv_l_cache:
            return self.n_embd * (self.shortconv_l_cache - 1)
        d_inner = self.inner_size + 2 * self.group_count * self.state_size
        return max(self.conv_kernel - 1, 0) * d_inner

    @property
    def n_embd_s(self) -> int:
        """SSM state row: d_state * d_inner."""
        return self.state_size * self.inner_size


@record(frozen=True)
class Dims:
    """What llama.cpp's ``llama_hparams`` holds for one model, per layer where it varies."""

    arch: str
    record: Arch  # the architecture's record (core/archs.py)
    n_layer_all: int  # block_count, NextN/MTP blocks included
    kv_end: int  # layers >= kv_end get no cache (NextN/MTP, filtered in create_memory)
    layers: tuple[int, ...]  # the blocks the graph runs (NextN/MTP blocks are skipped)
    n_embd: int
    n_vocab: int
    n_head: tuple[int, ...]  # per layer
    n_head_kv: tuple[int, ...]  # per layer
    head_k: tuple[int, int]  # (full, SWA) key length
    head_v: tuple[int, int]  # (full, SWA) value length
    swa: tuple[bool, ...]  # per layer: uses the sliding window
    n_swa: int  # the window (0 when none)
    recurrent: tuple[bool, ...]  # per layer: a recurrent (linear-attention) layer
    mla: bool
    ssm: SsmDims
    n_pos: int  # positions per token (4 with M-RoPE sections)
    n_expert_used: int
    indexer_k: int = 0  # DSA: the indexer's key length (0: no indexer)
    indexer_full: tuple[bool, ...] = ()  # DSA: per layer, the layer owns an indexer
    ffn_only: tuple[bool, ...] = ()  # per layer: an FFN-only block, no mixer, no cache

    @property
    def known(self) -> bool:
        """An architecture whose cache and graph rules moetune has read."""
        return self.record.known

    def is_ffn_only(self, il: int) -> bool:
        """Nemotron-H's FFN/MoE blocks: neither attention nor recurrent state."""
        return bool(self.ffn_only) and self.ffn_only[il]

    def has_kv(self, il: int) -> bool:
        return il < self.kv_end and not self.recurrent[il] and not self.is_ffn_only(il)

    def has_indexer(self, il: int) -> bool:
        """The layer holds indexer keys in the DSA cache (llama_kv_cache_dsa's kv_lid)."""
        return self.indexer_k > 0 and self.has_kv(il) and self.indexer_full[il]

    def has_rs(self, il: int) -> bool:
        return il < self.kv_end and self.recurrent[il]

    def k_width(self, il: int) -> int:
        """``n_embd_k_gqa(il)`` (src/llama-hparams.cpp): head size x KV heads of the layer."""
        return self.head_k[self.swa[il]] * self.n_head_kv[il]

    def v_width(self, il: int) -> int:
        return self.head_v[self.swa[il]] * self.n_head_kv[il]

    @property
    def n_head_max(self) -> int:
        return max(max(self.n_head, default=1), 1)

    @property
    def n_head_kv_max(self) -> int:
        return max(max(self.n_head_kv, default=1), 1)

    @property
    def swa_layers(self) -> frozenset[int]:
        return frozenset(il for il in self.layers if self.swa[il])

    @property
    def recurrent_layers(self) -> frozenset[int]:
        return frozenset(il for il in self.layers if self.recurrent[il])


def dims_of(facts: DimsSource) -> Dims:
    """Read the dimensions the way src/llama-model.cpp load_hparams does."""
    hp, arch = facts.hparams, arch_of(facts.architecture)
    n_all = scalar(hp, "block_count", facts.n_layers) or facts.n_layers
    if n_all <= 0:
        raise GGUFFormatError("the model has no blocks")
    n_layer = n_all - min(scalar(hp, "nextn_predict_layers", 0), n_all)
    swa, n_swa = _swa_layers(hp, arch, n_all, n_layer)
    n_head = per_layer(hp, "attention.head_count", n_all, 0)
    n_head_kv = per_layer(hp, "attention.head_count_kv", n_all, 0)
    indexer_k, indexer_full = _indexer(hp, arch, n_all, n_layer)
    dims = Dims(
        arch=arch.name,
        record=arch,
        n_layer_all=n_all,
        # create_memory: NextN/MTP layers are filtered out (when n_layer() > 0); recurrent
        # layers only range over n_layer() (llama_memory_recurrent ctor).
        kv_end=n_layer if n_layer > 0 else n_all,
        layers=tuple(x.index for x in facts.layers if not x.is_nextn),
        n_embd=largest(hp, "embedding_length", 0),
        n_vocab=_vocab(facts),
        n_head=tuple(n_head),
        n_head_kv=tuple(n_head_kv if "attention.head_count_kv" in hp else n_head),
        head_k=_head_sizes(hp, "key_length"),
        head_v=_head_sizes(hp, "value_length"),
        swa=tuple(swa),
        n_swa=n_swa,
        recurrent=tuple(_recurrent_layers(facts, arch, n_all, n_layer)),
        mla=arch.mla and _is_mla(hp),
        ssm=_ssm_dims(hp),
        n_pos=4 if "rope.dimension_sections" in hp else 1,
        n_expert_used=max(facts.n_experts_used, 1),
        indexer_k=indexer_k,
        indexer_full=indexer_full,
        ffn_only=_ffn_only(hp, arch, n_all),
    )
    return dims if dims.known else untaught(dims, hp)


def untaught(dims: Dims, hp: HParams) -> Dims:
    """Dimensions that never under-size the cache of an architecture moetune has not been
    taught: every KV layer with the largest KV head count and the largest head size the file
    declares (K and V alike; MLA and SWA sizes included), full context (no window), a V
    cache; blocks holding an ``ssm_conv1d`` keep their recurrent state."""
    sizes = [*dims.head_k, *dims.head_v]
    sizes += [scalar(hp, f"attention.{k}", 0) for k in _HEAD_SIZE_KEYS]
    head = max(sizes, default=0)
    n_kv = max(max(dims.n_head_kv, default=0), 1 if head else 0)
    n_all = dims.n_layer_all
    return replace(
        dims,
        n_head_kv=(n_kv,) * n_all,
        head_k=(head, head),
        head_v=(head, head),
        swa=(False,) * n_all,
        n_swa=0,
        mla=False,
    )


_HEAD_SIZE_KEYS = (
    "key_length",
    "value_length",
    "key_length_swa",
    "value_length_swa",
    "key_length_mla",
    "value_length_mla",
)


_SSM_KEYS = ("conv_kernel", "inner_size", "state_size", "group_count", "time_step_rank")


def _ssm_dims(hp: HParams) -> SsmDims:
    """The ``ssm.*`` keys, plus what LFM2's conv state row needs."""
    conv, inner, state, groups, dt_rank = (scalar(hp, f"ssm.{k}", 0) for k in _SSM_KEYS)
    return SsmDims(
        conv,
        inner,
        state,
        groups,
        dt_rank,
        n_embd=largest(hp, "embedding_length", 0),
        shortconv_l_cache=scalar(hp, "shortconv.l_cache", 0),
    )


def _head_sizes(hp: HParams, key: str) -> tuple[int, int]:
    """(full, swa) head size: attention.<key>, default n_embd / n_head(0); SWA layers use
    attention.<key>_swa when present (llama_model_base::load_hparams)."""
    n_head0 = first(hp, "attention.head_count")
    if n_head0 <= 0:
        return 0, 0  # "non-transformer models do not have attention heads"
    full = scalar(hp, f"attention.{key}", scalar(hp, "embedding_length", 0) // n_head0)
    return full, scalar(hp, f"attention.{key}_swa", full)


def _indexer(hp: HParams, arch: Arch, n_all: int, n_layer: int) -> tuple[int, tuple[bool, ...]]:
    """The DSA indexer: its key length, and the layers that own one (create_memory's
    filter_lid: trunk layers only; "types" (glm-dsa): attention.indexer.types, all layers when
    absent before GLM-5.2, whose context_length is 1M and whose default is
    GLM_5_2_DEFAULT_INDEXER_TYPES).
    """
    if not arch.indexer:
        return 0, ()
    flags = [True] * n_layer
    if arch.indexer == "types":
        if "attention.indexer.types" in hp:
            flags = [bool(v) for v in per_layer(hp, "attention.indexer.types", n_layer, 0)]
        elif scalar(hp, "context_length", 0) >= _GLM_5_2_CONTEXT:
            flags = [il < 2 or (il % 4 == 2 and il < 78) for il in range(n_layer)]
    full = tuple(flags) + (False,) * (n_all - n_layer)
    return scalar(hp, "attention.indexer.key_length", 0), full


_GLM_5_2_CONTEXT = 1048576  # src/models/glm-dsa.cpp is_pre_5_2: n_ctx_train < 1048576


def _is_mla(hp: HParams) -> bool:
    """src/llama-hparams.cpp is_mla(): both MLA head sizes are set and non-zero."""
    return (
        scalar(hp, "attention.key_length_mla", 0) > 0
        and scalar(hp, "attention.value_length_mla", 0) > 0
    )


def _swa_layers(hp: HParams, arch: Arch, n_all: int, n_layer: int) -> tuple[list[bool], int]:
    """Which layers use the sliding window, and the window (0 when none).

    llama_model_base::load_swa_pattern (src/llama-model.cpp): an array
    attention.sliding_window_pattern gives the flags; otherwise an integer pattern (the
    loader's default when absent) feeds llama_hparams::set_swa_pattern
    (src/llama-hparams.cpp), which marks only the first n_layer() layers.
    """
    if arch.swa_pattern is None:
        return [False] * n_all, 0
    n_pattern, dense_first = arch.swa_pattern
    n_swa = scalar(hp, "attention.sliding_window", 0)
    if arch.fixed_window is not None:
        fixed, when_absent = arch.fixed_window
        present = "attention.sliding_window" in hp
        n_swa = fixed if (n_swa > 0 if present else when_absent) else 0
    if n_swa <= 0:  # the loader requires the key: without a window there is no SWA
        return [False] * n_all, 0
    value = hp.get("attention.sliding_window_pattern")
    if isinstance(value, list):
        flags = [bool(v) for v in value[:n_all]]
        return flags + [False] * (n_all - len(flags)), n_swa
    n_pattern = scalar(hp, "attention.sliding_window_pattern", n_pattern)
    return [
        il < n_layer and _swa_by_pattern(il, n_pattern, dense_first) for il in range(n_all)
    ], n_swa


def _swa_by_pattern(il: int, n_pattern: int, dense_first: bool) -> bool:
    """llama_hparams::set_swa_pattern: every n_pattern-th layer is dense (0: all SWA)."""
    if n_pattern == 0:
        return True
    if dense_first:
        return il % n_pattern != 0
    return il % n_pattern < n_pattern - 1


def _recurrent_layers(facts: DimsSource, arch: Arch, n_all: int, n_layer: int) -> list[bool]:
    """Recurrent (linear-attention) layers, by the record's ``recurrence`` rule.

    "interval", the gated-delta-net hybrids (src/models/qwen35moe.cpp, qwen3next.cpp,
    qwen35.cpp): attention.recurrent_layers (scalar or per-layer array) if present, else every
    full_attention_interval-th layer (default 4) is attention and the others of the first
    n_layer() are recurrent. "ssm_conv", any other architecture: the blocks that hold an
    ``ssm_conv1d``.
    """
    hp = facts.hparams
    if arch.recurrence == "no_kv_no_ffn":  # Nemotron-H's is_recr: no KV heads and no FFN
        n_head_kv = per_layer(hp, "attention.head_count_kv", n_all, 0)
        n_ff = per_layer(hp, "feed_forward_length", n_all, 0)
        return [il < n_layer and n_head_kv[il] == 0 and n_ff[il] == 0 for il in range(n_all)]
    if arch.recurrence == "no_kv_heads":
        n_head_kv = per_layer(hp, "attention.head_count_kv", n_all, 0)
        return [il < n_layer and n_head_kv[il] == 0 for il in range(n_all)]
    if arch.recurrence == "ssm_conv":
        conv = {t.layer for t in facts.tensors if t.name.endswith(".ssm_conv1d.weight")}
        return [il < n_layer and il in conv for il in range(n_all)]
    if "attention.recurrent_layers" in hp:
        return [bool(v) for v in per_layer(hp, "attention.recurrent_layers", n_all, 0)]
    interval = scalar(hp, "full_attention_interval", 4)
    if interval <= 0:
        raise GGUFFormatError(f"full_attention_interval must be positive, got {interval}")
    return [il < n_layer and (il + 1) % interval != 0 for il in range(n_all)]


def _ffn_only(hp: HParams, arch: Arch, n_all: int) -> tuple[bool, ...]:
    """Nemotron-H's FFN blocks: a non-zero feed_forward_length (create_memory's filters keep
    attention and recurrent state only where it is 0)."""
    if arch.recurrence != "no_kv_no_ffn":
        return ()
    return tuple(n > 0 for n in per_layer(hp, "feed_forward_length", n_all, 0))


def _vocab(facts: DimsSource) -> int:
    """Rows of the output matrix (or of the tied token embeddings)."""
    for name in ("output.weight", "token_embd.weight"):
        for tensor in facts.tensors:
            if tensor.name == name and len(tensor.shape) >= 2:
                return tensor.shape[1]
    return 0
