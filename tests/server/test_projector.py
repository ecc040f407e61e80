"""The projector (mmproj) memory model: header facts, and clip's own log lines.

llama-server is started at ``-lv 4`` with a tiny text model and ``--mmproj``: on the CPU
(``--no-mmproj-offload``) and on a loopback ggml-rpc-server (``--rpc``: clip takes the first
GPU-type device, which an RPC device is).  clip logs ``load_hparams: model size`` and one
``reserve_compute_meta: <BUFT> compute buffer size`` line per buffer; moetune must match them.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import httpx
import pytest

from moetune.core.projector import projector_compute
from moetune.jobs.loader import load_projector
from moetune.units import MIB

from support.extras import projector_files
from support.factory import ModelFactory
from support.llama import running_server
from support.projector_factory import png_bytes

_COMPUTE = re.compile(r"reserve_compute_meta:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
_MODEL = re.compile(r"load_hparams: model size:\s+([\d.]+) MiB")


@pytest.fixture(scope="module")
def files(model_factory: ModelFactory) -> dict[str, Path]:
    return projector_files(model_factory)


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


@pytest.mark.parametrize(("fa", "max_tokens"), [(False, 256), (True, None)])
def test_rpc_qwen3vl(files: dict[str, Path], rpc: str, fa: bool, max_tokens: int | None) -> None:
    args = ["--mmproj", str(files["qwen3vl"]), "--rpc", rpc, "-fa", "on" if fa else "off"]
    args += ["-c", "1024", "-np", "1"]
    if max_tokens:
        args += ["--image-max-tokens", str(max_tokens)]
    with running_server(files["text"], *args) as server:
        total = _check(server.log_text(), files["qwen3vl"], "rpc", fa=fa, max_tokens=max_tokens)
    assert total > 20  # well above 16 MiB: a prediction of 0 fails
