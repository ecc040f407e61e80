"""ModelFacts: what a plan needs to know about a model, built from its GGUF header(s)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import field, replace
from functools import cached_property

from moetune.core.dims import Dims, dims_of
from moetune.core.hparams import HParams, Scalar, largest
from moetune.core.validate import check_blocks, check_header
from moetune.gguf import keys
from moetune.gguf.reader import MetaValue, SkippedArray, TensorInfo
from moetune.gguf.roles import NameParts, Role, classify, expert_part, split_name
from moetune.gguf.split import GGUFModel
from moetune.record import record


@record(frozen=True, kw_only=True)
class TensorFacts:
    name: str
    layer: int | None
    role: Role
    expert_part: str | None
    type: str
    shape: list[int]
    nbytes: int | None
    shard: int


@record(kw_only=True)
class LayerFacts:
    index: int
    bytes_by_role: dict[Role, int]
    expert_bytes: int
    non_expert_bytes: int
    has_experts: bool
    is_nextn: bool
    unknown_size_tensors: int = 0


@record(kw_only=True)
class QuantStat:
    type: str
    n_tensors: int
    bytes: int


@record(kw_only=True)
class ModelFacts:
    paths: list[str]
    file_bytes: int
    header_only: bool
    gguf_version: int
    architecture: str
    name: str | None
    n_layers: int
    n_nextn_layers: int
    n_experts: int
    n_experts_used: int
    n_experts_shared: int
    n_leading_dense: int
    context_length: int | None
    total_bytes: int
    expert_bytes: int
    non_expert_bytes: int
    unknown_size_tensors: int
    global_bytes_by_role: dict[Role, int]
    layers: list[LayerFacts]
    quant_types: list[QuantStat]
    hparams: HParams
    tensors: list[TensorFacts]
    # what llama.cpp accepts with a default (core/validate.py)
    warnings: list[str] = field(default_factory=list)

    @cached_property
    def dims(self) -> Dims:
        """Per-layer dimensions, read once (core/dims.py)."""
        return dims_of(self)

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0 and any(layer.has_experts for layer in self.layers)


# Names whose role depends on the architecture (src/llama-arch.cpp): LFM2's output norm is
# stored as ``token_embd_norm`` (LLM_TENSOR_OUTPUT_NORM_LFM2, an output-layer tensor).
_ARCH_ROLES = {
    ("lfm2", "token_embd_norm.weight"): Role.OUTPUT_NORM,
    ("lfm2moe", "token_embd_norm.weight"): Role.OUTPUT_NORM,
}


def _arch_role(tensor: TensorFacts, arch: str) -> TensorFacts:
    role = _ARCH_ROLES.get((arch, tensor.name))
    return tensor if role is None else replace(tensor, role=role)


def _tensor_facts(tensor: TensorInfo, nextn_layers: set[int]) -> TensorFacts:
    """Classify one tensor; every tensor of a NextN/MTP block has the NEXTN role, since
    llama.cpp skips the whole block (TENSOR_SKIP) unless MTP is asked for."""
    layer = split_name(tensor.name).layer
    in_nextn = layer is not None and layer in nextn_layers
    return TensorFacts(
        name=tensor.name,
        layer=layer,
        role=Role.NEXTN if in_nextn else classify(tensor.name),
        expert_part=None if in_nextn else expert_part(tensor.name),
        type=tensor.type_name,
        shape=list(tensor.shape),
        nbytes=tensor.nbytes,
        shard=tensor.shard,
    )


def _hparams(metadata: dict[str, MetaValue], arch: str) -> HParams:
    """The architecture's own keys, prefix removed, without skipped (huge) arrays."""
    prefix = f"{arch}."
    out: HParams = {}
    for key, value in metadata.items():
        if key.startswith(prefix) and not isinstance(value, SkippedArray):
            if isinstance(value, list) and not all(isinstance(v, Scalar) for v in value):
                continue
            out[key[len(prefix) :]] = value  # type: ignore[assignment]
    return out


def facts_from_gguf(model: GGUFModel) -> ModelFacts:
    """The facts of a model's headers, checked as llama.cpp's loader checks them
    (core/validate.py): GGUFFormatError for a header it would refuse."""
    metadata = model.metadata
    file = model.paths[0].name
    arch = metadata.get(keys.ARCHITECTURE)
    hparams = _hparams(metadata, arch if isinstance(arch, str) else "")
    names = [split_name(t.name) for t in model.tensors]
    warnings = check_header(file, arch, hparams, names)
    assert isinstance(arch, str)
    n_layers = largest(hparams, keys.BLOCK_COUNT, 0)
    nextn_layers = _nextn_layers(names, n_layers, largest(hparams, keys.NEXTN_PREDICT_LAYERS, 0))
    tensors = [_arch_role(_tensor_facts(t, nextn_layers), arch) for t in model.tensors]
    layers = _layer_facts(tensors, n_layers, nextn_layers)
    has_shexp = any(t.role is Role.SHARED_EXPERTS for t in tensors)
    global_roles: dict[Role, int] = defaultdict(int)
    for tensor in tensors:
        if tensor.layer is None:
            global_roles[tensor.role] += tensor.nbytes or 0
    known = [t.nbytes for t in tensors if t.nbytes is not None]
    expert_bytes = sum(t.nbytes or 0 for t in tensors if t.role is Role.EXPERTS)
    name = metadata.get(keys.NAME)
    facts = ModelFacts(
        paths=[str(p) for p in model.paths],
        file_bytes=model.file_bytes,
        header_only=not model.has_tensor_data,
        gguf_version=model.shards[0].version,
        architecture=arch,
        name=name if isinstance(name, str) else None,
        n_layers=n_layers,
        n_nextn_layers=sum(layer.is_nextn for layer in layers),
        n_experts=largest(hparams, keys.EXPERT_COUNT, 0),
        n_experts_used=largest(hparams, keys.EXPERT_USED_COUNT, 0),
        n_experts_shared=largest(hparams, keys.EXPERT_SHARED_COUNT, 1 if has_shexp else 0),
        n_leading_dense=_leading_dense(layers),
        context_length=largest(hparams, keys.CONTEXT_LENGTH, 0) or None,
        total_bytes=sum(known),
        expert_bytes=expert_bytes,
        non_expert_bytes=sum(known) - expert_bytes,
        unknown_size_tensors=len(tensors) - len(known),
        global_bytes_by_role=dict(global_roles),
        layers=layers,
        quant_types=_quant_histogram(tensors),
        hparams=hparams,
        tensors=tensors,
        warnings=warnings,
    )
    check_blocks(file, facts.dims, hparams, names, any(x.has_experts for x in layers))
    return facts


def _nextn_layers(names: list[NameParts], n_layers: int, n_nextn: int) -> set[int]:
    """Blocks that are NextN/MTP: the last ``nextn_predict_layers`` ones, and any block
    holding ``nextn.*`` tensors."""
    found = {p.layer for p in names if p.layer is not None and p.stem.startswith("nextn.")}
    return found | set(range(max(n_layers - n_nextn, 0), n_layers))


def _layer_facts(
    tensors: list[TensorFacts], n_layers: int, nextn_layers: set[int]
) -> list[LayerFacts]:
    by_layer: dict[int, list[TensorFacts]] = defaultdict(list)
    for tensor in tensors:
        if tensor.layer is not None:
            by_layer[tensor.layer].append(tensor)
    return [
        _one_layer(index, by_layer.get(index, []), index in nextn_layers)
        for index in range(n_layers)
    ]


def _one_layer(index: int, members: Iterable[TensorFacts], is_nextn: bool) -> LayerFacts:
    by_role: dict[Role, int] = defaultdict(int)
    unknown = 0
    has_experts = False
    for tensor in members:
        has_experts = has_experts or tensor.role is Role.EXPERTS
        unknown += tensor.nbytes is None
        by_role[tensor.role] += tensor.nbytes or 0
    expert = by_role.get(Role.EXPERTS, 0)
    return LayerFacts(
        index=index,
        bytes_by_role=dict(by_role),
        expert_bytes=expert,
        non_expert_bytes=sum(by_role.values()) - expert,
        has_experts=has_experts,
        is_nextn=is_nextn,
        unknown_size_tensors=unknown,
    )


def _leading_dense(layers: list[LayerFacts]) -> int:
    """Blocks before the first block with routed experts (0 for a dense model)."""
    for layer in layers:
        if layer.has_experts:
            return layer.index
    return 0


def _quant_histogram(tensors: list[TensorFacts]) -> list[QuantStat]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for tensor in tensors:
        counts[tensor.type][0] += 1
        counts[tensor.type][1] += tensor.nbytes or 0
    stats = [QuantStat(type=k, n_tensors=c, bytes=b) for k, (c, b) in counts.items()]
    return sorted(stats, key=lambda s: -s.bytes)
