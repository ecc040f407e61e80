"""GGUF value types and ggml tensor types with their block geometry."""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple


class ValueType(IntEnum):
    """GGUF metadata value types, numbered as the spec numbers them."""

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


SCALAR_FORMATS: dict[int, struct.Struct] = {
    ValueType.UINT8: struct.Struct("<B"),
    ValueType.INT8: struct.Struct("<b"),
    ValueType.UINT16: struct.Struct("<H"),
    ValueType.INT16: struct.Struct("<h"),
    ValueType.UINT32: struct.Struct("<I"),
    ValueType.INT32: struct.Struct("<i"),
    ValueType.FLOAT32: struct.Struct("<f"),
    ValueType.BOOL: struct.Struct("<?"),
    ValueType.UINT64: struct.Struct("<Q"),
    ValueType.INT64: struct.Struct("<q"),
    ValueType.FLOAT64: struct.Struct("<d"),
}  # scalar value types -> struct format (little-endian)
STRING = int(ValueType.STRING)
ARRAY = int(ValueType.ARRAY)


# ggml tensor types: id -> (name, elements per block, bytes per block), as ggml.c's type
# traits and gguf-py's GGML_QUANT_SIZES give them (gguf-py 0.19; tests/unit/test_reader.py checks
# the table against the installed gguf-py). An id not listed is looked up in gguf-py, if it
# is installed, so a newer gguf-py teaches moetune new types.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}


def value_type_name(type_id: int) -> str:
    try:
        return ValueType(type_id).name
    except ValueError:
        return f"type{type_id}"


class GgmlType(NamedTuple):
    """A ggml tensor type: id, name, and block geometry (None when moetune does not know it)."""

    type_id: int
    name: str
    block_size: int | None
    type_size: int | None

    @property
    def known(self) -> bool:
        return self.block_size is not None


_KNOWN: dict[int, GgmlType] = {
    type_id: GgmlType(type_id, name, block, size)
    for type_id, (name, block, size) in GGML_TYPES.items()
}
_BY_NAME = {t.name: t for t in _KNOWN.values()}


def ggml_type(type_id: int) -> GgmlType:
    """Look up a ggml type id; one neither moetune nor the installed gguf-py knows is unknown."""
    found = _KNOWN.get(type_id)
    if found is None:
        found = _from_gguf_py(type_id)
        _KNOWN[type_id] = found
    return found


def ggml_type_named(name: str) -> GgmlType:
    """A known ggml type by name, case-insensitive (``q8_0`` -> Q8_0); KeyError if unknown."""
    return _BY_NAME[name.upper()]


def _from_gguf_py(type_id: int) -> GgmlType:
    """A type id moetune's table lacks, from gguf-py when it is installed and knows it."""
    try:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    except ImportError:
        return GgmlType(type_id, f"TYPE_{type_id}", None, None)
    try:
        qtype = GGMLQuantizationType(type_id)
    except ValueError:
        return GgmlType(type_id, f"TYPE_{type_id}", None, None)
    sizes = GGML_QUANT_SIZES.get(qtype)
    if sizes is None:
        return GgmlType(type_id, qtype.name, None, None)
    return GgmlType(type_id, qtype.name, sizes[0], sizes[1])


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
