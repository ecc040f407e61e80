"""A byte-level GGUF header builder for tests that need headers GGUFWriter will not write:
other versions, absurd counts, unknown type ids, truncations; ``parse_raw`` reads a
well-formed file back into one (its keys with their value types), to be changed and built
again."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?"}
_FMT.update({U64: "Q", I64: "q", F64: "d"})


def enc_str(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def enc_value(value_type: int, value: object) -> bytes:
    if value_type == STR:
        assert isinstance(value, (str, bytes))
        return enc_str(value)
    if value_type == ARR:
        assert isinstance(value, tuple)
        item_type, items = value
        body = b"".join(enc_value(item_type, item) for item in items)
        return struct.pack("<IQ", item_type, len(items)) + body
    return struct.pack("<" + _FMT[value_type], value)


@dataclass
class RawGGUF:
    version: int = 3
    kv: list[tuple[str, int, object]] = field(default_factory=list)
    tensors: list[tuple[str, tuple[int, ...], int, int]] = field(default_factory=list)
    n_tensors: int | None = None  # override the declared counts
    n_kv: int | None = None
    alignment: int = 32

    def add(self, key: str, value_type: int, value: object) -> RawGGUF:
        self.kv.append((key, value_type, value))
        return self

    def tensor(self, name: str, shape: tuple[int, ...], type_id: int, offset: int) -> RawGGUF:
        self.tensors.append((name, shape, type_id, offset))
        return self

    def header(self) -> bytes:
        n_tensors = len(self.tensors) if self.n_tensors is None else self.n_tensors
        n_kv = len(self.kv) if self.n_kv is None else self.n_kv
        out = b"GGUF" + struct.pack("<IQQ", self.version, n_tensors, n_kv)
        for key, value_type, value in self.kv:
            out += enc_str(key) + struct.pack("<I", value_type) + enc_value(value_type, value)
        for name, shape, type_id, offset in self.tensors:
            out += enc_str(name) + struct.pack("<I", len(shape))
            out += b"".join(struct.pack("<Q", d) for d in shape)
            out += struct.pack("<IQ", type_id, offset)
        return out

    def build(self, data_bytes: int = 0) -> bytes:
        head = self.header()
        pad = -len(head) % self.alignment
        return head + b"\0" * (pad + data_bytes)


def small_model(version: int = 3) -> RawGGUF:
    """Two F32 tensors and a few keys of every kind (those llama.cpp requires among them)."""
    raw = RawGGUF(version=version)
    raw.add("general.architecture", STR, "qwen3moe")
    raw.add("qwen3moe.block_count", U32, 1)
    raw.add("qwen3moe.context_length", U32, 4096)
    raw.add("qwen3moe.embedding_length", U32, 32)
    raw.add("qwen3moe.expert_count", U32, 4)
    raw.add("qwen3moe.expert_used_count", U32, 2)
    raw.add("qwen3moe.rope.freq_base", F32, 1e6)
    raw.add("qwen3moe.swa_layers", ARR, (BOOL, (True, False)))
    raw.add("tokenizer.ggml.tokens", ARR, (STR, ("a", "b", "ab")))
    raw.add("tokenizer.ggml.scores", ARR, (F32, (0.0, 1.0, 2.0)))
    raw.tensor("token_embd.weight", (32, 3), 0, 0)
    raw.tensor("blk.0.ffn_up_exps.weight", (32, 8, 4), 0, 384)
    return raw


class _Bytes:
    """A cursor over a well-formed header (``parse_raw`` reads files the tests wrote)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from("<" + fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize("<" + fmt)
        return value

    def string(self) -> str | bytes:
        length = self.take("Q")
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return raw

    def value(self, value_type: int) -> object:
        if value_type == STR:
            return self.string()
        if value_type == ARR:
            item_type, n = self.take("I"), self.take("Q")
            return item_type, tuple(self.value(item_type) for _ in range(n))
        return self.take(_FMT[value_type])


def parse_raw(data: bytes) -> tuple[RawGGUF, int]:
    """A GGUF file's header as a ``RawGGUF`` (every key with its value type, every tensor
    info) and the size of its data region, so that ``build(data_bytes=...)`` writes it back."""
    cur = _Bytes(data)
    if data[:4] != b"GGUF":
        raise ValueError("not a GGUF file")
    cur.pos = 4
    raw = RawGGUF(version=cur.take("I"))
    n_tensors, n_kv = cur.take("Q"), cur.take("Q")
    for _ in range(n_kv):
        key = cur.string()
        assert isinstance(key, str)
        value_type = cur.take("I")
        raw.add(key, value_type, cur.value(value_type))
    for _ in range(n_tensors):
        name = cur.string()
        assert isinstance(name, str)
        shape = tuple(cur.take("Q") for _ in range(cur.take("I")))
        raw.tensor(name, shape, cur.take("I"), cur.take("Q"))
    for key, _, value in raw.kv:
        if key == "general.alignment" and isinstance(value, int):
            raw.alignment = value
    data_offset = -(-cur.pos // raw.alignment) * raw.alignment
    return raw, max(len(data) - data_offset, 0)
