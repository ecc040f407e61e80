"""The memory of a multimodal projector (``--mmproj FILE``): clip's weights and compute reserve.

Pure: works from the GGUF header that jobs/loader.py (or the hub) read.  Facts from llama.cpp
build 11434 (tools/mtmd/clip.cpp, clip-model.h, mtmd.cpp, tools/server/server-context.cpp):

- weights: clip logs ``load_hparams: model size: X MiB`` = the sum of ggml_nbytes over EVERY
  tensor in the file (clip_model_loader's constructor), printed once per modality context
  (a vision + audio file makes two clip contexts, each logging the same total but each
  allocating a buffer of only the tensors it loads).  No buffer line is logged for them.
- compute: ``reserve_compute_meta: <BUFT> compute buffer size = X MiB``, one line per backend
  of clip's scheduler ([device, CPU], or [CPU] with ``--no-mmproj-offload``); the device is
  ``-mmdev``, else the first ``-dev``, else the first GPU-type device (RPC devices are GPU-type).
  The reserved graph is the warm-up image: ``warmup_image_size`` from load_hparams (Qwen-VL and
  GLM-4V: 46x46 merged tokens = 1472 px at patch 16; Gemma 3: its ``image_size``), capped by
  ``--image-max-tokens``.  llama-server first measures the projector (silently,
  ``mtmd_get_memory_usage``) and, for projectors that need non-causal attention on the image
  (Gemma 3, Gemma 4 V/UV, DeepSeek-4V), caps ``image_max_tokens`` to ``n_ubatch`` before the
  real load.  ``-fa auto`` (the default): clip reserves with flash attention, then checks that
  the device supports the FLASH_ATTN_EXT nodes (CPU and RPC: always; CUDA: the head sizes of
  fattn.cu) and else reserves again without it; ggml-alloc only grows a buffer, so the
  buffer is the larger of both reserves.

Calibration (benchmarks/projector_calibration.py, llama-server build 11434, synthetic
real-shaped projectors with fewer layers; error = predicted - printed, MiB; printed to
0.01 MiB):

    projector (blocks here)             kinds     FA      image caps   cases  max |err|
    tiny gemma3 (448/14, 2 blk)         cpu, rpc  on/off  -               4     0.005
    tiny qwen3vl_merger (deepstack)     cpu, rpc  on/off  -, 256          8     0.005
    Qwen3-VL-30B-A3B tower (3 blk)      cpu, rpc  on/off  -, 1024, 256   12     0.004
    Qwen3.5-35B-A3B tower (2 blk)       cpu, rpc  on/off  -               4     0.004
    Gemma 3 SigLIP 896/14 (2 blk)       cpu, rpc  on/off  -; ub 256       5     0.002
    GLM-4.5V tower (2 blk)              cpu, rpc  on/off  -, 1024         8     0.004
    Qwen2.5-VL tower (4 blk, windows)   cpu, rpc  on/off  -               4     0.003
    all 45 cases (weights: 45 of 45 equal to the printed 0.01 MiB)              0.005

Examples (printed MiB, RPC device + CPU): Qwen3-VL at the default 1472 px warm-up, FA on
275.48 + 24.93, FA off 4657.81 (KQ = 8464^2 x 16 heads x 4 B); --image-max-tokens 256:
33.33 + 3.02.  Gemma 3 896 px: 121.25 + 9.19 (off: 1132.00).  GLM-4.5V: 515.05 + 19.11.

CUDA is not measured on this rig: its predictions use the same graph with
128-byte alignment and are marked ``exact=False``.

Not modelled: projector types other than gemma3, qwen2vl/qwen2.5vl/qwen3vl mergers and glm4v
(they get ``estimate_compute``'s documented estimate, ``exact=False``); audio encoders; the
mixed-batch cap (a text model without a KV cache or with non-causal attention caps the image
to ``n_ubatch/2``); ``--no-warmup`` (no reserve at load: the buffer is allocated on the
first image, of that image's size); CUDA ops that clip's graph would run on the CPU.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

from moetune.core.compute.clip import GRAPHS, Shape, replay_clip
from moetune.errors import ProjectorError
from moetune.gguf.reader import GGUFHeader, TensorInfo
from moetune.record import record

__all__ = [
    "ClipHparams",
    "ProjectorCompute",
    "ProjectorFacts",
    "projector_compute",
    "projector_from_header",
]

# clip-impl.h PROJECTOR_TYPE_NAMES (build 11434)
KNOWN_TYPES = frozenset(
    (
        "mlp",
        "ldp",
        "ldpv2",
        "resampler",
        "adapter",
        "qwen2vl_merger",
        "qwen2.5vl_merger",
        "qwen3vl_merger",
        "ling3vl",
        "step3vl",
        "gemma3",
        "gemma3nv",
        "gemma3na",
        "gemma4v",
        "gemma4a",
        "gemma4uv",
        "gemma4ua",
        "phi4",
        "idefics3",
        "pixtral",
        "ultravox",
        "internvl",
        "llama4",
        "qwen2a",
        "qwen3a",
        "glma",
        "qwen2.5o",
        "voxtral",
        "meralion",
        "musicflamingo",
        "lfm2",
        "kimivl",
        "paddleocr",
        "lightonocr",
        "cogvlm",
        "janus_pro",
        "dots_ocr",
        "dots3note_v",
        "dots3note_a",
        "deepseekocr",
        "deepseekocr2",
        "deepseek4v",
        "lfm2a",
        "glm4v",
        "glm5v",
        "youtuvl",
        "yasa2",
        "kimik25",
        "nemotron_v2_vl",
        "exaone4_5",
        "hunyuanvl",
        "minicpmv4_6",
        "granite_speech",
        "mimovl",
        "minimax_m3",
        "granite4_vision",
        "mimo_audio",
        "parakeet",
        "qwen3tts_spkenc",
        "qwen3tts_gen",
        "pockettts_spkenc",
        "pockettts_gen",
        "muse-glimmer",
    )
)
MODELLED_TYPES = frozenset(GRAPHS)
# mtmd_decode_use_non_causal: the image must fit one ubatch (llama-server caps its tokens)
_NON_CAUSAL = frozenset({"gemma3", "gemma4uv", "deepseek4v", "gemma4v"})
# ggml-cuda fattn.cu: head sizes with a flash-attention kernel
_CUDA_FA_HEADS = frozenset({40, 64, 72, 80, 96, 112, 128, 192, 256, 320, 512, 576})
# (n_tokens_min, n_tokens_max) of set_limit_image_tokens and the warm-up tokens (n*n)
_LIMITS: dict[str, tuple[tuple[int, int] | None, int | None]] = {
    "qwen2vl_merger": ((8, 4096), 46 * 46),
    "qwen2.5vl_merger": ((8, 4096), 46 * 46),
    "qwen3vl_merger": ((8, 4096), 46 * 46),
    "ling3vl": ((8, 4096), 46 * 46),
    "glm4v": ((8, 4096), 46 * 46),
    "gemma4v": ((70, 1120), 256),
    "gemma4uv": ((70, 1120), 256),
    "pixtral": ((8, 1024), 256),
    "lfm2": ((64, 256), None),
}
_DEFAULT_MERGE = {
    "qwen2vl_merger": 2,
    "qwen2.5vl_merger": 2,
    "qwen3vl_merger": 2,
    "glm4v": 2,
    "ling3vl": 2,
    "gemma3": 4,
    "gemma4v": 3,
}
_MERGE_KEY = {
    "gemma3": "clip.vision.projector.scale_factor",
    "gemma4v": "clip.vision.projector.scale_factor",
}


@record(frozen=True)
class ClipHparams:
    """The hparams clip's load_hparams reads for one modality (``clip.vision.*``/``audio``)."""

    projector_type: str
    n_embd: int
    n_head: int
    n_head_kv: int
    n_embd_head: int  # 0: n_embd / n_head
    n_ff: int
    n_layer: int
    projection_dim: int
    eps: float
    image_size: int = 0
    patch_size: int = 1
    n_merge: int = 1
    image_min_pixels: int = -1  # from the file (types that read it), else set by limits
    image_max_pixels: int = -1
    n_wa_pattern: int = 0
    ffn_op: str = "gelu_quick"
    n_mel_bins: int = 0

    @property
    def d_head(self) -> int:
        return self.n_embd_head or (self.n_embd // self.n_head if self.n_head else 0)


@record(frozen=True)
class ProjectorFacts:
    """What moetune knows about an mmproj file, from its header."""

    path: Path
    projector_types: tuple[str, ...]  # one per modality context, vision first
    has_vision: bool
    has_audio: bool
    vision: ClipHparams | None
    audio: ClipHparams | None
    tensors: tuple[TensorInfo, ...]
    weights_bytes: int  # clip's "model size": every tensor of the file
    n_embd_out: int | None  # clip_n_mmproj_embd (None: a type moetune cannot read it for)
    n_deepstack_layers: int = 0

    @property
    def hparams(self) -> ClipHparams:
        """The vision hparams, else the audio ones."""
        found = self.vision or self.audio
        assert found is not None
        return found

    @property
    def image_size(self) -> int:
        return self.vision.image_size if self.vision else 0

    @property
    def patch_size(self) -> int:
        return self.vision.patch_size if self.vision else 0

    def buffer_bytes(self, alignment: int = 32) -> int:
        """The weight buffers clip allocates (each context's tensors, padded): vision loads
        ``v.*``/``mm.*``, audio ``a.*``/``mm.a.*``; about ``weights_bytes``."""
        return sum(-(-(t.nbytes or 0) // alignment) * alignment for t in self.tensors)


class ProjectorCompute(NamedTuple):
    """clip's compute reserve: the device's buffer, the CPU's, the warm-up image."""

    device_bytes: int
    host_bytes: int
    warmup: str
    exact: bool


# --- loading --------------------------------------------------------------------------------


def _meta_int(h: GGUFHeader, key: str, default: int | None = None) -> int:
    value = h.metadata.get(key, default)
    if value is None:
        raise ProjectorError(f"{h.path.name}: missing key {key} (clip requires it)")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProjectorError(f"{h.path.name}: {key} is {value!r} (must be a whole number)")
    return value


def _meta_bool(h: GGUFHeader, key: str) -> bool:
    return h.metadata.get(key) is True


def _proj_type(h: GGUFHeader, modality: str) -> str:
    value = h.metadata.get("clip.projector_type") or h.metadata.get(
        f"clip.{modality}.projector_type"
    )
    if not isinstance(value, str) or not value:
        raise ProjectorError(
            f"{h.path.name}: no clip.projector_type (nor clip.{modality}."
            "projector_type): not a projector llama.cpp can load"
        )
    if value not in KNOWN_TYPES:
        raise ProjectorError(
            f"{h.path.name}: unknown projector type {value!r} for llama.cpp build 11434"
        )
    if value == "qwen2.5o":
        return "qwen2.5vl_merger" if modality == "vision" else "qwen2a"
    return value


def _ffn_op(h: GGUFHeader) -> str:
    if _meta_bool(h, "clip.use_gelu") and _meta_bool(h, "clip.use_silu"):
        raise ProjectorError(f"{h.path.name}: both use_gelu and use_silu are set")
    if _meta_bool(h, "clip.use_gelu"):
        return "gelu"
    return "silu" if _meta_bool(h, "clip.use_silu") else "gelu_quick"


def _hparams(h: GGUFHeader, modality: str) -> ClipHparams:
    proj = _proj_type(h, modality)
    p = f"clip.{modality}"
    eps = h.metadata.get(f"{p}.attention.layer_norm_epsilon")
    if not isinstance(eps, float | int):
        raise ProjectorError(f"{h.path.name}: missing key {p}.attention.layer_norm_epsilon")
    n_head = _meta_int(h, f"{p}.attention.head_count")
    common = {
        "projector_type": proj,
        "n_embd": _meta_int(h, f"{p}.embedding_length"),
        "n_head": n_head,
        "n_head_kv": _meta_int(h, f"{p}.attention.head_count_kv", n_head),
        "n_embd_head": _meta_int(h, f"{p}.attention.head_dim", 0),
        "n_ff": _meta_int(h, f"{p}.feed_forward_length"),
        "n_layer": _meta_int(h, f"{p}.block_count"),
        "projection_dim": _meta_int(h, f"{p}.projection_dim"),
        "eps": float(eps),
        "ffn_op": _ffn_op(h),
    }
    if modality == "audio":
        audio = ClipHparams(**common, n_mel_bins=_meta_int(h, "clip.audio.num_mel_bins"))  # type: ignore[arg-type]
        _check_clip(h, audio, modality, "")
        return audio
    merge_key = _MERGE_KEY.get(proj, "clip.vision.spatial_merge_size")
    wa = _meta_int(h, "clip.vision.n_wa_pattern", None if proj == "qwen2.5vl_merger" else 0)
    vision = ClipHparams(
        **common,  # type: ignore[arg-type]
        image_size=_meta_int(h, "clip.vision.image_size"),
        patch_size=_meta_int(h, "clip.vision.patch_size"),
        n_merge=_meta_int(h, merge_key, _DEFAULT_MERGE.get(proj, 1)),
        image_min_pixels=_meta_int(h, "clip.vision.image_min_pixels", -1),
        image_max_pixels=_meta_int(h, "clip.vision.image_max_pixels", -1),
        n_wa_pattern=wa,
    )
    _check_clip(h, vision, modality, merge_key)
    return vision


def _check_clip(h: GGUFHeader, hp: ClipHparams, modality: str, merge_key: str) -> None:
    """clip.cpp load_hparams' sanity checks, and the heads its attention divides by: a
    ProjectorError naming the key and the value."""
    p = f"clip.{modality}"
    checks = [
        (f"{p}.embedding_length", hp.n_embd, hp.n_embd > 0, "must be positive"),
        (f"{p}.attention.head_count", hp.n_head, hp.n_head > 0, "must be positive"),
        (f"{p}.attention.head_count_kv", hp.n_head_kv, hp.n_head_kv > 0, "must be positive"),
        (f"{p}.attention.head_dim", hp.n_embd_head, hp.n_embd_head >= 0, "cannot be negative"),
        (f"{p}.feed_forward_length", hp.n_ff, hp.n_ff >= 0, "cannot be negative"),
        (f"{p}.projection_dim", hp.projection_dim, hp.projection_dim >= 0, "cannot be negative"),
        (
            f"{p}.block_count",
            hp.n_layer,
            0 <= hp.n_layer <= len(h.tensors),
            f"the file has {len(h.tensors)} tensors",
        ),
        (f"{p}.attention.layer_norm_epsilon", hp.eps, math.isfinite(hp.eps), "not a number"),
    ]
    if modality == "vision":
        checks += [
            ("clip.vision.image_size", hp.image_size, 0 <= hp.image_size <= 8192, "0 to 8192"),
            ("clip.vision.patch_size", hp.patch_size, 0 < hp.patch_size < 65536, "1 to 65535"),
            (merge_key, hp.n_merge, 0 < hp.n_merge < 65536, "1 to 65535"),
            (
                "clip.vision.image_max_pixels",
                hp.image_max_pixels,
                hp.image_max_pixels >= hp.image_min_pixels,
                f"less than image_min_pixels {hp.image_min_pixels}",
            ),
        ]
    for key, value, ok, why in checks:
        if not ok:
            raise ProjectorError(f"{h.path.name}: {key} is {value} ({why})")


def _required(hp: ClipHparams) -> list[str]:
    """Tensors load_tensors (get_tensor(..., required)) and the graph asserts need."""
    names = [f"v.blk.{il}.attn_out.weight" for il in range(hp.n_layer)]
    names += [f"v.blk.{il}.ffn_{k}.weight" for il in range(hp.n_layer) for k in ("up", "down")]
    per_type = {
        "gemma3": ["v.patch_embd.weight", "mm.input_projection.weight", "mm.soft_emb_norm.weight"],
        "qwen2vl_merger": [
            "v.patch_embd.weight",
            "v.patch_embd.weight.1",
            "mm.0.weight",
            "mm.0.bias",
            "mm.2.weight",
            "mm.2.bias",
        ],
        "qwen3vl_merger": [
            "v.patch_embd.weight",
            "v.patch_embd.weight.1",
            "v.patch_embd.bias",
            "v.position_embd.weight",
            "mm.0.weight",
            "mm.0.bias",
            "mm.2.weight",
            "mm.2.bias",
        ],
        "glm4v": [
            "v.patch_embd.weight",
            "v.patch_embd.weight.1",
            "v.patch_embd.bias",
            "mm.model.fc.weight",
            "mm.up.weight",
            "mm.gate.weight",
            "mm.down.weight",
            "mm.post_norm.weight",
            "mm.patch_merger.weight",
            "mm.patch_merger.bias",
        ],
    }
    per_type["qwen2.5vl_merger"] = per_type["qwen2vl_merger"]
    return names + per_type.get(hp.projector_type, [])


# clip_n_mmproj_embd: (tensor, ggml dim) per projector type
_OUT_WIDTH: dict[str, tuple[str, int]] = {
    "mlp": ("mm.2.weight", 1),
    "mlp_norm": ("mm.3.bias", 0),
    "phi4": ("mm.2.weight", 1),
    "pixtral": ("mm.2.weight", 1),
    "lightonocr": ("mm.2.weight", 1),
    "dots_ocr": ("mm.2.weight", 1),
    "qwen2vl_merger": ("mm.2.bias", 0),
    "qwen2.5vl_merger": ("mm.2.bias", 0),
    "qwen3vl_merger": ("mm.2.bias", 0),
    "ling3vl": ("mm.2.bias", 0),
    "exaone4_5": ("mm.2.bias", 0),
    "youtuvl": ("mm.2.bias", 0),
    "gemma3": ("mm.input_projection.weight", 0),
    "gemma3nv": ("mm.input_projection.weight", 0),
    "gemma4v": ("mm.input_projection.weight", 1),
    "gemma4uv": ("mm.input_projection.weight", 1),
    "idefics3": ("mm.model.fc.weight", 1),
    "internvl": ("mm.3.weight", 1),
    "lfm2": ("mm.2.weight", 1),
    "kimivl": ("mm.2.weight", 1),
    "paddleocr": ("mm.2.weight", 1),
    "kimik25": ("mm.2.weight", 1),
    "glm4v": ("mm.down.weight", 1),
    "glm5v": ("mm.down.weight", 1),
}


def _n_embd_out(hp: ClipHparams, by_name: dict[str, TensorInfo], n_deepstack: int) -> int | None:
    found = _OUT_WIDTH.get(hp.projector_type)
    if found is None or found[0] not in by_name or len(by_name[found[0]].shape) <= found[1]:
        return None
    width = by_name[found[0]].shape[found[1]]
    return width * (1 + n_deepstack) if hp.projector_type == "qwen3vl_merger" else width


def _check_data(h: GGUFHeader) -> None:
    end = max((h.data_offset + t.offset + (t.nbytes or 0) for t in h.tensors), default=0)
    if end > h.file_bytes:
        raise ProjectorError(
            f"{h.path.name}: truncated: its tensors end at byte {end}, the file has {h.file_bytes}"
        )


def projector_from_header(h: GGUFHeader) -> ProjectorFacts:
    """The facts of an mmproj header already read (from a file, or from the hub);
    ProjectorError if llama.cpp's clip would refuse it."""
    arch = h.metadata.get("general.architecture")
    if arch != "clip":
        raise ProjectorError(
            f"{h.path.name}: not a projector (general.architecture is {arch!r}, expected 'clip')"
        )
    has_vision = _meta_bool(h, "clip.has_vision_encoder")
    has_audio = _meta_bool(h, "clip.has_audio_encoder")
    if not (has_vision or has_audio):
        raise ProjectorError(
            f"{h.path.name}: neither clip.has_vision_encoder nor clip.has_audio_encoder is set"
        )
    vision = _hparams(h, "vision") if has_vision else None
    skip_audio = vision is not None and vision.projector_type == "gemma3nv"
    audio = _hparams(h, "audio") if has_audio and not skip_audio else None
    by_name = {t.name: t for t in h.tensors}
    main = vision or audio
    assert main is not None
    missing = [n for n in _required(main) if n not in by_name] if vision else []
    if missing:
        raise ProjectorError(
            f"{h.path.name}: missing tensor {missing[0]} ({main.projector_type} needs it)"
        )
    _check_data(h)
    n_deep = sum(f"v.deepstack.{il}.fc1.weight" in by_name for il in range(main.n_layer))
    types = tuple(hp.projector_type for hp in (vision, audio) if hp is not None)
    return ProjectorFacts(
        path=Path(h.path),
        projector_types=types,
        has_vision=has_vision,
        has_audio=has_audio,
        vision=vision,
        audio=audio,
        tensors=h.tensors,
        weights_bytes=sum(t.nbytes or 0 for t in h.tensors),
        n_embd_out=_n_embd_out(main, by_name, n_deep),
        n_deepstack_layers=n_deep,
    )


# --- compute --------------------------------------------------------------------------------


def _image_max_tokens(hp: ClipHparams, max_px: int) -> int:
    """clip_get_image_max_tokens."""
    if max_px <= 0:
        return -1
    return max_px // (hp.patch_size**2 * hp.n_merge**2)


def warmup_side(hp: ClipHparams, custom_min: int, custom_max: int) -> tuple[int, int]:
    """load_hparams' warmup_image_size and image_max_pixels with ``--image-min/max-tokens``
    (set_limit_image_tokens, set_warmup_n_tokens)."""
    side, max_px = hp.image_size, hp.image_max_pixels
    limits, warm = _LIMITS.get(hp.projector_type, (None, None))
    area = hp.patch_size**2 * hp.n_merge**2
    if limits is not None:
        max_px = (custom_max if custom_max > 0 else limits[1]) * area
        side = math.isqrt(max_px)
    if warm is not None:
        per_side = math.isqrt(warm)
        if 0 < custom_max < warm:
            per_side = max(1, math.isqrt(custom_max))
        side = per_side * hp.patch_size * hp.n_merge
    del custom_min  # only moves image_min_pixels, not the warm-up image
    return side, max_px


def _server_caps(
    hp: ClipHparams, n_embd_out: int | None, image_min: int, image_max: int, n_ubatch: int
) -> tuple[int, int]:
    """server-context.cpp: a non-causal projector's image must fit one ubatch."""
    non_causal = hp.projector_type in _NON_CAUSAL
    if hp.projector_type == "gemma4v":
        non_causal = n_embd_out not in (1536, 2560)
    if not non_causal:
        return image_min, image_max
    _, max_px = warmup_side(hp, image_min, image_max)
    if _image_max_tokens(hp, max_px) > n_ubatch:
        return min(image_min, n_ubatch), n_ubatch
    return image_min, image_max


def _shape(hp: ClipHparams, side: int) -> Shape:
    return Shape(
        hp.projector_type,
        hp.n_embd,
        hp.n_head,
        hp.d_head,
        hp.n_layer,
        hp.patch_size,
        hp.n_merge,
        hp.n_wa_pattern,
        side,
    )


def estimate_compute(hp: ClipHparams, side: int, flash_attn: bool) -> tuple[int, int]:
    """The documented estimate for types without a replay: a ViT over the warm-up image.

    device: the widest FFN activation three times over plus the residual stream, and the
    KQ matrix without flash attention; host: the F32 image and 4 position ids per patch."""
    n_pos = max(1, (side // max(hp.patch_size, 1)) ** 2)
    act = n_pos * (3 * max(hp.n_ff, hp.n_embd) + 4 * hp.n_embd) * 4
    kq = 0 if flash_attn else 2 * n_pos * n_pos * hp.n_head * 4
    return act + kq, side * side * 3 * 4 + n_pos * 4 * 4


def _weights(p: ProjectorFacts) -> dict[str, tuple[tuple[int, ...], str, int]]:
    return {t.name: (t.shape, t.type_name, t.nbytes or 0) for t in p.tensors}


def projector_compute(
    p: ProjectorFacts,
    *,
    kind: str,
    flash_attn: bool | None = None,
    image_min_tokens: int | None = None,
    image_max_tokens: int | None = None,
    n_ubatch: int = 512,
) -> ProjectorCompute:
    """clip's ``reserve_compute_meta`` buffers as llama-server loads ``p``.

    ``kind``: "cpu" (``--no-mmproj-offload``: one CPU buffer, reported as host), "rpc" or
    "cuda" (the projector's device, plus the CPU's buffer). ``flash_attn``: ``-fa`` (None:
    auto). ``image_*_tokens``: ``--image-min/max-tokens``; ``n_ubatch``: ``-ub``."""
    if kind not in ("cpu", "rpc", "cuda"):
        raise ValueError(f"kind must be 'cpu', 'rpc' or 'cuda', got {kind!r}")
    hp = p.vision
    if hp is None:  # audio only: not modelled
        return ProjectorCompute(0, 0, "audio (not modelled)", False)
    cmin, cmax = _server_caps(
        hp, p.n_embd_out, image_min_tokens or -1, image_max_tokens or -1, n_ubatch
    )
    side, _ = warmup_side(hp, cmin, cmax)
    n_patches = (side // hp.patch_size) ** 2
    warmup = f"{side}x{side} image, {n_patches} patches"
    fa_ok = kind != "cuda" or hp.d_head in _CUDA_FA_HEADS
    tries = [True, False] if flash_attn is None and not fa_ok else [flash_attn is not False]
    if hp.projector_type not in MODELLED_TYPES:
        dev, host = estimate_compute(hp, side, tries[-1])
        return ProjectorCompute(
            dev if kind != "cpu" else 0, host + (dev if kind == "cpu" else 0), warmup, False
        )
    weights = _weights(p)
    dev = host = 0
    for fa in tries:  # ggml-alloc only grows a buffer: the larger of the reserves
        d, h = replay_clip(weights, _shape(hp, side), kind=kind, flash_attn=fa)
        dev, host = max(dev, d), max(host, h)
    exact = kind != "cuda" and (flash_attn is not True or fa_ok)
    return ProjectorCompute(dev, host, warmup, exact)
