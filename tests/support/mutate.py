"""Seeded mutations for the fuzz suites (tests/fuzz/): of a GGUF header held as a
``RawGGUF`` (keys deleted, retyped, set to hostile values, per-layer arrays of the wrong
length; tensors deleted, duplicated, renamed past the blocks, overlapping, reshaped), of its
bytes, and of JSON or TOML text (truncated, not UTF-8, wrong types, deep nesting).

Every mutation returns what it did as a short phrase, so a failing case can be told in words;
a ``Flagged`` phrase is a change the header's validation must refuse or warn of (issue 20:
llama.cpp refuses it, or takes a default moetune must say it took).
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
from collections.abc import Callable
from typing import Any

from support.rawgguf import (
    ARR,
    BOOL,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    STR,
    U8,
    U16,
    U32,
    U64,
    RawGGUF,
)


class Flagged(str):
    """What a mutation did, where moetune must refuse the file or warn."""

    __slots__ = ()


REQUIRED_KEYS = ("block_count", "embedding_length", "attention.head_count")
INTS = (0, 1, -1, 2, 3, 7, 255, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**40, 2**63 - 1, -(2**63))
FLOATS = (0.0, -0.0, -1.0, math.nan, math.inf, -math.inf, 1e-45, 3.4e38, 1e300)
STRINGS = (
    "",
    "x",
    "qwen3moe",
    "llama",
    "a\nb",
    "[evil]\nmodel=y.gguf",
    "\x00",
    "é" * 3,
    "a" * 5000,
)
INT_TYPES = (U8, I8, U16, I16, U32, I32, U64, I64)
_RANGES = {
    U8: (0, 2**8),
    I8: (-(2**7), 2**7),
    U16: (0, 2**16),
    I16: (-(2**15), 2**15),
    U32: (0, 2**32),
    I32: (-(2**31), 2**31),
    U64: (0, 2**64),
    I64: (-(2**63), 2**63),
}
ARCH_NAMES = ("qwen3moe", "qwen3", "gpt-oss", "deepseek2", "glm4moe", "qwen35moe", "llama", "")
# keys a header may lack that the core reads when present (the arch's prefix added)
OPTIONAL_KEYS = (
    "nextn_predict_layers",
    "leading_dense_block_count",
    "expert_shared_count",
    "expert_count",
    "expert_used_count",
    "attention.sliding_window",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.kv_lora_rank",
    "attention.q_lora_rank",
    "attention.key_length_mla",
    "full_attention_interval",
    "ssm.state_size",
    "ssm.inner_size",
    "rope.dimension_count",
    "vocab_size",
)
GENERAL_KEYS = ("general.alignment", "split.count", "split.no", "split.tensors.count")
PER_LAYER_KEYS = (
    "attention.head_count",
    "attention.head_count_kv",
    "feed_forward_length",
    "attention.sliding_window_pattern",
)
GGML_TYPE_IDS = (0, 1, 2, 8, 12, 14, 30, 39, 4, 5, 36, 41, 1000)


def int_type_for(rng: random.Random, value: int) -> int:
    """A GGUF integer type that holds ``value`` (any, 1 in 5 times: it wraps)."""
    fits = [t for t in INT_TYPES if _RANGES[t][0] <= value < _RANGES[t][1]]
    if not fits or rng.random() < 0.2:
        return rng.choice(INT_TYPES)
    return rng.choice(fits)


def wrapped(value_type: int, value: int) -> int:
    """``value`` as ``value_type``'s bytes read it back (two's complement, cut to size)."""
    low, high = _RANGES[value_type]
    return (value - low) % (high - low) + low


def hostile_value(rng: random.Random) -> tuple[int, object, str]:
    """(type, value, phrase): a number at an edge, a string, a bool or an array."""
    kind = rng.random()
    if kind < 0.5:
        value = rng.choice(INTS)
        value_type = int_type_for(rng, value)
        value = wrapped(value_type, value)
        return value_type, value, f"{value} ({_TYPE_NAMES[value_type]})"
    if kind < 0.7:
        value_type = rng.choice((F32, F64))
        fvalue = rng.choice(FLOATS)
        if value_type == F32 and abs(fvalue) > 3.4e38 and math.isfinite(fvalue):
            fvalue = math.inf
        return value_type, fvalue, f"{fvalue} ({_TYPE_NAMES[value_type]})"
    if kind < 0.82:
        text = rng.choice(STRINGS)
        return STR, text, f"the string {text[:24]!r}"
    if kind < 0.88:
        flag = rng.random() < 0.5
        return BOOL, flag, f"{flag} (bool)"
    item = rng.choice((U32, I32, F32, STR))
    n = rng.choice((0, 1, 2, 5, 100))
    items = tuple("s" if item == STR else (1.0 if item == F32 else 1) for _ in range(n))
    return ARR, (item, items), f"an array of {n} {_TYPE_NAMES[item]}"


_TYPE_NAMES = {
    U8: "u8",
    I8: "i8",
    U16: "u16",
    I16: "i16",
    U32: "u32",
    I32: "i32",
    F32: "f32",
    BOOL: "bool",
    STR: "string",
    ARR: "array",
    U64: "u64",
    I64: "i64",
    F64: "f64",
}


# --- GGUF headers ---------------------------------------------------------------------------


def arch_of(raw: RawGGUF) -> str:
    for key, _, value in raw.kv:
        if key == "general.architecture" and isinstance(value, str):
            return value
    return ""


def kv_index(raw: RawGGUF, key: str) -> int | None:
    return next((i for i, (k, _, _) in enumerate(raw.kv) if k == key), None)


def int_value(raw: RawGGUF, key: str, default: int) -> int:
    i = kv_index(raw, key)
    value = raw.kv[i][2] if i is not None else default
    return value if isinstance(value, int) else default


def set_kv(raw: RawGGUF, key: str, value_type: int, value: object) -> None:
    i = kv_index(raw, key)
    if i is None:
        raw.kv.append((key, value_type, value))
    else:
        raw.kv[i] = (key, value_type, value)


def _pick_key(rng: random.Random, raw: RawGGUF) -> str:
    """A key the core reads, most often one of the architecture's own."""
    arch = arch_of(raw)
    own = [k for k, _, _ in raw.kv if arch and k.startswith(arch + ".")]
    if own and rng.random() < 0.8:
        return rng.choice(own)
    return rng.choice([k for k, _, _ in raw.kv])


def m_delete_key(rng: random.Random, raw: RawGGUF) -> str:
    key = _pick_key(rng, raw)
    raw.kv = [kv for kv in raw.kv if kv[0] != key]
    required = key.split(".", 1)[-1] in REQUIRED_KEYS or key == "general.architecture"
    return (Flagged if required else str)(f"delete {key}")


def m_set_key(rng: random.Random, raw: RawGGUF) -> str:
    key = _pick_key(rng, raw)
    value_type, value, phrase = hostile_value(rng)
    set_kv(raw, key, value_type, value)
    return f"{key} = {phrase}"


def m_retype_key(rng: random.Random, raw: RawGGUF) -> str:
    """The same number under another type: signed for unsigned, float for int, a string."""
    key = _pick_key(rng, raw)
    i = kv_index(raw, key)
    assert i is not None
    _, _, value = raw.kv[i]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return m_set_key(rng, raw)
    choice = rng.random()
    if choice < 0.4:
        new_type = rng.choice(INT_TYPES)
        new_value: object = wrapped(new_type, int(value) if math.isfinite(value) else 0)
    elif choice < 0.7:
        new_type, new_value = F32, float(value)
    elif choice < 0.85:
        new_type, new_value = STR, str(value)
    else:
        items = (wrapped(U32, value),) if isinstance(value, int) else (value,)
        new_type, new_value = ARR, (U32 if isinstance(value, int) else F32, items)
    raw.kv[i] = (key, new_type, new_value)
    return f"{key} = {new_value!r:.30} as {_TYPE_NAMES[new_type]}"


def m_per_layer_array(rng: random.Random, raw: RawGGUF) -> str:
    """A per-layer key as an array of the wrong (or right) length, or with hostile items."""
    arch = arch_of(raw) or "qwen3moe"
    key = f"{arch}.{rng.choice(PER_LAYER_KEYS)}"
    n_blocks = int_value(raw, f"{arch}.block_count", 4)
    n = max(0, n_blocks + rng.choice((-n_blocks, -1, 0, 0, 1, 5)))
    item = rng.choice((U32, I32, F32, BOOL))
    fill = rng.choice((0, 1, 4, 2**31 - 1)) if item != BOOL else True
    items = tuple(float(fill) if item == F32 else fill for _ in range(n))
    if item in (U32, I32) and items and rng.random() < 0.3:
        items = (0, *items[1:])
    set_kv(raw, key, ARR, (item, items))
    return f"{key} = [{n} x {fill!r}] ({_TYPE_NAMES[item]})"


def m_add_key(rng: random.Random, raw: RawGGUF) -> str:
    arch = arch_of(raw) or "qwen3moe"
    n_blocks = int_value(raw, f"{arch}.block_count", 4)
    own = f"{arch}.{rng.choice(OPTIONAL_KEYS)}"
    key = rng.choice(GENERAL_KEYS) if rng.random() < 0.25 else own
    if rng.random() < 0.5:
        value = rng.choice((0, 1, n_blocks - 1, n_blocks, n_blocks + 1, 3, 64, 2**32 - 1))
        set_kv(raw, key, U32, wrapped(U32, value))
        return f"{key} = {wrapped(U32, value)}"
    value_type, any_value, phrase = hostile_value(rng)
    set_kv(raw, key, value_type, any_value)
    return f"{key} = {phrase}"


def m_architecture(rng: random.Random, raw: RawGGUF) -> str:
    name = rng.choice(ARCH_NAMES)
    if rng.random() < 0.2:
        set_kv(raw, "general.architecture", U32, 7)
        return "general.architecture = 7 (u32)"
    set_kv(raw, "general.architecture", STR, name)
    return f"general.architecture = {name!r}"


def m_consistency(rng: random.Random, raw: RawGGUF) -> str:
    """One of the header facts the core relies on made inconsistent (issue 20's list)."""
    arch = arch_of(raw) or "qwen3moe"
    n_blocks = int_value(raw, f"{arch}.block_count", 4)
    n_experts = int_value(raw, f"{arch}.expert_count", 8)
    choices: list[tuple[str, int]] = [
        (f"{arch}.block_count", 0),
        (f"{arch}.block_count", max(n_blocks - 1, 0)),
        (f"{arch}.block_count", 1),
        (f"{arch}.block_count", n_blocks + 2),
        (f"{arch}.nextn_predict_layers", n_blocks),
        (f"{arch}.nextn_predict_layers", n_blocks + 1),
        (f"{arch}.expert_count", 0),
        (f"{arch}.expert_used_count", n_experts + 1),
        (f"{arch}.expert_used_count", 0),
        (f"{arch}.embedding_length", 0),
        (f"{arch}.attention.head_count", 0),
        (f"{arch}.attention.head_count_kv", 0),
        (f"{arch}.attention.key_length", 0),
        (f"{arch}.attention.value_length", 0),
        (f"{arch}.context_length", 0),
        (f"{arch}.leading_dense_block_count", n_blocks + 1),
        (f"{arch}.full_attention_interval", 0),
        (f"{arch}.attention.sliding_window", 0),
    ]
    if rng.random() < 0.1:
        set_kv(raw, f"{arch}.context_length", I32, -rng.choice((1, 4096)))
        return Flagged(f"{arch}.context_length negative (i32)")
    if rng.random() < 0.1:
        set_kv(raw, f"{arch}.rope.freq_base", F32, math.nan)
        return Flagged(f"{arch}.rope.freq_base = nan")
    key, value = rng.choice(choices)
    i = kv_index(raw, key)
    before = raw.kv[i][2] if i is not None else None
    set_kv(raw, key, U32, value)
    if before is None or before == value:  # a key the architecture does not read, or no change
        return f"{key} = {value}"
    return Flagged(f"{key} = {value}")


def m_delete_tensor(rng: random.Random, raw: RawGGUF) -> str:
    if not raw.tensors:
        return m_delete_key(rng, raw)
    # most often a block's attention or expert tensor (the MLA ones among them)
    named = [t for t in raw.tensors if re.search(r"attn_(v_b|k_b|kv_a|q|k|v)\.|_exps|inp", t[0])]
    tensor = rng.choice(named if named and rng.random() < 0.7 else raw.tensors)
    raw.tensors.remove(tensor)
    return f"delete tensor {tensor[0]}"


def m_duplicate_tensor(rng: random.Random, raw: RawGGUF) -> str:
    if not raw.tensors:
        return m_delete_key(rng, raw)
    tensor = rng.choice(raw.tensors)
    raw.tensors.append(tensor)
    return Flagged(f"tensor {tensor[0]} twice")


def m_tensor_past_blocks(rng: random.Random, raw: RawGGUF) -> str:
    """A block tensor renamed (or copied) to a block past block_count."""
    blocks = [t for t in raw.tensors if t[0].startswith("blk.")]
    if not blocks:
        return m_delete_tensor(rng, raw)
    name, shape, type_id, offset = rng.choice(blocks)
    n_blocks = int_value(raw, f"{arch_of(raw)}.block_count", 4)
    index = n_blocks + rng.choice((0, 3, 1000, 2**31))
    new = re.sub(r"^blk\.\d+\.", f"blk.{index}.", name)
    if new == name:  # not a numbered block (an earlier rename made it blk.x)
        return m_delete_tensor(rng, raw)
    if rng.random() < 0.5:
        raw.tensors.append((new, shape, type_id, offset))
        return Flagged(f"a copy of {name} as {new}")
    raw.tensors = [(new, s, t, o) if n == name else (n, s, t, o) for n, s, t, o in raw.tensors]
    return Flagged(f"rename {name} to {new}")


def m_tensor_name(rng: random.Random, raw: RawGGUF) -> str:
    if not raw.tensors:
        return m_delete_key(rng, raw)
    i = rng.randrange(len(raw.tensors))
    name, shape, type_id, offset = raw.tensors[i]
    new = rng.choice(("", "blk.", "blk.x.ffn_up_exps.weight", "blk.-1.attn_q.weight", "é\n[x]"))
    raw.tensors[i] = (new, shape, type_id, offset)
    return f"rename tensor {name} to {new!r}"


def m_tensor_offset(rng: random.Random, raw: RawGGUF) -> str:
    if len(raw.tensors) < 2:
        return m_delete_key(rng, raw)
    i, j = rng.sample(range(len(raw.tensors)), 2)
    name, shape, type_id, offset = raw.tensors[i]
    choice = rng.random()
    if choice < 0.5:
        new = raw.tensors[j][3] + rng.choice((0, raw.alignment))
        what = f"overlapping {raw.tensors[j][0]}"
    elif choice < 0.8:
        new = rng.choice((2**40, 2**63, 2**64 - raw.alignment))
        what = "past the end"
    else:
        new = offset + 1
        what = "unaligned"
    raw.tensors[i] = (name, shape, type_id, new)
    return (Flagged if what != "past the end" else str)(f"tensor {name} offset {new} ({what})")


def m_tensor_shape(rng: random.Random, raw: RawGGUF) -> str:
    if not raw.tensors:
        return m_delete_key(rng, raw)
    i = rng.randrange(len(raw.tensors))
    name, shape, type_id, offset = raw.tensors[i]
    choice = rng.random()
    if choice < 0.6:
        dims = list(shape)
        d = rng.randrange(len(dims))
        dims[d] = rng.choice((0, 1, 2, 3, 2**31, 2**62, 2**64 - 1))
        new_shape = tuple(dims)
    elif choice < 0.8:
        new_shape = (*shape, rng.choice((1, 2)))
    else:
        new_shape = shape[:-1] or (0,)
    raw.tensors[i] = (name, new_shape, type_id, offset)
    return f"tensor {name} shape {list(new_shape)}"


def m_tensor_type(rng: random.Random, raw: RawGGUF) -> str:
    if not raw.tensors:
        return m_delete_key(rng, raw)
    i = rng.randrange(len(raw.tensors))
    name, shape, _, offset = raw.tensors[i]
    new = rng.choice(GGML_TYPE_IDS)
    raw.tensors[i] = (name, shape, new, offset)
    return f"tensor {name} ggml type {new}"


def m_counts(rng: random.Random, raw: RawGGUF) -> str:
    if rng.random() < 0.5:
        raw.n_tensors = max(0, len(raw.tensors) + rng.choice((-1, 1, 2**32, 2**63)))
        return f"declared tensor count {raw.n_tensors}"
    raw.n_kv = max(0, len(raw.kv) + rng.choice((-1, 1, 2**40)))
    return f"declared key count {raw.n_kv}"


def m_version(rng: random.Random, raw: RawGGUF) -> str:
    raw.version = rng.choice((0, 1, 2, 4, 2**24 * 3))
    return f"GGUF version {raw.version}"


Mutation = Callable[[random.Random, RawGGUF], str]
# (weight, mutation): the header facts first, then tensors, then the file's frame
HEADER_MUTATIONS: tuple[tuple[int, Mutation], ...] = (
    (10, m_delete_key),
    (12, m_set_key),
    (6, m_retype_key),
    (6, m_per_layer_array),
    (6, m_add_key),
    (4, m_architecture),
    (14, m_consistency),
    (6, m_delete_tensor),
    (3, m_duplicate_tensor),
    (5, m_tensor_past_blocks),
    (2, m_tensor_name),
    (5, m_tensor_offset),
    (4, m_tensor_shape),
    (3, m_tensor_type),
    (2, m_counts),
    (1, m_version),
)


def mutate_header(
    rng: random.Random, seed: RawGGUF, mutations: tuple[tuple[int, Mutation], ...] = ()
) -> tuple[RawGGUF, list[str]]:
    """A copy of ``seed`` with one to three weighted mutations, and what they were."""
    table = mutations or HEADER_MUTATIONS
    raw = copy.deepcopy(seed)
    count = rng.choices((1, 2, 3), weights=(6, 3, 1))[0]
    chosen = rng.choices([m for _, m in table], weights=[w for w, _ in table], k=count)
    return raw, [mutation(rng, raw) for mutation in chosen]


def mutate_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Bytes flipped, a blob inserted, or the file cut, anywhere in the header."""
    out = bytearray(data)
    done = []
    for _ in range(rng.choice((1, 1, 2, 4))):
        choice = rng.random()
        if choice < 0.55:
            pos = rng.randrange(len(out))
            out[pos] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
            done.append(f"byte {pos} = {out[pos]}")
        elif choice < 0.8:
            pos = rng.randrange(len(out) + 1)
            blob = rng.randbytes(rng.choice((1, 4, 8, 16)))
            out[pos:pos] = blob
            done.append(f"{len(blob)} bytes inserted at {pos}")
        else:
            pos = rng.randrange(len(out) + 1)
            del out[pos:]
            done.append(f"cut at byte {pos}")
    return bytes(out), "; ".join(done)


# --- JSON and TOML text ---------------------------------------------------------------------


def deep(n: int, kind: str = "[") -> str:
    """``n`` levels of nested arrays (or objects) as JSON text."""
    if kind == "[":
        return "[" * n + "]" * n
    return '{"a":' * n + "1" + "}" * n


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*at, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += _paths(value, (*at, i))
    return found


JSON_VALUES: tuple[object, ...] = (
    None,
    True,
    0,
    -1,
    2**64,
    1e308,
    math.nan,
    math.inf,
    "",
    "x\ny",
    "[evil]",
    [],
    {},
    [""],
    ["x", 1],
    {"a": 1},
)


def mutate_json_doc(rng: random.Random, doc: Any, targets: tuple[str, ...] = ()) -> tuple[str, str]:
    """JSON text of ``doc`` with one field deleted, retyped or set to a hostile value (most
    often one of ``targets``, dotted paths), or one unknown field added."""
    doc = copy.deepcopy(doc)
    paths = [p for p in _paths(doc) if p]
    wanted = [p for p in paths if ".".join(map(str, p)) in targets]
    path = rng.choice(wanted if wanted and rng.random() < 0.5 else paths)
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    name = ".".join(map(str, path))
    choice = rng.random()
    if choice < 0.2 and isinstance(parent, dict):
        del parent[path[-1]]
        what = f"delete {name}"
    elif choice < 0.3 and isinstance(parent, dict):
        parent["unknown_field"] = 1
        what = f"an unknown field beside {name}"
    elif choice < 0.36:
        text = json.dumps(doc)
        marker = json.dumps(parent[path[-1]])
        return text.replace(marker, deep(rng.choice((50, 100_000))), 1), f"{name} nested deep"
    else:
        value = rng.choice(JSON_VALUES)
        parent[path[-1]] = value
        what = f"{name} = {json.dumps(value)}"
    return json.dumps(doc, indent=2), what


def mutate_text(rng: random.Random, text: str) -> tuple[bytes, str]:
    """The file's bytes cut short, with bytes that are not UTF-8, or replaced outright."""
    data = text.encode()
    choice = rng.random()
    if choice < 0.35:
        pos = rng.randrange(len(data) + 1)
        return data[:pos], f"cut at byte {pos} of {len(data)}"
    if choice < 0.55:
        pos = rng.randrange(len(data) + 1)
        blob = rng.choice((b"\xff", b"\xc3", b"\x00", b"\xef\xbb\xbf", b"\xed\xa0\x80"))
        return data[:pos] + blob + data[pos:], f"{blob!r} inserted at byte {pos}"
    if choice < 0.7:
        pos = rng.randrange(len(data))
        out = bytearray(data)
        out[pos] = rng.randrange(256)
        return bytes(out), f"byte {pos} = {out[pos]}"
    whole = rng.choice(
        (b"", b" ", b"null", b"[]", b"1e999", b"\xff\xfe", deep(100_000).encode(), b"{}")
    )
    return whole, f"replaced by {whole[:12]!r}" + (
        f" ({len(whole)} bytes)" if len(whole) > 12 else ""
    )


def toml_text(doc: dict[str, Any]) -> str:
    """A flat TOML table (strings, numbers, booleans, lists of those) as text."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            if math.isnan(v):
                return "nan"
            if math.isinf(v):
                return "inf" if v > 0 else "-inf"
            return repr(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"
        raise TypeError(type(v))

    return "".join(f"{key} = {value(v)}\n" for key, v in doc.items() if v is not None)
