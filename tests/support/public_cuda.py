"""The public CUDA memory figures under tests/data/public_cuda/ replayed by moetune's memory model.

Each file that has a ``replay`` block names the header-only file with the post's shapes (an
examples/models/ header, or a Qwen3-MoE header the test factory writes), the placement and the
settings the post gives (``assumed`` lists what the post leaves out and what was taken for
it), and which posted figure each part is compared with. ``checks`` turns a file into one
``Check`` per device and part: weights within 1 MiB (only where the header holds the post's own
tensors, ``same_file``; the host's share where the file gives it, ``host_weights``), KV within 1 %,
compute within 10 % or 64 MiB; a figure outside them must be an ``outliers`` entry of the file,
which says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

from moetune.core.devices import DeviceSpec
from moetune.core.memory import MemoryEstimate, Settings, estimate
from moetune.core.placement import CPU, Override, Placement
from moetune.jobs.loader import load_model_facts
from moetune.units import MIB

from support.factory import QWEN3_30B_A3B, QWEN3_235B_A22B, ModelFactory

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "public_cuda"
EXAMPLES = ROOT / "examples" / "models"
SHAPES = {shape.name: shape for shape in (QWEN3_30B_A3B, QWEN3_235B_A22B)}
PARTS = ("weights", "kv", "compute")
WEIGHTS_MIB = 1.0
KV_SHARE = 0.01
COMPUTE_SHARE, COMPUTE_MIB = 0.10, 64.0


def files() -> list[Path]:
    return sorted(DATA.glob("*.json"))


@cache
def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text())
    return data


def replayed() -> list[str]:
    """The files with a replay block."""
    return [p.name for p in files() if "replay" in load(p.name)]


def _nbytes(shape: tuple[int, ...], qtype: T) -> int:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape[:-1])) * (shape[-1] // block) * size


def write_minimax_m2_header(path: Path) -> Path:
    """MiniMax-M2(.1)'s shapes (the MiniMaxM2Config defaults of ModelCloud/GPTQModel,
    https://github.com/ModelCloud/GPTQModel/blob/3d14511523ccd0602cad61a9cf487c184f8f7217/gptqmodel/hf_minimax_m2/configuration_minimax_m2.py:
    62 layers, hidden 3072, 48 heads and 8 KV heads of 128, 256 experts of 1536, 8 used,
    vocabulary 200064, rotary_dim 64) as an IQ4_NL file: matrices IQ4_NL, output Q6_K (as
    llama-quantize does for IQ4_NL), norms, router and its bias F32; the tensor list of
    src/models/minimax-m2.cpp (whole-projection Q/K norms, exp_probs_b, sigmoid gating)."""
    n_layer, e, n_head, n_kv, hd, x, ff, vocab = 62, 3072, 48, 8, 128, 256, 1536, 200064
    w = gguf.GGUFWriter(path, "minimax-m2")
    w.add_name("MiniMax-M2.1 IQ4_NL (header only)")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_IQ4_NL)
    w.add_context_length(196608)
    w.add_embedding_length(e)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(64)
    w.add_rope_freq_base(5_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(x)
    w.add_expert_used_count(8)
    w.add_expert_feed_forward_length(ff)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_vocab_size(vocab)
    q, f32 = T.IQ4_NL, T.F32
    tensors: list[tuple[str, tuple[int, ...], T]] = [
        ("token_embd.weight", (vocab, e), q),
        ("output_norm.weight", (e,), f32),
        ("output.weight", (vocab, e), T.Q6_K),
    ]
    for i in range(n_layer):
        b = f"blk.{i}"
        tensors += [
            (f"{b}.attn_norm.weight", (e,), f32),
            (f"{b}.attn_q.weight", (n_head * hd, e), q),
            (f"{b}.attn_k.weight", (n_kv * hd, e), q),
            (f"{b}.attn_v.weight", (n_kv * hd, e), q),
            (f"{b}.attn_output.weight", (e, n_head * hd), q),
            (f"{b}.attn_q_norm.weight", (n_head * hd,), f32),
            (f"{b}.attn_k_norm.weight", (n_kv * hd,), f32),
            (f"{b}.ffn_norm.weight", (e,), f32),
            (f"{b}.ffn_gate_inp.weight", (x, e), f32),
            (f"{b}.ffn_gate_exps.weight", (x, ff, e), q),
            (f"{b}.ffn_up_exps.weight", (x, ff, e), q),
            (f"{b}.ffn_down_exps.weight", (x, e, ff), q),
            (f"{b}.exp_probs_b.bias", (x,), f32),
        ]
    for name, shape, qtype in tensors:
        w.add_tensor_info(name, shape, np.dtype(np.float32), _nbytes(shape, qtype), qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path


WRITERS = {"MiniMax-M2.1-IQ4_NL.header": write_minimax_m2_header}


def header(replay: dict[str, Any], factory: ModelFactory) -> Path:
    """The header-only file with the post's shapes: an example, a Qwen3-MoE header of the
    factory, or one of ``WRITERS``."""
    spec = replay["header"]
    if "example" in spec:
        example: str = spec["example"]
        return EXAMPLES / example
    if "writer" in spec:  # the name is the file's: other tests write tiny models by arch name
        writer: str = spec["writer"]
        return factory.written(writer, WRITERS[writer])
    name = f"{spec['factory']}-{spec['quant']}.header.gguf"
    return factory.header_only(name, shape=SHAPES[spec["factory"]], quant=spec["quant"])


def _devices(data: dict[str, Any]) -> tuple[DeviceSpec, ...]:
    points = data["points"]
    return tuple(
        DeviceSpec(
            name=p["device"],
            buft=p["device"],
            kind="cuda",
            overhead_bytes=0,
            free_bytes=p["free_before_load"] * MIB if "free_before_load" in p else None,
        )
        for p in points
    )


def placement(replay: dict[str, Any], n_devices: int, data: dict[str, Any]) -> Placement:
    rules = tuple(
        Override(pattern, CPU if target == "CPU" else int(target))
        for pattern, target in replay["overrides"]
    )
    if replay["n_cpu_moe"] is not None:
        rules += Placement.with_n_cpu_moe(replay["n_cpu_moe"]).overrides
    split: tuple[float, ...] = ()
    if replay["tensor_split"] == "free_before_load":  # no -ts: llama.cpp splits by free memory
        split = tuple(float(p["free_before_load"]) for p in data["points"])
    elif replay["tensor_split"] is not None:
        split = tuple(float(v) for v in replay["tensor_split"])
    assert n_devices == 1 or split, "several devices: a split or the free memory"
    return Placement(
        n_gpu_layers=replay["n_gpu_layers"],
        overrides=rules,
        n_cpu_moe=replay["n_cpu_moe"],
        tensor_split=split,
    )


def predict(name: str, factory: ModelFactory) -> MemoryEstimate:
    """moetune's memory for the post's placement and settings, per device."""
    data = load(name)
    replay = data["replay"]
    devices = _devices(data)
    settings = Settings(**replay["settings"], gpu_overhead_bytes=0, device_kind="cuda")
    facts = load_model_facts(header(replay, factory))
    return estimate(facts, placement(replay, len(devices), data), settings, devices)


@dataclass(frozen=True)
class Check:
    """One posted figure against moetune's: MiB, and whether it is within its tolerance."""

    file: str
    device: str
    part: str  # weights, kv, compute
    posted: float
    predicted: float
    outlier: str | None  # the file's explanation, when it lists this figure as an outlier

    @property
    def error(self) -> float:
        return self.predicted - self.posted

    @property
    def within(self) -> bool:
        if self.part == "weights":
            return abs(self.error) <= WEIGHTS_MIB
        if self.part == "kv":
            return abs(self.error) <= KV_SHARE * self.posted
        return abs(self.error) <= max(COMPUTE_SHARE * self.posted, COMPUTE_MIB)


def _posted(point: dict[str, Any], field: str) -> float:
    value = point[field]
    return float(sum(value) if isinstance(value, list) else value)


def _field(data: dict[str, Any], dotted: str) -> float:
    value: Any = data
    for key in dotted.split("."):
        value = value[key]
    return float(value)


def checks(name: str, memory: MemoryEstimate) -> list[Check]:
    data = load(name)
    replay = data["replay"]
    outliers = {(o["device"], o["part"]): o["why"] for o in replay["outliers"]}
    found = []
    for point, device in zip(data["points"], memory.devices, strict=True):
        predicted = {
            "weights": device.weights_bytes,
            "kv": device.kv_bytes,
            "compute": device.compute_bytes,
        }
        for part in PARTS:
            field = replay["compare"][part]
            if field is None:
                continue
            key = (point["device"], part)
            found.append(
                Check(
                    name,
                    point["device"],
                    part,
                    _posted(point, field),
                    predicted[part] / MIB,
                    outliers.get(key),
                )
            )
    if (host := replay.get("host_weights")) is not None:  # the CPU's share of the weights
        posted = _field(data, host)
        found.append(Check(name, "Host", "weights", posted, memory.cpu_weights_bytes / MIB, None))
    if (total := replay.get("kv_total")) is not None:
        kv = sum(d.kv_bytes for d in memory.devices) / MIB
        found.append(Check(name, "all", "kv", _field(data, total["field"]), kv, None))
    return found
