"""The one check of a model's header: the facts the core relies on, as llama.cpp's loader
checks them (build 11434: src/llama-model.cpp ``load_hparams``, src/llama-model-loader.cpp).

``check_header`` runs on the metadata before the facts are built, ``check_blocks`` on the
blocks and their dimensions after; ``facts_from_gguf`` calls both, so every model and draft
is checked once, wherever it came from. A value llama.cpp refuses is a GGUFFormatError
naming the file, the key and the value; one it accepts with a default gets that default and
a warning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from moetune.core.dims import Dims
from moetune.core.hparams import HParam, HParams, largest
from moetune.errors import GGUFFormatError
from moetune.gguf import keys
from moetune.gguf.roles import NameParts

LLAMA_MAX_LAYERS = 512  # src/llama-hparams.h
LLAMA_MAX_EXPERTS = 1024

# u32 keys of load_hparams (a negative or fractional value is not one)
_COUNTS = (
    keys.CONTEXT_LENGTH,
    "embedding_length",
    keys.BLOCK_COUNT,
    keys.NEXTN_PREDICT_LAYERS,
    keys.EXPERT_COUNT,
    keys.EXPERT_USED_COUNT,
    keys.EXPERT_SHARED_COUNT,
    "expert_group_count",
    "expert_group_used_count",
    "feed_forward_length",
    "expert_feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.key_length_swa",
    "attention.value_length_swa",
    "attention.sliding_window",
)
# get_key_or_arr: a scalar, or an array of exactly block_count entries
_PER_LAYER = (
    "attention.head_count",
    "attention.head_count_kv",
    "feed_forward_length",
    keys.EXPERT_USED_COUNT,
)
# the routed experts' tensors
_EXPERTS = frozenset({"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps"})
# the projections a block with attention holds (GQA, fused QKV, MLA)
_ATTENTION = frozenset({"attn_q", "attn_qkv", "attn_q_a", "attn_kv_a_mqa"})


def check_header(file: str, arch: object, hp: HParams, names: Sequence[NameParts]) -> list[str]:
    """Refuse a header llama.cpp would refuse; the warnings for what it accepts with a
    default. ``hp``: the architecture's keys (prefix removed); ``names``: the tensors'."""
    if not isinstance(arch, str) or not arch:
        what = "missing" if arch is None else repr(arch)
        raise GGUFFormatError(f"{file}: {keys.ARCHITECTURE} is {what}")
    bad = _Refusal(file, arch)
    for key, value in hp.items():
        _check_finite(bad, key, value)
    for key in _COUNTS:
        if key in hp:
            _check_count(bad, key, hp[key])
    n_blocks = _required(bad, hp, keys.BLOCK_COUNT)
    if not 0 < n_blocks <= LLAMA_MAX_LAYERS:
        raise bad(keys.BLOCK_COUNT, n_blocks, f"llama.cpp needs 1 to {LLAMA_MAX_LAYERS}")
    for key in _PER_LAYER:
        entries = hp.get(key)
        if isinstance(entries, list) and len(entries) != n_blocks:
            why = f"expected one entry per block, {n_blocks}"
            raise bad(key, f"an array of {len(entries)}", why)
    n_nextn = largest(hp, keys.NEXTN_PREDICT_LAYERS, 0)
    if n_nextn >= n_blocks:
        raise bad(keys.NEXTN_PREDICT_LAYERS, n_nextn, f"must be less than block_count {n_blocks}")
    beyond = next((p for p in names if p.layer is not None and p.layer >= n_blocks), None)
    if beyond is not None:
        why = f"but tensor blk.{beyond.layer}.{beyond.stem} is in block {beyond.layer}"
        raise bad(keys.BLOCK_COUNT, n_blocks, why)
    held = {p.layer for p in names if p.layer is not None}
    empty = [il for il in range(n_blocks) if il not in held]
    if held and empty:  # llama.cpp: "missing tensor 'blk.N.…'"
        which = f"block {empty[0]}" if len(empty) == 1 else f"blocks {empty[0]}-{empty[-1]}"
        raise bad(keys.BLOCK_COUNT, n_blocks, f"but {which} hold no tensors")
    if _required(bad, hp, "embedding_length") == 0:
        raise bad("embedding_length", 0, "must be positive")
    _check_experts(bad, hp)
    warnings = []
    if _required(bad, hp, keys.CONTEXT_LENGTH) == 0:
        warnings.append(
            f"{file}: {arch}.{keys.CONTEXT_LENGTH} is 0: the training context is unknown, "
            "and llama-server needs -c (moetune's commands give it)"
        )
    return warnings


def check_blocks(
    file: str, dims: Dims, hp: HParams, names: Sequence[NameParts], has_experts: bool
) -> None:
    """Routed experts come with an expert count; every block holding attention projections
    has heads, and heads of a size."""
    bad = _Refusal(file, dims.arch)
    if has_experts and largest(hp, keys.EXPERT_COUNT, 0) == 0:
        value = hp.get(keys.EXPERT_COUNT, "missing")
        raise bad(keys.EXPERT_COUNT, value, "but the model holds routed experts")
    n_dense = largest(hp, "leading_dense_block_count", 0)
    routed = sorted({p.layer for p in names if p.layer is not None and p.stem in _EXPERTS})
    if routed and routed[0] < n_dense:  # llama.cpp would not load its experts: too many tensors
        why = f"but block {routed[0]} holds routed experts"
        raise bad("leading_dense_block_count", n_dense, why)
    kv_layers = {(p.layer, p.stem) for p in names if p.stem == "attn_k"}
    for il in sorted({p.layer for p in names if p.layer is not None and p.stem in _ATTENTION}):
        if dims.n_head[il] <= 0:
            value = dims.n_head[il] if "attention.head_count" in hp else "missing"
            raise bad("attention.head_count", value, f"but block {il} has attention")
        if dims.n_head_kv[il] <= 0 and (il, "attn_k") in kv_layers:
            raise bad("attention.head_count_kv", 0, f"but block {il} has attn_k")
        swa = dims.swa[il]
        for name, sizes in (("key_length", dims.head_k), ("value_length", dims.head_v)):
            if sizes[swa] <= 0:
                key = f"attention.{name}{'_swa' if swa else ''}"
                if key in hp:
                    raise bad(key, sizes[swa], f"but block {il} has attention")
                why = f"embedding_length / head_count is 0, but block {il} has attention"
                raise bad(key, "missing", why)


class _Refusal:
    """A GGUFFormatError that names the file, the key and its value."""

    def __init__(self, file: str, arch: str) -> None:
        self.file, self.arch = file, arch

    def __call__(self, key: str, value: object, why: str) -> GGUFFormatError:
        return GGUFFormatError(f"{self.file}: {self.arch}.{key} is {value} ({why})")


def _check_finite(bad: _Refusal, key: str, value: HParam) -> None:
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, float) and not math.isfinite(item):
            raise bad(key, item, "must be a finite number")


def _check_count(bad: _Refusal, key: str, value: HParam) -> None:
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, bool) or not isinstance(item, int):
            raise bad(key, repr(item), "must be a whole number")
        if item < 0:
            raise bad(key, item, "cannot be negative")


def _required(bad: _Refusal, hp: HParams, key: str) -> int:
    """A key llama.cpp's loader requires (``get_key(..., required)``): its largest value."""
    if key not in hp:
        raise bad(key, "missing", "llama.cpp requires it")
    return largest(hp, key, 0)


def _check_experts(bad: _Refusal, hp: HParams) -> None:
    """load_hparams' asserts on expert_count and expert_used_count."""
    n_expert = largest(hp, keys.EXPERT_COUNT, 0)
    n_used = largest(hp, keys.EXPERT_USED_COUNT, 0)
    if n_expert > LLAMA_MAX_EXPERTS:
        raise bad(keys.EXPERT_COUNT, n_expert, f"llama.cpp allows at most {LLAMA_MAX_EXPERTS}")
    if n_used > n_expert:
        why = f"more than expert_count {n_expert}"
        raise bad(keys.EXPERT_USED_COUNT, n_used, why)
    if n_expert > 0 and n_used == 0:
        raise bad(keys.EXPERT_USED_COUNT, 0, f"but expert_count is {n_expert}")
