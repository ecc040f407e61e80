"""KV cache and recurrent-state (RS) sizes per layer, exactly as llama.cpp build 11434 sizes them.

Pure: model facts x context settings -> bytes. Every rule below names the llama.cpp source it
was read from (paths relative to the llama.cpp tree: ``src/``, ``common/``, ``tools/``).

What llama.cpp allocates (src/llama-kv-cache.cpp, ``llama_kv_cache::llama_kv_cache``): per
attention layer one K tensor ``[n_embd_k_gqa(il), kv_size, n_stream]`` of ``type_k`` and one V
tensor ``[n_embd_v_gqa(il), kv_size, n_stream]`` of ``type_v`` (no V for MLA). ``kv_size`` is
the number of *cells* printed in ``llama_kv_cache: size = ... (N cells, ...)``; ``n_stream`` is
1 with a unified cache and ``n_seq`` otherwise. Recurrent layers (src/llama-memory-recurrent.cpp)
hold one f32 R row of ``n_embd_r`` and one f32 S row of ``n_embd_s`` per sequence.

Buffers are the sum of these tensors, each padded to the buffer type's alignment (32 bytes on the
CPU, 128 on CUDA; ggml/src/ggml-backend.cpp ``ggml_backend_buft_alloc_buffer_n_plan``). KV
tensors are multiples of 256 bytes (``kv_size`` is), so the padding never shows there; the
figures here are unpadded ``ggml_nbytes``, which is also what the ``size =`` lines print.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from moetune.errors import BadValueError, GGUFFormatError
from moetune.model import HParam, ModelFacts

# common/arg.cpp ``kv_cache_types``: what -ctk/-ctv accept (ggml type names).
CACHE_TYPES: tuple[str, ...] = (
    "f32",
    "f16",
    "bf16",
    "q8_0",
    "q4_0",
    "q4_1",
    "q5_0",
    "q5_1",
    "iq4_nl",
)
_UNQUANTIZED = frozenset({"f32", "f16", "bf16"})
_F32_BYTES = 4
CTX_PAD = 256  # src/llama-context.cpp: cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256)
SWA_PAD = 256  # src/llama-kv-cache-iswa.cpp: "the SWA cache is always padded to 256"
MAX_SEQ = 256  # src/llama-cparams.h LLAMA_MAX_SEQ

# Architectures whose loader (src/models/<arch>.cpp ``load_arch_hparams``) reads no SWA,
# recurrent, MLA or head-size keys of its own, and which llama_model::create_memory
# (src/llama-model.cpp) gives a plain ``llama_kv_cache``: the base loader's GQA rules are exact.
_PLAIN_ARCHS = frozenset(
    {
        "llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "qwen3vlmoe", "phimoe", "dbrx",
        "olmoe", "deepseek", "granitemoe", "bailingmoe2", "dots1", "ernie4_5-moe",
        "hunyuan-moe", "minimax-m2", "grovemoe", "mistral3", "seed_oss", "glm4moe",
    }
)  # fmt: skip
# Loaders that call ``load_swa_pattern(ml, n_pattern, dense_first)`` with these defaults and
# read ``attention.sliding_window`` (src/models/openai-moe.cpp: pattern 2, SWA on even layers).
_SWA_ARCHS: dict[str, tuple[int, bool]] = {"gpt-oss": (2, False)}
# Loaders that read attention.key_length_mla / value_length_mla (src/models/deepseek2.cpp).
_MLA_ARCHS = frozenset({"deepseek2"})
# Gated-delta-net hybrids: create_memory's filter_attn / filter_recr for QWEN3NEXT, QWEN35,
# QWEN35MOE (src/llama-model.cpp), recurrent flags from src/models/qwen3next.cpp & qwen35*.cpp.
_HYBRID_ARCHS = frozenset({"qwen3next", "qwen35", "qwen35moe"})
_KNOWN_ARCHS = _PLAIN_ARCHS | _MLA_ARCHS | _HYBRID_ARCHS | frozenset(_SWA_ARCHS)


def parse_cache_type(name: str) -> str:
    """A -ctk/-ctv value, case-insensitive, as llama.cpp's type name (``Q8_0`` -> ``q8_0``)."""
    canonical = name.strip().lower()
    if canonical not in CACHE_TYPES:
        raise BadValueError(
            f"unknown cache type {name!r}",
            hint=f"use one of: {', '.join(CACHE_TYPES)}",
        )
    return canonical


@dataclass(frozen=True)
class LayerCache:
    """The cache one block holds: K+V bytes, recurrent R+S bytes, and its KV cells."""

    layer: int
    kv_bytes: int
    rs_bytes: int
    n_cells: int  # KV cells per stream, as llama.cpp prints them (0 if the layer has no KV)
    k_bytes: int = 0
    is_swa: bool = False

    @property
    def v_bytes(self) -> int:
        return self.kv_bytes - self.k_bytes


@dataclass(frozen=True)
class CacheEstimate:
    """Per-layer cache sizes and the context llama.cpp really uses."""

    layers: tuple[LayerCache, ...]
    n_ctx: int  # after llama.cpp's padding / rounding
    exact: bool = True  # False when the architecture is unknown and this is a GQA guess
    n_ctx_seq: int = 0  # context per sequence (= n_ctx with a unified cache)
    n_stream: int = 1  # KV streams: 1 unified, n_seq otherwise
    rs_cells: int = 0  # recurrent-state cells (= n_seq) when any layer is recurrent

    @property
    def kv_bytes(self) -> int:
        return sum(layer.kv_bytes for layer in self.layers)

    @property
    def rs_bytes(self) -> int:
        return sum(layer.rs_bytes for layer in self.layers)

    def kv_bytes_for(self, layers: Iterable[int]) -> int:
        """KV bytes of the given block indices (unknown indices count 0)."""
        wanted = set(layers)
        return sum(layer.kv_bytes for layer in self.layers if layer.layer in wanted)

    def rs_bytes_for(self, layers: Iterable[int]) -> int:
        """Recurrent-state bytes of the given block indices."""
        wanted = set(layers)
        return sum(layer.rs_bytes for layer in self.layers if layer.layer in wanted)


@dataclass(frozen=True)
class _Layout:
    """The subset of llama.cpp's ``llama_hparams`` that sizes the cache."""

    n_layer_all: int  # block_count, NextN/MTP blocks included
    kv_end: int  # layers >= kv_end get no cache (NextN/MTP, filtered in create_memory)
    head_kv: tuple[int, ...]
    head_k: tuple[int, int]  # (full, swa) key length
    head_v: tuple[int, int]
    swa: tuple[bool, ...]
    recr: tuple[bool, ...]
    n_swa: int
    mla: bool
    n_embd_r: int
    n_embd_s: int
    exact: bool

    def has_kv(self, il: int) -> bool:
        return il < self.kv_end and not self.recr[il]

    def has_rs(self, il: int) -> bool:
        return il < self.kv_end and self.recr[il]

    def k_width(self, il: int) -> int:
        """``n_embd_k_gqa(il)`` (src/llama-hparams.cpp): head size x KV heads of the layer."""
        return self.head_k[self.swa[il]] * self.head_kv[il]

    def v_width(self, il: int) -> int:
        return self.head_v[self.swa[il]] * self.head_kv[il]


def estimate_cache(
    facts: ModelFacts,
    *,
    n_ctx: int,
    type_k: str = "f16",
    type_v: str = "f16",
    n_seq: int = 4,
    kv_unified: bool = True,
    flash_attn: bool = True,
    n_ubatch: int = 512,
    swa_full: bool = False,
    n_batch: int = 2048,
) -> CacheEstimate:
    """KV and RS bytes per layer for llama-server ``-c n_ctx -ctk type_k -ctv type_v ...``.

    The defaults are llama-server's: ``-np`` auto means 4 slots with a unified KV cache
    (tools/server/server.cpp; note that an explicit ``-np N`` leaves ``kv_unified`` off unless
    ``-kvu`` is given, and that ``-no-kvu`` is overridden when ``-np`` is auto).

    Refused combinations (llama_init_from_model, src/llama-context.cpp), raised as
    BadValueError: a quantized V cache with flash attention off (``-fa off``; with
    ``-fa auto`` llama.cpp turns FA on for it, and fails later if the device cannot run FA);
    with FA on, a quantized K/V type whose block size does not divide the head size; and on
    MLA models, different K and V types.
    """
    if n_ctx <= 0:
        raise BadValueError(f"context size must be positive, got {n_ctx}")
    if not 1 <= n_seq <= MAX_SEQ:
        raise BadValueError(f"number of sequences must be 1..{MAX_SEQ}, got {n_seq}")
    types = (parse_cache_type(type_k), parse_cache_type(type_v))
    layout = _layout(facts)
    _check_types(layout, *types, flash_attn)
    ctx, ctx_seq, n_stream = _context_sizes(n_ctx, n_seq, kv_unified)
    # llama_context ctor: n_batch = min(n_ctx (unpadded), n_batch); n_ubatch = min(n_batch,
    # n_ubatch, or n_batch when 0).
    batch = min(n_ctx, n_batch)
    ubatch = max(1, min(batch, n_ubatch if n_ubatch > 0 else batch))
    swa = _swa_cells(layout.n_swa, ctx_seq, n_seq, kv_unified, ubatch)
    sizing = _Sizing(
        cells=(ctx_seq, ctx_seq if swa_full else swa),
        n_stream=n_stream,
        types=types,
        v_pad=0 if flash_attn else _v_width_max(layout),
        rs_rows=n_seq,  # create_memory: rs_size = max(1, n_seq_max), x (1 + n_rs_seq = 0)
    )
    layers = tuple(_layer(layout, sizing, il) for il in range(layout.n_layer_all))
    any_rs = any(layout.has_rs(il) for il in range(layout.n_layer_all))
    return CacheEstimate(
        layers=layers,
        n_ctx=ctx,
        exact=layout.exact,
        n_ctx_seq=ctx_seq,
        n_stream=n_stream,
        rs_cells=n_seq if any_rs else 0,
    )


@dataclass(frozen=True)
class _Sizing:
    """The context-dependent inputs of one estimate."""

    cells: tuple[int, int]  # (full, SWA) cells per stream
    n_stream: int
    types: tuple[str, str]  # (type_k, type_v)
    v_pad: int  # V row width for every layer when V is transposed (no FA), else 0
    rs_rows: int


def _layer(layout: _Layout, sizing: _Sizing, il: int) -> LayerCache:
    """One block's cache: llama_kv_cache (K, V) and llama_memory_recurrent (R, S) tensors."""
    rs = 0
    if layout.has_rs(il):
        rs = (layout.n_embd_r + layout.n_embd_s) * _F32_BYTES * sizing.rs_rows
    if not layout.has_kv(il):
        return LayerCache(layer=il, kv_bytes=0, rs_bytes=rs, n_cells=0)
    is_swa = layout.swa[il]
    n_cells = sizing.cells[is_swa]
    rows = n_cells * sizing.n_stream
    k = row_bytes(sizing.types[0], layout.k_width(il)) * rows
    # llama_kv_cache ctor: no V tensor with MLA; with V transposed (no FA) every V row is
    # n_embd_v_gqa_max() wide [TAG_V_CACHE_VARIABLE].
    v_width = sizing.v_pad or layout.v_width(il)
    v = 0 if layout.mla else row_bytes(sizing.types[1], v_width) * rows
    return LayerCache(
        layer=il, kv_bytes=k + v, rs_bytes=rs, n_cells=n_cells, k_bytes=k, is_swa=is_swa
    )


def row_bytes(type_name: str, n_elements: int) -> int:
    """``ggml_row_size``: bytes of a row of ``n_elements`` values of a ggml type."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name.upper()]]
    if n_elements % block:
        raise BadValueError(
            f"a {type_name} cache row needs a multiple of {block} values, got {n_elements}",
            hint="use an f16 cache for this model",
        )
    return n_elements // block * size


def _pad(value: int, multiple: int) -> int:
    """``GGML_PAD``: round up to a multiple."""
    return (value + multiple - 1) // multiple * multiple


def _context_sizes(n_ctx: int, n_seq: int, kv_unified: bool) -> tuple[int, int, int]:
    """(n_ctx, n_ctx_seq, n_stream) as src/llama-context.cpp's llama_context ctor sets them.

    n_ctx is padded up to 256; without a unified cache each sequence gets
    ``GGML_PAD(n_ctx / n_seq, 256)`` cells and n_ctx becomes that times n_seq (which can
    round *up*, e.g. -c 512 -np 4 -> 4 x 256 = 1024). The cache's kv_size is n_ctx_seq.
    """
    ctx = _pad(n_ctx, CTX_PAD)
    if kv_unified:
        return ctx, ctx, 1
    ctx_seq = _pad(ctx // n_seq, CTX_PAD)
    return ctx_seq * n_seq, ctx_seq, n_seq


def _swa_cells(n_swa: int, ctx_seq: int, n_seq: int, unified: bool, n_ubatch: int) -> int:
    """SWA cache cells (src/llama-kv-cache-iswa.cpp, llama_kv_cache_iswa ctor).

    ``GGML_PAD(min(size_base, n_swa * (unified ? n_seq : 1) + n_ubatch), 256)``; per stream.
    """
    window = n_swa * (n_seq if unified else 1) + n_ubatch
    return _pad(min(ctx_seq, window), SWA_PAD)


def _v_width_max(layout: _Layout) -> int:
    """``n_embd_v_gqa_max()`` when V widths vary across layers, else 0 (no padding).

    Scans all ``n_layer_all`` layers like src/llama-hparams.cpp is_n_embd_v_gqa_variable().
    """
    widths = {layout.v_width(il) for il in range(layout.n_layer_all)}
    return max(widths) if len(widths) > 1 else 0


def _check_types(layout: _Layout, type_k: str, type_v: str, flash_attn: bool) -> None:
    """The cache-type checks of llama_init_from_model (src/llama-context.cpp)."""
    if layout.mla and type_k != type_v:
        raise BadValueError(
            f"this MLA model needs the same K and V cache types, got {type_k} and {type_v}",
            hint="llama.cpp refuses different -ctk/-ctv on MLA models",
        )
    if not flash_attn:
        if type_v not in _UNQUANTIZED:
            raise BadValueError(
                f"a quantized V cache ({type_v}) requires flash attention",
                hint="use -fa on (or auto), or an f16 V cache",
            )
        return
    n_layer = layout.kv_end if layout.kv_end > 0 else layout.n_layer_all
    for type_name, heads in ((type_k, layout.head_k), (type_v, layout.head_v)):
        block = GGML_QUANT_SIZES[GGMLQuantizationType[type_name.upper()]][0]
        for il in range(n_layer):
            head = heads[layout.swa[il]]
            if head % block:
                raise BadValueError(
                    f"cache type {type_name} (blocks of {block}) does not divide the head "
                    f"size {head} of layer {il}",
                    hint="use an f16 or f32 cache for this model",
                )


def _layout(facts: ModelFacts) -> _Layout:
    """Read the cache-relevant hparams the way src/llama-model.cpp load_hparams does."""
    hp = facts.hparams
    arch = facts.architecture
    n_all = _int(hp, "block_count", facts.n_layers) or facts.n_layers
    if n_all <= 0:
        raise GGUFFormatError("the model has no blocks")
    n_nextn = min(_int(hp, "nextn_predict_layers", 0), n_all)
    n_layer = n_all - n_nextn
    # create_memory: NextN/MTP layers are filtered out (when n_layer() > 0); recurrent
    # layers only range over n_layer() (llama_memory_recurrent ctor).
    kv_end = n_layer if n_layer > 0 else n_all
    exact = arch in _KNOWN_ARCHS
    swa, n_swa = _swa_layers(hp, arch, n_all, n_layer)
    recr = _recurrent_layers(hp, arch, n_all, n_layer)
    n_embd_r, n_embd_s = _ssm_widths(hp) if any(recr) else (0, 0)
    return _Layout(
        n_layer_all=n_all,
        kv_end=kv_end,
        head_kv=tuple(_head_kv(hp, n_all)),
        head_k=_head_sizes(hp, "key_length"),
        head_v=_head_sizes(hp, "value_length"),
        swa=tuple(swa),
        recr=tuple(recr),
        n_swa=n_swa,
        mla=arch in _MLA_ARCHS and _is_mla(hp),
        n_embd_r=n_embd_r,
        n_embd_s=n_embd_s,
        exact=exact,
    )


def _head_kv(hp: dict[str, HParam], n_all: int) -> list[int]:
    """``n_head_kv_arr``: attention.head_count_kv (scalar or per-layer), default head_count."""
    heads = _per_layer(hp, "attention.head_count", n_all, 0)
    if "attention.head_count_kv" not in hp:
        return heads
    return _per_layer(hp, "attention.head_count_kv", n_all, 0)


def _head_sizes(hp: dict[str, HParam], key: str) -> tuple[int, int]:
    """(full, swa) head size: attention.<key>, default n_embd / n_head(0); SWA layers use
    attention.<key>_swa when present (llama_model_base::load_hparams)."""
    n_head0 = _first(hp, "attention.head_count")
    if n_head0 <= 0:
        return 0, 0  # "non-transformer models do not have attention heads"
    full = _int(hp, f"attention.{key}", _int(hp, "embedding_length", 0) // n_head0)
    return full, _int(hp, f"attention.{key}_swa", full)


def _is_mla(hp: dict[str, HParam]) -> bool:
    """src/llama-hparams.cpp is_mla(): both MLA head sizes are set and non-zero."""
    return (
        _int(hp, "attention.key_length_mla", 0) > 0
        and _int(hp, "attention.value_length_mla", 0) > 0
    )


def _swa_layers(
    hp: dict[str, HParam], arch: str, n_all: int, n_layer: int
) -> tuple[list[bool], int]:
    """Which layers use the sliding window, and the window (0 when none).

    llama_model_base::load_swa_pattern (src/llama-model.cpp): an array
    attention.sliding_window_pattern gives the flags; otherwise an integer pattern (the
    loader's default when absent) feeds llama_hparams::set_swa_pattern
    (src/llama-hparams.cpp), which marks only the first n_layer() layers.
    """
    if arch not in _SWA_ARCHS:
        return [False] * n_all, 0
    n_pattern, dense_first = _SWA_ARCHS[arch]
    n_swa = _int(hp, "attention.sliding_window", 0)
    value = hp.get("attention.sliding_window_pattern")
    if isinstance(value, list):
        flags = [bool(v) for v in value[:n_all]]
        return flags + [False] * (n_all - len(flags)), n_swa
    n_pattern = _int(hp, "attention.sliding_window_pattern", n_pattern)
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


def _recurrent_layers(hp: dict[str, HParam], arch: str, n_all: int, n_layer: int) -> list[bool]:
    """Recurrent (linear-attention) layers of the gated-delta-net hybrids.

    src/models/qwen35moe.cpp (and qwen3next.cpp, qwen35.cpp): attention.recurrent_layers
    (scalar or per-layer array) if present, else every full_attention_interval-th layer
    (default 4) is attention and the others of the first n_layer() are recurrent.
    """
    if arch not in _HYBRID_ARCHS:
        return [False] * n_all
    if "attention.recurrent_layers" in hp:
        return [bool(v) for v in _per_layer(hp, "attention.recurrent_layers", n_all, 0)]
    interval = _int(hp, "full_attention_interval", 4)
    if interval <= 0:
        raise GGUFFormatError(f"full_attention_interval must be positive, got {interval}")
    return [il < n_layer and (il + 1) % interval != 0 for il in range(n_all)]


def _ssm_widths(hp: dict[str, HParam]) -> tuple[int, int]:
    """(n_embd_r, n_embd_s) of src/llama-hparams.cpp for Mamba-style / gated-delta-net state.

    R (conv state) = (ssm.conv_kernel - 1) * (ssm.inner_size + 2 * ssm.group_count *
    ssm.state_size); S (SSM state) = ssm.state_size * ssm.inner_size. Both f32, one row each
    per sequence (create_memory passes GGML_TYPE_F32 for both).
    """
    d_conv = _int(hp, "ssm.conv_kernel", 0)
    d_inner = _int(hp, "ssm.inner_size", 0)
    d_state = _int(hp, "ssm.state_size", 0)
    n_group = _int(hp, "ssm.group_count", 0)
    n_embd_r = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    return n_embd_r, d_state * d_inner


def _int(hp: dict[str, HParam], key: str, default: int) -> int:
    """A scalar integer hparam (``default`` when missing or not a number)."""
    value = hp.get(key, default)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return default


def _per_layer(hp: dict[str, HParam], key: str, n: int, default: int) -> list[int]:
    """llama_model_loader::get_key_or_arr: a scalar fills all n layers; an array must have
    exactly n entries ("key ... has wrong array length" otherwise)."""
    value = hp.get(key, default)
    if not isinstance(value, list):
        return [_int(hp, key, default)] * n
    if len(value) != n:
        raise GGUFFormatError(f"{key} has {len(value)} entries, expected one per block ({n})")
    return [_as_int(v) for v in value[:n]]


def _first(hp: dict[str, HParam], key: str) -> int:
    """Layer 0's value of a scalar-or-array hparam (``n_head()`` is ``n_head(0)``), 0 if absent."""
    value = hp.get(key, 0)
    if isinstance(value, list):
        return _as_int(value[0]) if value else 0
    return _int(hp, key, 0)


def _as_int(value: object) -> int:
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise GGUFFormatError(f"expected an integer, got {value!r}")
