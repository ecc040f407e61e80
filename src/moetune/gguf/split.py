"""Split models: ``NAME-00001-of-0000N.gguf``. Opening any shard reads all of them."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from moetune.errors import GGUFFormatError, ModelFileError
from moetune.gguf import keys
from moetune.gguf.reader import GGUFHeader, MetaValue, TensorInfo, read_header

# llama.cpp's llama_split_path(): "%s-%05d-of-%05d.gguf"
SPLIT_NAME_RE = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class GGUFModel(NamedTuple):
    """All shards of one model: the first shard's metadata and every shard's tensors."""

    shards: tuple[GGUFHeader, ...]
    tensors: tuple[TensorInfo, ...]

    @property
    def metadata(self) -> dict[str, MetaValue]:
        return self.shards[0].metadata

    @property
    def paths(self) -> tuple[Path, ...]:
        return tuple(shard.path for shard in self.shards)

    @property
    def file_bytes(self) -> int:
        return sum(shard.file_bytes for shard in self.shards)

    @property
    def has_tensor_data(self) -> bool:
        return all(shard.has_tensor_data for shard in self.shards)


def shard_paths(path: Path, count: int) -> list[Path]:
    """The paths of all ``count`` shards of the split model that ``path`` belongs to."""
    match = SPLIT_NAME_RE.match(path.name)
    if match is None:
        raise GGUFFormatError(
            f"{path.name} says it is shard of a {count}-file split model, "
            "but its name is not NAME-0000k-of-0000N.gguf"
        )
    prefix = match["prefix"]
    return [path.with_name(f"{prefix}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def _int_key(header: GGUFHeader, key: str, default: int) -> int:
    value = header.metadata.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise GGUFFormatError(f"{header.path.name}: {key} must be a non-negative integer")
    return value


def split_count(header: GGUFHeader) -> int:
    """How many shards the model that ``header`` begins has (1 for a single file)."""
    return max(_int_key(header, keys.SPLIT_COUNT, 1), 1)


def read_model(path: str | os.PathLike[str]) -> GGUFModel:
    """Read the header of a model file, and of every other shard if it is split."""
    first = read_header(path)
    count = split_count(first)
    if count <= 1:
        return GGUFModel((first,), first.tensors)
    headers = [
        first if shard_path == first.path else _read_shard(shard_path, index, count)
        for index, shard_path in enumerate(shard_paths(first.path, count))
    ]
    return model_from_shards(headers)


def model_from_shards(headers: Sequence[GGUFHeader]) -> GGUFModel:
    """One model from the headers of all its shards, in order (local or remote): each must
    say it is shard k of N, and together they must hold the tensor count the first declares."""
    count = len(headers)
    for index, header in enumerate(headers):
        _check_shard(header, index, count)
    tensors = tuple(
        tensor._replace(shard=index)
        for index, header in enumerate(headers)
        for tensor in header.tensors
    )
    _check_unique(headers, tensors)
    if count == 1:
        return GGUFModel(tuple(headers), tensors)
    expected = _int_key(headers[0], keys.SPLIT_TENSORS_COUNT, len(tensors))
    if expected != len(tensors):
        raise GGUFFormatError(
            f"split model declares {expected} tensors but its shards hold {len(tensors)}"
        )
    return GGUFModel(tuple(headers), tensors)


def _read_shard(path: Path, index: int, count: int) -> GGUFHeader:
    if not os.path.lexists(path):
        raise ModelFileError(
            f"missing shard {path.name} ({index + 1} of {count})",
            hint="download every shard of the split model into the same folder",
        )
    return read_header(path)


def _check_shard(header: GGUFHeader, index: int, count: int) -> None:
    number = _int_key(header, keys.SPLIT_NO, index)
    shard_count = _int_key(header, keys.SPLIT_COUNT, count)
    if number != index or shard_count != count:
        raise GGUFFormatError(
            f"{header.path.name} says it is shard {number + 1} of {shard_count}, "
            f"expected {index + 1} of {count}"
        )


def _check_unique(headers: Sequence[GGUFHeader], tensors: Sequence[TensorInfo]) -> None:
    """No tensor in two shards (llama.cpp: "invalid model: tensor ... is duplicated")."""
    first: dict[str, int] = {}
    for tensor in tensors:
        shard = first.setdefault(tensor.name, tensor.shard)
        if shard != tensor.shard:
            raise GGUFFormatError(
                f"tensor {tensor.name!r} is in two shards: {headers[shard].path.name} and "
                f"{headers[tensor.shard].path.name}"
            )
