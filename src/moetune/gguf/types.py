"""GGUF value types and ggml tensor types, with sizes taken from the ``gguf`` package."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

# Scalar value types -> struct format (little-endian), in the order the spec numbers them.
SCALAR_FORMATS: dict[int, struct.Struct] = {
    GGUFValueType.UINT8: struct.Struct("<B"),
    GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"),
    GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: struct.Struct("<I"),
    GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"),
    GGUFValueType.BOOL: struct.Struct("<?"),
    GGUFValueType.UINT64: struct.Struct("<Q"),
    GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}

STRING = int(GGUFValueType.STRING)
ARRAY = int(GGUFValueType.ARRAY)


class ValueType(IntEnum):
    """Re-export so that callers need not import ``gguf``."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


def value_type_name(type_id: int) -> str:
    try:
        return ValueType(type_id).name
    except ValueError:
        return f"type{type_id}"


@dataclass(frozen=True)
class GgmlType:
    """A ggml tensor type: id, name, and block geometry (None when moetune does not know it)."""

    type_id: int
    name: str
    block_size: int | None
    type_size: int | None

    @property
    def known(self) -> bool:
        return self.block_size is not None


_KNOWN: dict[int, GgmlType] = {}
for _qtype, (_block, _size) in GGML_QUANT_SIZES.items():
    _KNOWN[int(_qtype)] = GgmlType(int(_qtype), _qtype.name, _block, _size)


def ggml_type(type_id: int) -> GgmlType:
    """Look up a ggml type id; an id the installed ``gguf`` package does not know is unknown."""
    found = _KNOWN.get(type_id)
    if found is not None:
        return found
    try:
        name = GGMLQuantizationType(type_id).name
    except ValueError:
        name = f"TYPE_{type_id}"
    return GgmlType(type_id, name, None, None)


def tensor_nbytes(kind: GgmlType, shape: tuple[int, ...]) -> int | None:
    """Bytes of a tensor as ggml lays it out (rows of whole blocks); None if unknown."""
    if kind.block_size is None or kind.type_size is None:
        return None
    n_elements = 1
    for dim in shape:
        n_elements *= dim
    if not shape or shape[0] % kind.block_size != 0:
        return None
    return n_elements // kind.block_size * kind.type_size
