"""Nonsense headers a clumsy converter or an attacker writes, as copies of a real model.

``edited`` copies a GGUF file with metadata keys set or dropped and tensors dropped or added;
each tensor keeps its bytes (an added one is zeros). ``REFUSED`` holds the headers moetune
must refuse with BAD_MODEL, each with the words its one error line names (the key and the
value), and whether llama.cpp loads it all the same (only non-finite floats: moetune refuses
what llama.cpp would run into NaN); ``write_refused`` writes one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QType
from gguf import GGUFValueType as VT

from support.factory import ModelFactory

# A key's new value with its GGUF type; an array: (ARRAY, [items], item type).
KeyValue = tuple[VT, object] | tuple[VT, list[object], VT]
Keys = Mapping[str, KeyValue | None]  # None drops the key; "{arch}" is the architecture

_WRITER_KEYS = ("GGUF.", "general.architecture")


def edited(
    src: Path,
    dst: Path,
    *,
    keys: Keys | None = None,
    drop: frozenset[str] = frozenset(),
    add: Mapping[str, tuple[tuple[int, ...], QType]] | None = None,
) -> Path:
    """Write ``src`` to ``dst`` with ``keys`` set (general.architecture too: the other keys
    keep their prefix), the tensors in ``drop`` left out and ``add``'s tensors (name: ggml
    shape, type) appended. Returns ``dst``."""
    reader = gguf.GGUFReader(src)
    own = str(reader.fields["general.architecture"].contents())
    wanted = {key.replace("{arch}", own): value for key, value in (keys or {}).items()}
    writer = gguf.GGUFWriter(dst, own)
    for found in reader.fields.values():
        if found.name.startswith(_WRITER_KEYS) or found.name in wanted:
            continue
        sub = found.types[-1] if found.types[0] == VT.ARRAY else None
        writer.add_key_value(found.name, found.contents(), found.types[0], sub)
    for key, value in wanted.items():
        if value is None:
            writer.kv_data[0].pop(key, None)  # general.architecture, which the writer adds
        else:
            writer.add_key_value(key, value[1], value[0], value[2] if len(value) > 2 else None)
    for tensor in reader.tensors:
        if tensor.name not in drop:
            ne = tuple(int(d) for d in tensor.shape)
            raw = np.asarray(tensor.data).view(np.uint8)
            _add(writer, tensor.name, ne, tensor.tensor_type, raw)
    for name, (ne, qtype) in (add or {}).items():
        _add(writer, name, ne, qtype, None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def _add(
    writer: gguf.GGUFWriter, name: str, ne: tuple[int, ...], qtype: QType, data: np.ndarray | None
) -> None:
    """One tensor of ggml shape ``ne`` (row first) from its raw bytes (zeros when None)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    byte_shape = (*reversed(ne[1:]), ne[0] // block * size)
    raw = np.zeros(byte_shape, np.uint8) if data is None else data.reshape(byte_shape)
    writer.add_tensor(name, raw, raw_dtype=qtype)


# The real models the cases edit (tests/support/factory.py write_model's options).
BASES: dict[str, tuple[str, dict[str, int]]] = {
    "qwen3moe": ("qwen3moe", {}),
    "deepseek2": ("deepseek2", {}),
    "glm4moe": ("glm4moe", {"n_nextn": 1}),  # 4 blocks and a NextN block: block_count 5
}


@dataclass(frozen=True)
class Refused:
    """A header moetune refuses: the edit of a base model and the words of its error line."""

    words: str
    base: str = "qwen3moe"
    keys: Keys = field(default_factory=dict)
    drop: frozenset[str] = frozenset()
    add: Mapping[str, tuple[tuple[int, ...], QType]] = field(default_factory=dict)
    at_plan: bool = False  # the facts are read; the plan's compute replay refuses it
    llama_loads: bool = False  # llama.cpp runs it (tests/server/test_validate.py): nonsense


_U32 = VT.UINT32
REFUSED: dict[str, Refused] = {
    "head-count-missing": Refused(
        "qwen3moe.attention.head_count is missing", keys={"{arch}.attention.head_count": None}
    ),
    "head-count-0": Refused(
        "qwen3moe.attention.head_count is 0", keys={"{arch}.attention.head_count": (_U32, 0)}
    ),
    "key-length-0": Refused(
        "qwen3moe.attention.key_length is 0", keys={"{arch}.attention.key_length": (_U32, 0)}
    ),
    "value-length-0": Refused(
        "qwen3moe.attention.value_length is 0",
        keys={"{arch}.attention.value_length": (_U32, 0)},
    ),
    "heads-wider-than-the-embedding": Refused(
        "qwen3moe.attention.key_length is missing (embedding_length / head_count is 0",
        keys={
            "{arch}.attention.head_count": (_U32, 512),
            "{arch}.attention.key_length": None,
            "{arch}.attention.value_length": None,
        },
    ),
    "head-count-array-too-short": Refused(
        "qwen3moe.attention.head_count is an array of 2 (expected one entry per block, 4)",
        keys={"{arch}.attention.head_count": (VT.ARRAY, [4, 4], _U32)},
    ),
    "experts-used-array-too-long": Refused(
        "qwen3moe.expert_used_count is an array of 5",
        keys={"{arch}.expert_used_count": (VT.ARRAY, [2] * 5, _U32)},
    ),
    "empty-architecture": Refused(
        "general.architecture is ''", keys={"general.architecture": (VT.STRING, "")}
    ),
    "architecture-missing": Refused(
        "general.architecture is missing", keys={"general.architecture": None}
    ),
    "block-count-missing": Refused(
        "qwen3moe.block_count is missing", keys={"{arch}.block_count": None}
    ),
    "block-count-0": Refused("qwen3moe.block_count is 0", keys={"{arch}.block_count": (_U32, 0)}),
    "block-count-above-llama-max": Refused(
        "qwen3moe.block_count is 513", keys={"{arch}.block_count": (_U32, 513)}
    ),
    "block-count-below-the-tensors": Refused(
        "qwen3moe.block_count is 2 (but tensor blk.2.", keys={"{arch}.block_count": (_U32, 2)}
    ),
    "tensor-past-the-last-block": Refused(
        "qwen3moe.block_count is 4 (but tensor blk.7.ffn_norm is in block 7)",
        add={"blk.7.ffn_norm.weight": ((256,), QType.F32)},
    ),
    "block-count-fractional": Refused(
        "qwen3moe.block_count is 4.0 (must be a whole number)",
        keys={"{arch}.block_count": (VT.FLOAT32, 4.0)},
    ),
    "nextn-as-many-as-blocks": Refused(
        "glm4moe.nextn_predict_layers is 5 (must be less than block_count 5)",
        base="glm4moe",
        keys={"{arch}.nextn_predict_layers": (_U32, 5)},
    ),
    "context-negative": Refused(
        "qwen3moe.context_length is -5 (cannot be negative)",
        keys={"{arch}.context_length": (VT.INT32, -5)},
    ),
    "context-missing": Refused(
        "qwen3moe.context_length is missing", keys={"{arch}.context_length": None}
    ),
    "embedding-0": Refused(
        "qwen3moe.embedding_length is 0", keys={"{arch}.embedding_length": (_U32, 0)}
    ),
    "experts-used-above-experts": Refused(
        "qwen3moe.expert_used_count is 9 (more than expert_count 8)",
        keys={"{arch}.expert_used_count": (_U32, 9)},
    ),
    "experts-used-0": Refused(
        "qwen3moe.expert_used_count is 0 (but expert_count is 8)",
        keys={"{arch}.expert_used_count": (_U32, 0)},
    ),
    "experts-0": Refused(
        "qwen3moe.expert_used_count is 2 (more than expert_count 0)",
        keys={"{arch}.expert_count": (_U32, 0)},
    ),
    "experts-unsaid": Refused(
        "qwen3moe.expert_count is missing (but the model holds routed experts)",
        keys={"{arch}.expert_count": None, "{arch}.expert_used_count": None},
    ),
    "freq-base-nan": Refused(
        "qwen3moe.rope.freq_base is nan",
        keys={"{arch}.rope.freq_base": (VT.FLOAT32, np.nan)},
        llama_loads=True,
    ),
    "norm-eps-inf": Refused(
        "qwen3moe.attention.layer_norm_rms_epsilon is inf",
        keys={"{arch}.attention.layer_norm_rms_epsilon": (VT.FLOAT32, np.inf)},
        llama_loads=True,
    ),
    "mla-without-attn-v-b": Refused(
        "tensor blk.3.attn_v_b.weight is missing (deepseek2 needs it)",
        base="deepseek2",
        drop=frozenset({"blk.3.attn_v_b.weight"}),
        at_plan=True,
    ),
}


def base_model(models: ModelFactory, base: str) -> Path:
    """The model ``BASES[base]`` (written once per session)."""
    arch, options = BASES[base]
    return models(arch, f"{base}-base.gguf", **options)


def write_refused(models: ModelFactory, name: str, dst: Path) -> Path:
    """The header ``REFUSED[name]`` describes, written to ``dst``."""
    case = REFUSED[name]
    base = base_model(models, case.base)
    return edited(base, dst, keys=case.keys, drop=case.drop, add=case.add)
