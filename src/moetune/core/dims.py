"""The one reader of per-layer dimensions: head counts, KV heads, head sizes, the sliding-window
pattern and window, recurrent layers and their state, MLA; read as src/llama-model.cpp's
``load_hparams`` (and each architecture's loader in src/models/) reads them, build 11434.

The KV cache (kvcache.py), the compute-buffer replay (compute/) and the model facts all take
their dimensions from ``dims_of(facts)``. Architecture knowledge lives here, in the tables below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from moetune.core.hparams import HParams, first, largest, per_layer, scalar
from moetune.errors import GGUFFormatError

if TYPE_CHECKING:
    from moetune.core.facts import ModelFacts

# Architectures whose loader (src/models/<arch>.cpp ``load_arch_hparams``) reads no SWA,
# recurrent, MLA or head-size keys of its own, and which llama_model::create_memory
# (src/llama-model.cpp) gives a plain ``llama_kv_cache``: the base loader's GQA rules are exact.
PLAIN_ARCHS = frozenset(
    {
        "llama",
        "qwen2",
        "qwen2moe",
        "qwen3",
        "qwen3moe",
        "qwen3vlmoe",
        "phimoe",
        "dbrx",
        "olmoe",
        "deepseek",
        "granitemoe",
        "bailingmoe2",
        "dots1",
        "ernie4_5-moe",
        "hunyuan-moe",
        "minimax-m2",
        "grovemoe",
        "mistral3",
        "seed_oss",
        "glm4moe",
    }
)
# Loaders that call ``load_swa_pattern(ml, n_pattern, dense_first)`` with these defaults and
# read ``attention.sliding_window`` (src/models/openai-moe.cpp: pattern 2, SWA on even layers).
SWA_ARCHS: dict[str, tuple[int, bool]] = {
    "gpt-oss": (2, False),
    "llama4": (4, False),  # src/models/llama4.cpp: 3 chunked - 1 full
    "smallthinker": (4, True),  # src/models/smallthinker.cpp: 1 full - 3 SWA
}
# Loaders that replace the window by a fixed one (llama4: LLAMA_SWA_TYPE_CHUNKED with
# 8192-token chunks unless attention.sliding_window is present and 0; smallthinker: 4096
# whenever attention.sliding_window > 0). The cache sizes a chunked cache like a sliding one
# (llama_kv_cache_iswa: pad256(min(ctx, n_swa * n_seq + n_ubatch))). (window, on when absent)
FIXED_WINDOWS: dict[str, tuple[int, bool]] = {"llama4": (8192, True), "smallthinker": (4096, False)}
# Loaders that read attention.key_length_mla / value_length_mla (src/models/deepseek2.cpp).
# DeepSeek sparse attention (src/models/deepseek32.cpp, glm-dsa.cpp): MLA plus a lightning
# indexer whose keys (attention.indexer.key_length, one head) have a cache of their own
# (llama_kv_cache_dsa, src/llama-kv-cache-dsa.cpp); glm-dsa's attention.indexer.types says
# which layers own an indexer (the others reuse the previous one's top-k).
DSA_ARCHS = frozenset({"deepseek32", "glm-dsa"})
MLA_ARCHS = frozenset({"deepseek2"}) | DSA_ARCHS
# Gated-delta-net hybrids: create_memory's filter_attn / filter_recr for QWEN3NEXT, QWEN35,
# QWEN35MOE (src/llama-model.cpp), recurrent flags from src/models/qwen3next.cpp & qwen35*.cpp.
HYBRID_ARCHS = frozenset({"qwen3next", "qwen35", "qwen35moe"})
# Mamba hybrids (llama_memory_hybrid with create_memory's default filters): a layer is
# recurrent iff its attention.head_count_kv is 0 (src/models/granite-hybrid.cpp
# load_arch_hparams); the mixer is build_mamba2_layer (src/models/mamba-base.cpp).
MAMBA_HYBRID_ARCHS = frozenset({"granitehybrid", "jamba"})  # jamba.cpp: the same rule
# Nemotron-H (src/models/nemotron-h.cpp): each block is ONE of Mamba-2 (head_count_kv and
# feed_forward_length both 0), attention (feed_forward_length 0) or an FFN/MoE block, which
# create_memory's filter_attn / filter_recr leave without any cache.
NEMOTRON_H_ARCHS = frozenset({"nemotron_h_moe"})
# LFM2 short-convolution hybrids (src/models/lfm2moe.cpp): recurrent iff head_count_kv is 0,
# one conv state of n_embd * (shortconv.l_cache - 1) per sequence, no SSM state.
SHORTCONV_ARCHS = frozenset({"lfm2moe"})
KNOWN_ARCHS = (
    PLAIN_ARCHS
    | MLA_ARCHS
    | HYBRID_ARCHS
    | MAMBA_HYBRID_ARCHS
    | NEMOTRON_H_ARCHS
    | SHORTCONV_ARCHS
    | frozenset(SWA_ARCHS)
)
# The architectures the fixture matrix checks against llama-server and llama-fit-params
# (tests/server/test_arch_matrix.py, which fails when this set and the matrix differ);
# ``inspect`` calls them verified. Add an architecture here together with its
# tests/support/archfix_*.py fixture.
VERIFIED_ARCHS = frozenset(
    {
        "qwen3moe",
        "gpt-oss",
        "deepseek2",
        "glm4moe",
        "qwen35moe",  # tests/support/factory.py
        # tests/support/archfix_a.py
        "qwen2moe",
        "olmoe",
        "granitemoe",
        "ernie4_5-moe",
        "hunyuan-moe",
        "dots1",
        "bailingmoe2",
        "smallthinker",
        "minimax-m2",
        "grovemoe",
        "qwen3vlmoe",
        "phimoe",
        "dbrx",
        "llama",
        "llama4",
        "qwen3next",
        "granitehybrid",
        "jamba",  # tests/support/archfix_b.py
        "deepseek32",
        "glm-dsa",  # tests/support/archfix_c.py
        "nemotron_h_moe",
        "lfm2moe",  # tests/support/archfix_b2.py
    }
)


class SsmDims(NamedTuple):
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


class Dims(NamedTuple):
    """What llama.cpp's ``llama_hparams`` holds for one model, per layer where it varies."""

    arch: str
    known: bool  # an architecture whose cache and graph rules moetune has read
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


def dims_of(facts: ModelFacts) -> Dims:
    """Read the dimensions the way src/llama-model.cpp load_hparams does."""
    hp, arch = facts.hparams, facts.architecture
    n_all = scalar(hp, "block_count", facts.n_layers) or facts.n_layers
    if n_all <= 0:
        raise GGUFFormatError("the model has no blocks")
    n_layer = n_all - min(scalar(hp, "nextn_predict_layers", 0), n_all)
    swa, n_swa = _swa_layers(hp, arch, n_all, n_layer)
    n_head = per_layer(hp, "attention.head_count", n_all, 0)
    n_head_kv = per_layer(hp, "attention.head_count_kv", n_all, 0)
    indexer_k, indexer_full = _indexer(hp, arch, n_all, n_layer)
    dims = Dims(
        arch=arch,
        known=arch in KNOWN_ARCHS,
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
        recurrent=tuple(_recurrent_layers(facts, n_all, n_layer)),
        mla=arch in MLA_ARCHS and _is_mla(hp),
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
    return dims._replace(
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


def _indexer(hp: HParams, arch: str, n_all: int, n_layer: int) -> tuple[int, tuple[bool, ...]]:
    """The DSA indexer: its key length, and the layers that own one (create_memory's
    filter_lid: trunk layers only; glm-dsa: attention.indexer.types, all layers when absent
    before GLM-5.2, whose context_length is 1M and whose default is GLM_5_2_DEFAULT_INDEXER_TYPES).
    """
    if arch not in DSA_ARCHS:
        return 0, ()
    flags = [True] * n_layer
    if arch == "glm-dsa":
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


def _swa_layers(hp: HParams, arch: str, n_all: int, n_layer: int) -> tuple[list[bool], int]:
    """Which layers use the sliding window, and the window (0 when none).

    llama_model_base::load_swa_pattern (src/llama-model.cpp): an array
    attention.sliding_window_pattern gives the flags; otherwise an integer pattern (the
    loader's default when absent) feeds llama_hparams::set_swa_pattern
    (src/llama-hparams.cpp), which marks only the first n_layer() layers.
    """
    if arch not in SWA_ARCHS:
        return [False] * n_all, 0
    n_pattern, dense_first = SWA_ARCHS[arch]
    n_swa = scalar(hp, "attention.sliding_window", 0)
    if arch in FIXED_WINDOWS:
        fixed, when_absent = FIXED_WINDOWS[arch]
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


def _recurrent_layers(facts: ModelFacts, n_all: int, n_layer: int) -> list[bool]:
    """Recurrent (linear-attention) layers.

    The gated-delta-net hybrids (src/models/qwen35moe.cpp, qwen3next.cpp, qwen35.cpp):
    attention.recurrent_layers (scalar or per-layer array) if present, else every
    full_attention_interval-th layer (default 4) is attention and the others of the first
    n_layer() are recurrent. Any other architecture: the blocks that hold an ``ssm_conv1d``.
    """
    hp = facts.hparams
    if facts.architecture in NEMOTRON_H_ARCHS:  # is_recr: no KV heads and no FFN
        n_head_kv = per_layer(hp, "attention.head_count_kv", n_all, 0)
        n_ff = per_layer(hp, "feed_forward_length", n_all, 0)
        return [il < n_layer and n_head_kv[il] == 0 and n_ff[il] == 0 for il in range(n_all)]
    if facts.architecture in MAMBA_HYBRID_ARCHS | SHORTCONV_ARCHS:
        n_head_kv = per_layer(hp, "attention.head_count_kv", n_all, 0)
        return [il < n_layer and n_head_kv[il] == 0 for il in range(n_all)]
    if facts.architecture not in HYBRID_ARCHS:
        conv = {t.layer for t in facts.tensors if t.name.endswith(".ssm_conv1d.weight")}
        return [il < n_layer and il in conv for il in range(n_all)]
    if "attention.recurrent_layers" in hp:
        return [bool(v) for v in per_layer(hp, "attention.recurrent_layers", n_all, 0)]
    interval = scalar(hp, "full_attention_interval", 4)
    if interval <= 0:
        raise GGUFFormatError(f"full_attention_interval must be positive, got {interval}")
    return [il < n_layer and (il + 1) % interval != 0 for il in range(n_all)]


def _ffn_only(hp: HParams, arch: str, n_all: int) -> tuple[bool, ...]:
    """Nemotron-H's FFN blocks: a non-zero feed_forward_length (create_memory's filters keep
    attention and recurrent state only where it is 0)."""
    if arch not in NEMOTRON_H_ARCHS:
        return ()
    return tuple(n > 0 for n in per_layer(hp, "feed_forward_length", n_all, 0))


def _vocab(facts: ModelFacts) -> int:
    """Rows of the output matrix (or of the tied token embeddings)."""
    for name in ("output.weight", "token_embd.weight"):
        for tensor in facts.tensors:
            if tensor.name == name and len(tensor.shape) >= 2:
                return tensor.shape[1]
    return 0
