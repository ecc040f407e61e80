"""The projector (mmproj) memory model: header facts, and clip's own log lines.

llama-server is started at ``-lv 4`` with a tiny text model and ``--mmproj``: on the CPU
(``--no-mmproj-offload``) and on a loopback ggml-rpc-server (``--rpc``: clip takes the first
GPU-type device, which an RPC device is).  clip logs ``load_hparams: model size`` and one
``reserve_compute_meta: <BUFT> compute buffer size`` line per buffer; moetune must match them.
"""

from __future__ import annotations

import base64
import re
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from moetune.core.projector import projector_compute
from moetune.errors import GGUFFormatError, ProjectorError
from moetune.jobs.loader import load_projector
from moetune.units import MIB

from factory import write_model
from llama import running_server
from projector_factory import png_bytes, write_projector

_COMPUTE = re.compile(r"reserve_compute_meta:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
_MODEL = re.compile(r"load_hparams: model size:\s+([\d.]+) MiB")
TEXT_WIDTH = 256  # tests/factory.py write_model's n_embd


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("projector")
    return {
        "text": write_model(root / "text.gguf", "qwen3moe", n_layers=2),
        "gemma3": write_projector(
            root / "gemma3.gguf", projector_type="gemma3", n_embd_out=TEXT_WIDTH
        ),
        "qwen3vl": write_projector(
            root / "qwen3vl.gguf",
            projector_type="qwen3vl_merger",
            patch_size=16,
            n_embd_out=TEXT_WIDTH,
            deepstack_layers=(0,),
        ),
    }


# --- header facts ---------------------------------------------------------------------------


def test_facts(files: dict[str, Path]) -> None:
    p = load_projector(files["gemma3"])
    assert p.projector_types == ("gemma3",) and p.has_vision and not p.has_audio
    assert p.n_embd_out == TEXT_WIDTH and p.image_size == 224 and p.patch_size == 14
    assert p.hparams.n_embd == 64 and p.hparams.n_merge == 4
    assert p.weights_bytes == sum(t.nbytes or 0 for t in p.tensors) > 0
    q = load_projector(files["qwen3vl"])
    assert q.n_deepstack_layers == 1 and q.n_embd_out == TEXT_WIDTH  # 128 x (1 + 1)


def test_text_model_is_not_a_projector(files: dict[str, Path]) -> None:
    with pytest.raises(ProjectorError, match=r"not a projector .*'qwen3moe', expected 'clip'"):
        load_projector(files["text"])


def test_truncated_projector(files: dict[str, Path], tmp_path: Path) -> None:
    data = files["gemma3"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 1000])
    with pytest.raises(ProjectorError, match="truncated"):
        load_projector(cut)
    cut.write_bytes(data[:200])
    with pytest.raises(GGUFFormatError):
        load_projector(cut)


def test_warmup_and_caps(files: dict[str, Path]) -> None:
    q = load_projector(files["qwen3vl"])
    assert projector_compute(q, kind="cpu").warmup == "1472x1472 image, 8464 patches"
    small = projector_compute(q, kind="rpc", image_max_tokens=256)
    assert small.warmup == "512x512 image, 1024 patches" and small.exact
    no_fa = projector_compute(q, kind="rpc", flash_attn=False, image_max_tokens=256)
    assert no_fa.device_bytes > small.device_bytes + 8 * MIB  # KQ = 1024^2 x 4 heads x 4 B
    g = load_projector(files["gemma3"])  # non-causal: llama-server caps it to n_ubatch
    assert projector_compute(g, kind="cpu", n_ubatch=64).warmup.startswith("224x224")


def test_unmodelled_type_is_an_estimate(files: dict[str, Path]) -> None:
    p = load_projector(files["gemma3"])
    assert p.vision is not None
    other = replace(p, vision=replace(p.vision, projector_type="pixtral"))
    estimate = projector_compute(other, kind="rpc")
    assert not estimate.exact and estimate.device_bytes > 0 and estimate.host_bytes > 0
    with pytest.raises(ValueError, match="kind"):
        projector_compute(p, kind="metal")


# --- against llama-server -------------------------------------------------------------------


def _clip_lines(log: str) -> tuple[float, dict[str, float]]:
    model = _MODEL.findall(log)
    assert model, "no load_hparams: model size line"
    return float(model[-1]), {buft: float(mib) for buft, mib in _COMPUTE.findall(log)}


def _check(log: str, facts_path: Path, kind: str, *, fa: bool, max_tokens: int | None) -> float:
    p = load_projector(facts_path)
    model, buffers = _clip_lines(log)
    assert round(p.weights_bytes / MIB, 2) == pytest.approx(model, abs=0.006)
    pred = projector_compute(p, kind=kind, flash_attn=fa, image_max_tokens=max_tokens)
    host = buffers.pop("CPU")
    device = sum(buffers.values())
    assert [b.startswith("RPC0[") for b in buffers] == ([True] if kind == "rpc" else [])
    for got, want in ((pred.device_bytes / MIB, device), (pred.host_bytes / MIB, host)):
        assert abs(got - want) <= max(0.1 * want, 16.0), (got, want)
        assert abs(got - want) <= 0.006, (got, want)  # the replay is exact on CPU/RPC
    return device + host


@pytest.mark.server
def test_cpu_gemma3_and_image_request(files: dict[str, Path]) -> None:
    args = ("--mmproj", str(files["gemma3"]), "--no-mmproj-offload", "-c", "1024", "-np", "1")
    with running_server(files["text"], *args) as server:
        _check(server.log_text(), files["gemma3"], "cpu", fa=True, max_tokens=None)
        uri = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
        body = {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in the image?"},
                        {"type": "image_url", "image_url": {"url": uri}},
                    ],
                }
            ],
            "max_tokens": 4,
        }
        response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] is not None
    assert response.json()["usage"]["prompt_tokens"] > 16  # the image's 4x4 pooled tokens


@pytest.mark.server
@pytest.mark.parametrize(("fa", "max_tokens"), [(False, 256), (True, None)])
def test_rpc_qwen3vl(files: dict[str, Path], rpc: str, fa: bool, max_tokens: int | None) -> None:
    args = ["--mmproj", str(files["qwen3vl"]), "--rpc", rpc, "-fa", "on" if fa else "off"]
    args += ["-c", "1024", "-np", "1"]
    if max_tokens:
        args += ["--image-max-tokens", str(max_tokens)]
    with running_server(files["text"], *args) as server:
        total = _check(server.log_text(), files["qwen3vl"], "rpc", fa=fa, max_tokens=max_tokens)
    assert total > 20  # well above 16 MiB: a prediction of 0 fails
