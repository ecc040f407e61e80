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

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace
from typing import NamedTuple

from moetune.core.archs import arch_of
from moetune.core.dims import Dims
from moetune.core.facts import ModelFacts
from moetune.core.settings import Settings
from moetune.errors import BadValueError
from moetune.gguf.types import ggml_type_named
from moetune.record import record

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
# src/llama-context.cpp: cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256), and
# src/llama-kv-cache-iswa.cpp: "the SWA cache is always padded to 256".
CELL_PAD = 256
MAX_SEQ = 256  # src/llama-cparams.h LLAMA_MAX_SEQ


def parse_cache_type(name: str) -> str:
    """A -ctk/-ctv value, case-insensitive, as llama.cpp's type name (``Q8_0`` -> ``q8_0``)."""
    canonical = name.strip().lower()
    if canonical not in CACHE_TYPES:
        raise BadValueError(
            f"unknown cache type {name!r}",
            hint=f"use one of: {', '.join(CACHE_TYPES)}",
        )
    return canonical


@record(frozen=True)
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


@record(frozen=True)
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
    n_rs_seq: int = 0,
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

    ``n_rs_seq``: rollback snapshots of the recurrent state (``cparams.n_rs_seq``, what
    speculation asks for: common_params_speculative::need_n_rs_seq, the draft ``n_max`` with
    draft-mtp/eagle3/dflash/dspark); each recurrent layer then holds ``n_seq * (1 + n_rs_seq)``
    rows, on the architectures with llm_arch_supports_rs_rollback (else llama.cpp clamps it to 0).
    """
    if n_ctx <= 0:
        raise BadValueError(f"context size must be positive, got {n_ctx}")
    if not 1 <= n_seq <= MAX_SEQ:
        raise BadValueError(f"number of sequences must be 1..{MAX_SEQ}, got {n_seq}")
    types = (parse_cache_type(type_k), parse_cache_type(type_v))
    layout = facts.dims
    _check_types(layout, *types, flash_attn)
    ctx, ctx_seq, n_stream = _context_sizes(n_ctx, n_seq, kv_unified)
    # llama_context ctor: n_batch = min(n_ctx (unpadded), n_batch); n_ubatch = min(n_batch,
    # n_ubatch, or n_batch when 0).
    batch = min(n_ctx, n_batch)
    ubatch = max(1, min(batch, n_ubatch if n_ubatch > 0 else batch))
    swa = swa_cells(layout.n_swa, ctx_seq, n_seq, kv_unified, ubatch)
    sizing = _Sizing(
        cells=(ctx_seq, ctx_seq if swa_full else swa),
        n_stream=n_stream,
        types=types,
        v_pad=0 if flash_attn else _v_width_max(layout),
        rs_rows=n_seq * (1 + rs_snapshots(facts.architecture, n_rs_seq)),  # create_memory
    )
    layers = tuple(_layer(layout, sizing, il) for il in range(layout.n_layer_all))
    any_rs = any(layout.has_rs(il) for il in range(layout.n_layer_all))
    return CacheEstimate(
        layers=layers,
        n_ctx=ctx,
        exact=layout.known,
        n_ctx_seq=ctx_seq,
        n_stream=n_stream,
        rs_cells=n_seq if any_rs else 0,
    )


def rs_snapshots(arch: str, n_rs_seq: int) -> int:
    """``cparams.n_rs_seq`` after the llama_context ctor: 0 where the architecture has no
    recurrent rollback (the record's rs_rollback, llm_arch_supports_rs_rollback)."""
    return max(n_rs_seq, 0) if arch_of(arch).rs_rollback else 0


def nextn_cache(
    facts: ModelFacts,
    *,
    n_ctx: int,
    type_k: str = "f16",
    type_v: str = "f16",
    n_seq: int = 4,
    kv_unified: bool = True,
    flash_attn: bool = True,
) -> CacheEstimate:
    """The KV cache of an MTP context (``ctx_type`` MTP, src/llama-model.cpp create_memory):
    a plain llama_kv_cache whose filter keeps only the NextN/MTP blocks (``il >= n_layer()``),
    also on the hybrid Qwen3.5/3-Next models (no recurrent state); ``n_ctx`` is the main
    context's (llama_n_ctx of the target), ``type_k``/``type_v`` the draft's ``-ctkd``/``-ctvd``
    (f16 by default). ``layers`` lists only the NextN blocks."""
    types = (parse_cache_type(type_k), parse_cache_type(type_v))
    layout = facts.dims
    nextn = range(layout.kv_end, layout.n_layer_all) if layout.kv_end < layout.n_layer_all else ()
    ctx, ctx_seq, n_stream = _context_sizes(n_ctx, n_seq, kv_unified)
    plain = replace(
        layout,
        kv_end=layout.n_layer_all,
        recurrent=(False,) * layout.n_layer_all,
        swa=(False,) * layout.n_layer_all,
    )
    sizing = _Sizing(
        cells=(ctx_seq, ctx_seq),
        n_stream=n_stream,
        types=types,
        v_pad=0 if flash_attn else _v_width_max(layout),
        rs_rows=0,
    )
    layers = tuple(_layer(plain, sizing, il) for il in nextn)
    return CacheEstimate(
        layers=layers, n_ctx=ctx, exact=layout.known, n_ctx_seq=ctx_seq, n_stream=n_stream
    )


class _Sizing(NamedTuple):
    """The context-dependent inputs of one estimate."""

    cells: tuple[int, int]  # (full, SWA) cells per stream
    n_stream: int
    types: tuple[str, str]  # (type_k, type_v)
    v_pad: int  # V row width for every layer when V is transposed (no FA), else 0
    rs_rows: int


def _layer(layout: Dims, sizing: _Sizing, il: int) -> LayerCache:
    """One block's cache: llama_kv_cache (K, V) and llama_memory_recurrent (R, S) tensors."""
    rs = state_bytes(layout, il) * sizing.rs_rows
    if not layout.has_kv(il):
        return LayerCache(layer=il, kv_bytes=0, rs_bytes=rs, n_cells=0)
    is_swa = layout.swa[il]
    n_cells = sizing.cells[is_swa]
    rows = n_cells * sizing.n_stream
    k = row_bytes(sizing.types[0], layout.k_width(il)) * rows
    if layout.has_indexer(il):
        # llama_kv_cache_dsa: a second llama_kv_cache of one key head of the indexer's key
        # length, same cells and K type, no V (its hparams are still MLA)
        k += row_bytes(sizing.types[0], layout.indexer_k) * rows
    # llama_kv_cache ctor: no V tensor with MLA; with V transposed (no FA) every V row is
    # n_embd_v_gqa_max() wide [TAG_V_CACHE_VARIABLE].
    v_width = sizing.v_pad or layout.v_width(il)
    v = 0 if layout.mla else row_bytes(sizing.types[1], v_width) * rows
    return LayerCache(
        layer=il, kv_bytes=k + v, rs_bytes=rs, n_cells=n_cells, k_bytes=k, is_swa=is_swa
    )


def state_bytes(layout: Dims, il: int) -> int:
    """One sequence's recurrent state in block ``il``: its f32 R and S rows (0 for a layer
    without one)."""
    if not layout.has_rs(il):
        return 0
    return (layout.ssm.n_embd_r + layout.ssm.n_embd_s) * _F32_BYTES


def row_bytes(type_name: str, n_elements: int) -> int:
    """``ggml_row_size``: bytes of a row of ``n_elements`` values of a ggml type."""
    kind = ggml_type_named(type_name)
    block, size = kind.block_size or 1, kind.type_size or 0
    if n_elements % block:
        raise BadValueError(
            f"a {type_name} cache row needs a multiple of {block} values, got {n_elements}",
            hint="use an f16 cache for this model",
        )
    return n_elements // block * size


def pad(value: int, multiple: int = CELL_PAD) -> int:
    """``GGML_PAD``: round up to a multiple."""
    return (value + multiple - 1) // multiple * multiple


def _context_sizes(n_ctx: int, n_seq: int, kv_unified: bool) -> tuple[int, int, int]:
    """(n_ctx, n_ctx_seq, n_stream) as src/llama-context.cpp's llama_context ctor sets them.

    n_ctx is padded up to 256; without a unified cache each sequence gets
    ``GGML_PAD(n_ctx / n_seq, 256)`` cells and n_ctx becomes that times n_seq (which can
    round *up*, e.g. -c 512 -np 4 -> 4 x 256 = 1024). The cache's kv_size is n_ctx_seq.
    """
    ctx = pad(n_ctx)
    if kv_unified:
        return ctx, ctx, 1
    ctx_seq = pad(ctx // n_seq)
    return ctx_seq * n_seq, ctx_seq, n_seq


def swa_cells(n_swa: int, ctx_seq: int, n_seq: int, unified: bool, n_ubatch: int) -> int:
    """SWA cache cells (src/llama-kv-cache-iswa.cpp, llama_kv_cache_iswa ctor).

    ``GGML_PAD(min(size_base, n_swa * (unified ? n_seq : 1) + n_ubatch), 256)``; per stream.
    """
    window = n_swa * (n_seq if unified else 1) + n_ubatch
    return pad(min(ctx_seq, window))


def _v_width_max(layout: Dims) -> int:
    """``n_embd_v_gqa_max()`` when V widths vary across layers, else 0 (no padding).

    Scans all ``n_layer_all`` layers like src/llama-hparams.cpp is_n_embd_v_gqa_variable().
    """
    widths = {layout.v_width(il) for il in range(layout.n_layer_all)}
    return max(widths) if len(widths) > 1 else 0


def _check_types(layout: Dims, type_k: str, type_v: str, flash_attn: bool) -> None:
    """The cache-type checks of llama_init_from_model (src/llama-context.cpp)."""
    _check_indexer(layout, type_k)
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
        block = ggml_type_named(type_name).block_size or 1
        for il in range(n_layer):
            head = heads[layout.swa[il]]
            if head % block:
                raise BadValueError(
                    f"cache type {type_name} (blocks of {block}) does not divide the head "
                    f"size {head} of layer {il}",
                    hint="use an f16 or f32 cache for this model",
                )


def _check_indexer(layout: Dims, type_k: str) -> None:
    """The DSA indexer cache has the K type: its key length must be a multiple of the block."""
    block = ggml_type_named(type_k).block_size or 1
    if layout.indexer_k % block:
        raise BadValueError(
            f"cache type {type_k} (blocks of {block}) does not divide the indexer key length "
            f"{layout.indexer_k}",
            hint="use an f16 or f32 cache for this model",
        )


_CACHES: OrderedDict[tuple[int, Settings, int], tuple[ModelFacts, CacheEstimate]] = OrderedDict()


def cache_for(facts: ModelFacts, settings: Settings, *, n_rs_seq: int = 0) -> CacheEstimate:
    """``estimate_cache`` at ``settings`` (the last few estimates are kept: a plan asks for
    the same one for every placement it tries); ``n_rs_seq`` as there."""
    key = (id(facts), settings, n_rs_seq)
    found = _CACHES.get(key)
    if found is not None and found[0] is facts:
        _CACHES.move_to_end(key)
        return found[1]
    cache = estimate_cache(
        facts,
        n_ctx=settings.n_ctx,
        type_k=settings.type_k,
        type_v=settings.type_v,
        n_seq=settings.n_seq,
        kv_unified=settings.kv_unified,
        flash_attn=settings.flash_attn,
        n_ubatch=settings.n_ubatch,
        n_batch=settings.n_batch,
        n_rs_seq=n_rs_seq,
    )
    _CACHES[key] = (facts, cache)
    while len(_CACHES) > 16:
        _CACHES.popitem(last=False)
    return cache
