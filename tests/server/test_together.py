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
import psutil
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


def test_run_together_on_vulkan0_converges_within_the_target(
    model_factory: ModelFactory, tmp_path: Path
) -> None:
    """``run A B --together --target-vram T`` launches both at once on Vulkan0, measures the
    device with both loaded (each process's buffer lines, added up), steps until the sum is
    within T, saves each model's profile as one set, which ``export --together`` then picks
    (measured, not PREDICTED); no llama-server is left behind."""
    a = model_factory("qwen3moe", file_name="together-a.gguf", n_layers=8)
    b = model_factory("qwen3moe", file_name="together-b.gguf", n_layers=6)
    server = vulkan_tool("llama-server")
    home = tmp_path / "home"
    done = moetune(
        "run",
        str(a),
        str(b),
        "--together",
        "--server",
        str(server),
        "--target-vram",
        f"{TARGET_MIB}M",
        "--ctx",
        "512",
        "--overhead",
        "0",
        "--fill",
        "32",
        "--repeats",
        "1",
        "--json",
        home=home,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["converged"] and doc["device_names"] == [DEVICE]
    assert doc["device_budgets"] == [TARGET_MIB * MIB]
    last = doc["launches"][-1]
    assert last["status"] == "ok"
    measured = doc["device_measured"][0]
    assert measured is not None and measured <= TARGET_MIB * MIB
    # the sum is of both processes, each measured with both loaded
    each = [m["device_measured"][0] for m in doc["models"]]
    assert all(e is not None and e > 0 for e in each) and sum(each) == measured
    assert [m["name"] for m in doc["models"]] == ["together-a", "together-b"]
    assert all(m["decode_tps"] and m["decode_tps"] > 0 for m in doc["models"])
    names = [m["profile_name"] for m in doc["models"]]
    assert all(n and n.endswith(f"-together-{doc['set_id']}") for n in names), names
    left = [p for p in psutil.process_iter(["exe"]) if p.info["exe"] == str(server)]
    assert not left, left
    # export --together picks the set's tuned profiles: measured, each loaded on startup
    exported = moetune(
        "export",
        "preset",
        str(a),
        str(b),
        "--together",
        "--ctx",
        "512",
        "--json",
        home=home,
    )
    assert exported.returncode == 0, exported.stderr
    entries = json.loads(exported.stdout)["models"]
    assert [e["tuned"] for e in entries] == [True, True]
    assert all(e["load_on_startup"] for e in entries)
    assert [e["peaks"][0]["peak_bytes"] for e in entries] == each
    assert all(e["peaks"][0]["measured"] for e in entries)
