"""Multimodal projector (mmproj) GGUF files for tests, written with ``gguf.GGUFWriter``.

``write_projector`` writes a clip file of one of ``PROJECTOR_TYPES`` (the tensor and key
names of llama.cpp build 11434's clip.cpp / gguf-py): a ViT tower of ``n_layer`` blocks and
the type's merger, F16 matrices and F32 norms/biases.  ``random=True`` (the tiny fixtures)
writes seeded random weights that the real llama-server can encode an image with; otherwise
(the real-shaped calibration files, hundreds of MiB) a small constant, which is fast to write
and enough for clip's warm-up reserve.  ``REAL_SHAPES`` holds the vision towers of
Qwen3-VL-30B-A3B, Qwen3.5-35B-A3B, Gemma 3 and GLM-4.5V (with fewer blocks).
``png_bytes`` writes a small RGB PNG by hand (zlib), for image requests.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

PROJECTOR_TYPES = ("gemma3", "qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "glm4v")


@dataclass
class _W:
    writer: gguf.GGUFWriter
    random: bool
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def _data(self, shape: tuple[int, ...], scale: float) -> np.ndarray:
        if self.random:
            return self.rng.standard_normal(shape, dtype=np.float32) * scale
        return np.full(shape, scale, dtype=np.float32)

    def mat(self, name: str, *ne: int) -> None:
        """An F16 tensor of ggml shape ``ne`` (row length first)."""
        self.writer.add_tensor(name, self._data(tuple(reversed(ne)), 0.02).astype(np.float16))

    def f32(self, name: str, *ne: int) -> None:
        """An F32 tensor of ggml shape ``ne`` (position embeddings: ggml_interpolate needs F32)."""
        self.writer.add_tensor(name, self._data(tuple(reversed(ne)), 0.02))

    def vec(self, name: str, n: int, value: float | None = None) -> None:
        data = np.full(n, value, dtype=np.float32) if value is not None else self._data((n,), 0.02)
        self.writer.add_tensor(name, data)


def _keys(
    w: gguf.GGUFWriter,
    proj: str,
    *,
    n_embd: int,
    n_head: int,
    n_layer: int,
    n_ff: int,
    image_size: int,
    patch_size: int,
    proj_dim: int,
) -> None:
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", proj)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.projection_dim", proj_dim)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    if proj in ("glm4v", "qwen2.5vl_merger"):
        w.add_bool("clip.use_silu", True)
    elif proj != "qwen2vl_merger":
        w.add_bool("clip.use_gelu", True)


def _block(
    b: _W, il: int, e: int, ff: int, *, fused: bool, biases: bool, gate: bool, layer_norm: bool
) -> None:
    p = f"v.blk.{il}"
    if fused:
        b.mat(f"{p}.attn_qkv.weight", e, 3 * e)
        if biases:
            b.vec(f"{p}.attn_qkv.bias", 3 * e)
    else:
        for part in "qkv":
            b.mat(f"{p}.attn_{part}.weight", e, e)
            b.vec(f"{p}.attn_{part}.bias", e)
    b.mat(f"{p}.attn_out.weight", e, e)
    if biases:
        b.vec(f"{p}.attn_out.bias", e)
    for ln in ("ln1", "ln2"):
        b.vec(f"{p}.{ln}.weight", e, 1.0)
        if layer_norm:
            b.vec(f"{p}.{ln}.bias", e, 0.0)
    b.mat(f"{p}.ffn_up.weight", e, ff)
    b.mat(f"{p}.ffn_down.weight", ff, e)
    if gate:
        b.mat(f"{p}.ffn_gate.weight", e, ff)
    if biases:
        b.vec(f"{p}.ffn_up.bias", ff)
        b.vec(f"{p}.ffn_down.bias", e)
        if gate:
            b.vec(f"{p}.ffn_gate.bias", ff)


def _merger_mlp(b: _W, prefix: str, width: int, n_out: int, norm: bool) -> None:
    if norm:
        b.vec(f"{prefix}.norm.weight", width, 1.0)
        b.vec(f"{prefix}.norm.bias", width, 0.0)
    names = ("fc1", "fc2") if norm else ("0", "2")
    b.mat(f"{prefix}.{names[0]}.weight", width, width)
    b.vec(f"{prefix}.{names[0]}.bias", width)
    b.mat(f"{prefix}.{names[1]}.weight", width, n_out)
    b.vec(f"{prefix}.{names[1]}.bias", n_out)


def write_projector(
    path: Path,
    *,
    projector_type: str = "gemma3",
    n_embd_out: int = 256,
    image_size: int = 224,
    patch_size: int = 14,
    n_embd: int = 64,
    n_head: int = 4,
    n_layer: int = 2,
    n_ff: int = 128,
    n_merge: int | None = None,
    deepstack_layers: tuple[int, ...] = (),
    n_wa_pattern: int = 2,
    n_pos_embd: int | None = None,
    merger_ff: int | None = None,
    random: bool = True,
) -> Path:
    """Write an mmproj of ``projector_type`` whose output width (clip_n_mmproj_embd) is
    ``n_embd_out`` (qwen3vl: split over the main merger and each deepstack merger)."""
    if projector_type not in PROJECTOR_TYPES:
        raise ValueError(f"projector_type must be one of {PROJECTOR_TYPES}")
    w = gguf.GGUFWriter(path, "clip")
    proj_dim = n_embd_out // (1 + len(deepstack_layers))
    _keys(
        w,
        projector_type,
        n_embd=n_embd,
        n_head=n_head,
        n_layer=n_layer,
        n_ff=n_ff,
        image_size=image_size,
        patch_size=patch_size,
        proj_dim=proj_dim,
    )
    b = _W(w, random)
    e = n_embd
    b.mat("v.patch_embd.weight", patch_size, patch_size, 3, e)
    if projector_type == "gemma3":
        w.add_uint32("clip.vision.projector.scale_factor", n_merge or 4)
        b.vec("v.patch_embd.bias", e)
        b.f32("v.position_embd.weight", e, (image_size // patch_size) ** 2)
        for il in range(n_layer):
            _block(b, il, e, n_ff, fused=False, biases=True, gate=False, layer_norm=True)
        b.vec("v.post_ln.weight", e, 1.0)
        b.vec("v.post_ln.bias", e, 0.0)
        b.vec("mm.soft_emb_norm.weight", e, 1.0)
        b.mat("mm.input_projection.weight", n_embd_out, e)
    elif projector_type in ("qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger"):
        w.add_uint32("clip.vision.spatial_merge_size", n_merge or 2)
        qwen3 = projector_type == "qwen3vl_merger"
        if projector_type == "qwen2.5vl_merger":
            w.add_uint32("clip.vision.n_wa_pattern", n_wa_pattern)
        b.mat("v.patch_embd.weight.1", patch_size, patch_size, 3, e)
        if qwen3:
            b.vec("v.patch_embd.bias", e)
            b.f32("v.position_embd.weight", e, n_pos_embd or (image_size // patch_size) ** 2)
        for il in range(n_layer):
            _block(
                b,
                il,
                e,
                n_ff,
                fused=qwen3,
                biases=True,
                gate=projector_type == "qwen2.5vl_merger",
                layer_norm=projector_type != "qwen2.5vl_merger",
            )
            if il in deepstack_layers:
                _merger_mlp(b, f"v.deepstack.{il}", 4 * e, proj_dim, True)
        b.vec("v.post_ln.weight", e, 1.0)
        if projector_type != "qwen2.5vl_merger":
            b.vec("v.post_ln.bias", e, 0.0)
        _merger_mlp(b, "mm", 4 * e, proj_dim, False)
    else:  # glm4v
        m = n_merge or 2
        w.add_uint32("clip.vision.spatial_merge_size", m)
        b.mat("v.patch_embd.weight.1", patch_size, patch_size, 3, e)
        b.vec("v.patch_embd.bias", e)
        b.vec("v.norm_embd.weight", e, 1.0)
        b.f32("v.position_embd.weight", e, n_pos_embd or (image_size // patch_size) ** 2)
        for il in range(n_layer):
            _block(b, il, e, n_ff, fused=True, biases=False, gate=True, layer_norm=False)
        b.vec("v.post_ln.weight", e, 1.0)
        b.mat("mm.patch_merger.weight", m, m, e, n_embd_out)
        b.vec("mm.patch_merger.bias", n_embd_out)
        b.mat("mm.model.fc.weight", n_embd_out, n_embd_out)
        b.vec("mm.post_norm.weight", n_embd_out, 1.0)
        b.vec("mm.post_norm.bias", n_embd_out, 0.0)
        mff = merger_ff or 2 * n_embd_out
        b.mat("mm.up.weight", n_embd_out, mff)
        b.mat("mm.gate.weight", n_embd_out, mff)
        b.mat("mm.down.weight", mff, n_embd_out)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# Real vision towers (config.json vision_config), with fewer blocks than the real 24-27.
REAL_SHAPES: dict[str, dict[str, object]] = {
    "qwen3-vl-30b-a3b": {
        "projector_type": "qwen3vl_merger",
        "n_embd": 1152,
        "n_head": 16,
        "n_ff": 4304,
        "patch_size": 16,
        "image_size": 768,
        "n_pos_embd": 2304,
        "n_embd_out": 4096,
        "deepstack_layers": (1,),
        "n_layer": 3,
    },
    "qwen3.5-35b-a3b": {
        "projector_type": "qwen3vl_merger",
        "n_embd": 1152,
        "n_head": 16,
        "n_ff": 4304,
        "patch_size": 16,
        "image_size": 768,
        "n_pos_embd": 2304,
        "n_embd_out": 2048,
        "n_layer": 2,
    },
    "gemma-3": {
        "projector_type": "gemma3",
        "n_embd": 1152,
        "n_head": 16,
        "n_ff": 4304,
        "patch_size": 14,
        "image_size": 896,
        "n_embd_out": 2560,
        "n_layer": 2,
    },
    "glm-4.5v": {
        "projector_type": "glm4v",
        "n_embd": 1536,
        "n_head": 12,
        "n_ff": 4096,
        "patch_size": 14,
        "image_size": 336,
        "n_embd_out": 4096,
        "merger_ff": 10944,
        "n_layer": 2,
    },
    "qwen2.5-vl": {
        "projector_type": "qwen2.5vl_merger",
        "n_embd": 1280,
        "n_head": 16,
        "n_ff": 3420,
        "patch_size": 14,
        "image_size": 560,
        "n_embd_out": 2048,
        "n_layer": 4,
        "n_wa_pattern": 2,
    },
}


def write_real_shaped(path: Path, name: str) -> Path:
    """A calibration projector: ``REAL_SHAPES[name]`` with constant weights."""
    return write_projector(path, random=False, **REAL_SHAPES[name])  # type: ignore[arg-type]


def png_bytes(width: int = 32, height: int = 32) -> bytes:
    """An RGB gradient PNG, written by hand."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        body = tag + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\x00" + bytes(v for x in range(width) for v in (x * 8 % 256, y * 8 % 256, 128))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
