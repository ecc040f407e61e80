"""Models planned together on the Vulkan device (Mesa's lavapipe, support/vulkan.py: several
processes hold buffers on it at once): ``export preset A B --together --target-vram T``
writes both with ``load-on-startup`` and a ``router_command`` whose ``--models-max`` is 2;
llama.cpp's own dry run (llama-fit-params) of each section's arguments adds up within T on
Vulkan0; the real router started with that command loads both before any request, and both
answer."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from moetune.units import MIB

from support.factory import ModelFactory
from support.fitrig import project
from support.helpers import moetune
from support.llama import running_server
from support.vulkan import DEVICE, MARKS, VISIBLE, vulkan_tool

pytestmark = MARKS

TARGET_MIB = 40  # each alone with every expert on Vulkan0 is above half of it


@pytest.fixture(autouse=True)
def _lavapipe(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in VISIBLE.items():
        monkeypatch.setenv(name, value)


def _loaded(url: str) -> dict[str, str]:
    listed = httpx.get(f"{url}/models", timeout=10).json()["data"]
    return {m["id"]: m["status"]["value"] for m in listed}


def _ask(url: str, model: str) -> str:
    body = {"model": model, "prompt": "hello", "max_tokens": 4}
    reply = httpx.post(f"{url}/v1/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["text"])


def _alone_peak(model: Path, home: Path) -> int:
    done = moetune(
        "plan",
        str(model),
        "--server",
        str(vulkan_tool("llama-server")),
        "--target-vram",
        f"{TARGET_MIB}M",
        "--ctx",
        "512",
        "--no-verify",
        "--json",
        home=home / "home",
    )
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["gpu_bytes"])


def test_export_together_on_vulkan0_loads_both_within_the_target(
    model_factory: ModelFactory, tmp_path: Path
) -> None:
    a = model_factory("qwen3moe", file_name="together-a.gguf", n_layers=8)
    b = model_factory("qwen3moe", file_name="together-b.gguf", n_layers=6)
    preset = tmp_path / "models.ini"
    done = moetune(
        "export",
        "preset",
        str(a),
        str(b),
        "--together",
        "--target-vram",
        f"{TARGET_MIB}M",
        "--ctx",
        "512",
        "--out",
        str(preset),
        "--json",
        home=tmp_path / "home",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    command = doc["router_command"]
    assert command[1:3] == ["--models-preset", str(preset)]
    assert command[3] == "--models-max" and int(command[4]) >= 2
    assert doc["models_max"] == int(command[4])
    names = [m["name"] for m in doc["models"]]
    assert names == ["together-a", "together-b"]
    assert all(m["load_on_startup"] for m in doc["models"])
    text = preset.read_text()
    for name in names:
        section = text.split(f"[{name}]", 1)[1].split("\n[", 1)[0]
        assert "\nload-on-startup = true\n" in section, section
    assert "load-on-startup" not in text.split("[together-a]", 1)[0]  # not in [*]
    # llama.cpp's own dry run of each section's arguments, added up on Vulkan0
    fit = vulkan_tool("llama-fit-params")
    projected = [
        project(Path(m), list(e["args"]), fit) for m, e in zip((a, b), doc["models"], strict=True)
    ]
    each = [p[DEVICE].total_mib for p in projected]
    assert sum(each) <= TARGET_MIB, each
    predicted = [e["peaks"][0]["peak_bytes"] for e in doc["models"]]
    assert sum(predicted) <= TARGET_MIB * MIB
    # alone, each planned for the whole target: together they would not fit
    alone = [_alone_peak(m, tmp_path) for m in (a, b)]
    assert sum(alone) > TARGET_MIB * MIB, alone
    with running_server(
        None, *command[1:], verbose=False, binary=Path(command[0]), timeout=300
    ) as router:
        deadline = time.monotonic() + 300
        states = _loaded(router.url)
        while any(states.get(n) != "loaded" for n in names) and time.monotonic() < deadline:
            assert not any(states.get(n) in ("failed", "unloaded") for n in names), states
            time.sleep(0.2)
            states = _loaded(router.url)
        assert all(states.get(n) == "loaded" for n in names), states  # before any request
        for name in names:
            assert _ask(router.url, name) is not None
        assert all(s == "loaded" for n, s in _loaded(router.url).items() if n in names)
