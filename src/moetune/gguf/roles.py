"""Tensor roles by name (llama.cpp's src/llama-arch.cpp naming), not by architecture.

Classifying by the role part of the name (``blk.N.<role>.<suffix>``) makes new MoE
architectures work unchanged: every llama.cpp architecture names its routed experts
``ffn_{gate,up,down,gate_up}_{ch,}exps`` and its router ``ffn_gate_inp``.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple


class Role(str, Enum):
    TOKEN_EMBD = "token_embd"
    OUTPUT = "output"
    OUTPUT_NORM = "output_norm"
    ATTENTION = "attention"
    NORM = "norm"
    SSM = "ssm"
    ROUTER = "router"
    SHARED_EXPERTS = "shared_experts"
    EXPERTS = "experts"
    DENSE_FFN = "dense_ffn"
    NEXTN = "nextn"
    OTHER = "other"


# Routed experts: the very pattern --n-cpu-moe uses (common/arg.cpp), any suffix.
EXPERT_RE = re.compile(r"^ffn_(?P<part>up|down|gate|gate_up)_(?:ch|)exps$")
_BLOCK_RE = re.compile(r"^blk\.(?P<layer>\d+)\.(?P<stem>.+?)(?:\.(?:weight|bias|scale))?$")

_ATTENTION = {
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "attn_qkv",
    "attn_sinks",
    "attn_gate",
    "attn_q_a",
    "attn_q_b",
    "attn_kv_a_mqa",
    "attn_kv_b",
    "attn_k_b",
    "attn_v_b",
    "attn_rel_b",
    "attn_out",
    "attn_o",
}
_DENSE_FFN = {"ffn_gate", "ffn_up", "ffn_down", "ffn_gate_up"}
_SHARED = {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "ffn_gate_inp_shexp"}
_ROUTER = {"ffn_gate_inp", "exp_probs_b", "ffn_exp_probs_b"}
_GLOBAL = {
    "token_embd": Role.TOKEN_EMBD,
    "token_embd_norm": Role.TOKEN_EMBD,
    "output": Role.OUTPUT,
    "output_norm": Role.OUTPUT_NORM,
}


class NameParts(NamedTuple):
    """A tensor name split into its block index (None for global tensors) and role stem."""

    layer: int | None
    stem: str


def split_name(name: str) -> NameParts:
    match = _BLOCK_RE.match(name)
    if match is None:
        stem = name.rsplit(".", 1)[0] if name.endswith((".weight", ".bias", ".scale")) else name
        return NameParts(None, stem)
    return NameParts(int(match["layer"]), match["stem"])


def classify(name: str) -> Role:
    """The role of a tensor, from its name alone."""
    parts = split_name(name)
    stem = parts.stem
    if parts.layer is None:
        return _GLOBAL.get(stem, Role.OTHER)
    if stem.startswith("nextn."):
        return Role.NEXTN
    if EXPERT_RE.match(stem):
        return Role.EXPERTS
    if stem in _SHARED:
        return Role.SHARED_EXPERTS
    if stem in _ROUTER:
        return Role.ROUTER
    if stem in _DENSE_FFN:
        return Role.DENSE_FFN
    if stem.startswith("ssm_"):
        return Role.SSM
    if stem.endswith("norm") or stem.endswith("_norm_b"):
        return Role.NORM
    if stem in _ATTENTION or stem.startswith("attn_"):
        return Role.ATTENTION
    return Role.OTHER


def expert_part(name: str) -> str | None:
    """``up``, ``gate``, ``down`` or ``gate_up`` for a routed-expert tensor, else None."""
    match = EXPERT_RE.match(split_name(name).stem)
    return match["part"] if match else None
