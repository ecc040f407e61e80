"""One record per architecture: everything the KV cache, the recurrent state and the compute
graph need to know about an architecture, and whether the fixture matrix verifies it.

``ARCHS`` is the one table, keyed by the name src/llama-arch.cpp gives the architecture
(``LLM_ARCH_NAMES``, the file's ``general.architecture``); ``arch_of(name)`` is the one lookup.
An architecture that has no record gets ``untaught_record(name)``, the conservative record
(core/dims.py ``untaught`` sizes its cache, compute/ adds a margin to its graph). A few records
are untaught too: they carry only the flags llama.cpp's own lists give such an architecture
(``llm_arch_supports_rs_rollback``, ``llm_arch_supports_mixed_batch``).

Each field is read from llama.cpp build 11434: the loader (src/models/<arch>.cpp
``load_arch_hparams``), ``llama_model::create_memory`` (src/llama-model.cpp) and the graph
builder (src/models/<arch>.cpp ``build_graph``). Defaults are the base loader's GQA rules and
the generic block. This module is a leaf: it imports nothing from moetune.

Adding an architecture: its record here (``verified=True``), its fixture (a writer in a
tests/support/archfix_*.py module, registered with ``@fixture(name)``) and the verified list
of docs/verified-architectures.md (``scripts/verified-archs.py --write``); a rule no field
expresses yet is a new field, whose default is everyone else's behaviour; a new mixer or block
is also its module in compute/ and its entry in compute/graph.py.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

# How a layer is found to be recurrent (core/dims.py ``_recurrent_layers``):
# - "ssm_conv": the blocks that hold an ``ssm_conv1d`` tensor (the default);
# - "interval": the gated-delta-net hybrids' attention.recurrent_layers, else every
#   full_attention_interval-th layer (default 4) is attention, the others recurrent;
# - "no_kv_heads": Mamba and short-conv hybrids, recurrent iff attention.head_count_kv is 0;
# - "no_kv_no_ffn": Nemotron-H, recurrent iff head_count_kv and feed_forward_length are both
#   0; a block with a non-zero feed_forward_length is an FFN block, with no cache at all.
Recurrence = Literal["ssm_conv", "interval", "no_kv_heads", "no_kv_no_ffn"]
# The recurrent layers' mixer (compute/graph.py ``_MIXERS``): the gated delta net
# (compute/gdn.py), Mamba-2 or Mamba-1 (compute/mamba.py), LFM2's short conv
# (compute/shortconv.py).
Mixer = Literal["gated_delta_net", "mamba2", "mamba1", "shortconv"]
# A block that is ONE part (mixer or FFN) on a plain residual (compute/graph.py
# ``_ONE_PART_BLOCKS``); "" for the usual norm, mixer, residual, norm, FFN, residual.
Block = Literal["", "nemotron_h"]
# DeepSeek sparse attention's indexer: "" none; "all": every trunk layer owns one
# (deepseek32.cpp); "types": attention.indexer.types says which (glm-dsa.cpp; GLM-5.2's
# default when absent).
Indexer = Literal["", "all", "types"]
# Where the last block keeps all rows and the output rows are taken later (t_h_nextn): ""
# (in the last block, after attention), "l_out" (before the output norm), "norm" (after it).
OutIdsLate = Literal["", "l_out", "norm"]


class Arch(NamedTuple):
    """What moetune knows of one architecture (a NamedTuple: as a frozen dataclass of this many
    fields it was a few ms of every start)."""

    name: str
    known: bool = True  # moetune has read its cache and graph rules (False: untaught)
    verified: bool = False  # tests/support/archfix*.py has its fixture: the matrix checks it
    # --- cache and recurrent state (core/dims.py, core/kvcache.py)
    # load_swa_pattern(ml, n_pattern, dense_first) with attention.sliding_window; None: no SWA
    swa_pattern: tuple[int, bool] | None = None
    # a window the loader fixes (window, on when attention.sliding_window is absent)
    fixed_window: tuple[int, bool] | None = None
    mla: bool = False  # reads attention.key_length_mla / value_length_mla (is_mla())
    indexer: Indexer = ""
    recurrence: Recurrence = "ssm_conv"
    rs_rollback: bool = False  # llm_arch_supports_rs_rollback: n_rs_seq snapshots per sequence
    # --- compute graph (core/compute/)
    mixer: Mixer = "gated_delta_net"
    block: Block = ""
    mixed_batch: bool = True  # llm_arch_supports_mixed_batch: the mixed-batch inputs exist
    qkv_order: str = "qvk"  # the build order of the Q/K/V projections
    rope: bool = True  # attention applies RoPE to Q and K
    repeat_qk: bool = False  # the gated delta net repeats Q/K heads up to V's (qwen3next)
    norm_w: bool = False  # build_moe_ffn renormalises the routing weights whatever the file says
    out_ids_late: OutIdsLate = ""
    residual_first: bool = False  # the residual adds take the residual stream first
    output_norm: str = "output_norm.weight"  # the output norm's tensor name


def untaught_record(name: str, *, rs_rollback: bool = False, mixed_batch: bool = True) -> Arch:
    """The conservative record of an architecture moetune has not been taught. The
    ``qwen3`` family renormalises its routing weights whatever the file says."""
    return Arch(
        name,
        known=False,
        rs_rollback=rs_rollback,
        mixed_batch=mixed_batch,
        norm_w=name.startswith("qwen3"),
    )


def _plain(name: str, *, verified: bool = True) -> Arch:
    """An architecture whose loader reads no SWA, recurrent, MLA or head-size keys of its own
    and which create_memory gives a plain ``llama_kv_cache``: the base loader's GQA rules are
    exact, and its block is the generic one."""
    return Arch(name, verified=verified, norm_w=name.startswith("qwen3"))


def _gdn_hybrid(name: str, *, verified: bool = True, repeat_qk: bool = False) -> Arch:
    """A gated-delta-net hybrid: create_memory's filter_attn / filter_recr for QWEN3NEXT,
    QWEN35, QWEN35MOE; recurrent flags from src/models/qwen3next.cpp & qwen35*.cpp."""
    return Arch(
        name,
        verified=verified,
        recurrence="interval",
        rs_rollback=True,
        repeat_qk=repeat_qk,
        norm_w=True,
        out_ids_late="norm",
    )


_RECORDS: tuple[Arch, ...] = (
    *(
        _plain(name)
        for name in (
            "llama",
            "qwen2moe",
            "qwen3moe",
            "qwen3vlmoe",
            "phimoe",
            "dbrx",
            "olmoe",
            "granitemoe",
            "bailingmoe",
            "bailingmoe2",
            "dots1",
            "ernie4_5-moe",
            "hunyuan-moe",
            "minimax-m2",
            "grovemoe",
            "glm4moe",
        )
    ),
    *(
        _plain(name, verified=False)
        for name in ("qwen2", "qwen3", "deepseek", "mistral3", "seed_oss")
    ),
    # src/models/openai-moe.cpp: pattern 2, SWA on even layers; Q, K, V built in that order
    Arch("gpt-oss", verified=True, swa_pattern=(2, False), qkv_order="qkv", out_ids_late="l_out"),
    # src/models/llama4.cpp: 3 chunked - 1 full, LLAMA_SWA_TYPE_CHUNKED with 8192-token
    # chunks unless attention.sliding_window is present and 0 (the cache sizes a chunked
    # cache like a sliding one: llama_kv_cache_iswa's pad256(min(ctx, n_swa * n_seq + n_ubatch)))
    Arch("llama4", verified=True, swa_pattern=(4, False), fixed_window=(8192, True)),
    # src/models/smallthinker.cpp: 1 full - 3 SWA, a 4096 window whenever
    # attention.sliding_window > 0
    Arch("smallthinker", verified=True, swa_pattern=(4, True), fixed_window=(4096, False)),
    Arch("deepseek2", verified=True, mla=True),  # src/models/deepseek2.cpp
    # DeepSeek sparse attention (deepseek32.cpp, glm-dsa.cpp): MLA plus a lightning indexer
    # whose keys (attention.indexer.key_length, one head) have a cache of their own
    # (llama_kv_cache_dsa, src/llama-kv-cache-dsa.cpp)
    Arch("deepseek32", verified=True, mla=True, indexer="all"),
    Arch("glm-dsa", verified=True, mla=True, indexer="types"),
    _gdn_hybrid("qwen3next", repeat_qk=True),
    _gdn_hybrid("qwen35", verified=False),
    _gdn_hybrid("qwen35moe"),
    # Mamba hybrids (llama_memory_hybrid with create_memory's default filters; the rule of
    # src/models/granite-hybrid.cpp and jamba.cpp load_arch_hparams)
    Arch("granitehybrid", verified=True, recurrence="no_kv_heads", mixer="mamba2", norm_w=True),
    Arch(
        "jamba",
        verified=True,
        recurrence="no_kv_heads",
        mixer="mamba1",
        rope=False,
        residual_first=True,
    ),
    # Nemotron-H (src/models/nemotron-h.cpp): each block is ONE of Mamba-2, attention (no
    # RoPE) or an FFN/MoE block, which create_memory's filters leave without any cache
    Arch(
        "nemotron_h_moe",
        verified=True,
        recurrence="no_kv_no_ffn",
        rs_rollback=True,
        block="nemotron_h",
        rope=False,
        out_ids_late="norm",
    ),
    # LFM2 short-convolution hybrids (src/models/lfm2moe.cpp): one conv state of
    # n_embd * (shortconv.l_cache - 1) per sequence, no SSM state; LLM_TENSOR_OUTPUT_NORM_LFM2
    Arch(
        "lfm2moe",
        verified=True,
        recurrence="no_kv_heads",
        rs_rollback=True,
        mixer="shortconv",
        norm_w=True,
        residual_first=True,
        output_norm="token_embd_norm.weight",
    ),
    # untaught, with llama.cpp's flags (src/llama-arch.cpp)
    *(
        untaught_record(name, rs_rollback=True)
        for name in ("kimi-k3", "qwen4exp", "glm5-next", "nemotron_h", "lfm2", "bailingmoe3")
    ),
    untaught_record("deepseek4", rs_rollback=True, mixed_batch=False),
    *(
        untaught_record(name, mixed_batch=False)
        for name in ("cogvlm", "graniteswitch", "eagle3", "dflash", "gemma4-assistant")
    ),
)


def _table(records: tuple[Arch, ...]) -> dict[str, Arch]:
    table: dict[str, Arch] = {}
    for record in records:
        if record.name in table:
            raise ValueError(f"architecture {record.name!r} has two records")
        table[record.name] = record
    return table


# The one table: every architecture moetune has a record of, by name.
ARCHS: dict[str, Arch] = _table(_RECORDS)


def arch_of(name: str) -> Arch:
    """The architecture's record; the conservative untaught one when there is none."""
    return ARCHS.get(name) or untaught_record(name)


def known_archs() -> frozenset[str]:
    """The architectures whose cache and graph rules moetune has read."""
    return frozenset(name for name, record in ARCHS.items() if record.known)


def verified_archs() -> frozenset[str]:
    """The architectures the fixture matrix checks against llama-server and llama-fit-params
    (tests/support/archfix*.py; ``inspect`` calls them verified)."""
    return frozenset(name for name, record in ARCHS.items() if record.verified)
