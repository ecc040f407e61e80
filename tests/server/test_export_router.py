"""``export preset --json``'s ``router_command`` on the rig: two tiny models each tuned alone
by ``run`` to fill one RPC device, served by the real router started with that command line,
asked for A, then B, then A: each answers, and its ``/models`` never shows both loaded (a
second process on one RPC device would wait for ever: ggml-rpc-server serves one client
process at a time)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx

from support.factory import write_model
from support.helpers import moetune
from support.llama import running_server

RUNNING = {"loaded", "loading", "sleeping"}  # server_model_meta::is_running, build 11434


def _tune(model: Path, rpc: str) -> None:
    args = ["run", str(model), "--target-vram", "40M", "--ctx", "1024", "--overhead", "0"]
    done = moetune(*args, "--json", "--", "--rpc", rpc)
    assert done.returncode == 0, done.stderr


def _ask(url: str, model: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=180)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def _running(url: str) -> set[str]:
    listed = httpx.get(f"{url}/models", timeout=10).json()["data"]
    return {m["id"] for m in listed if m["status"]["value"] in RUNNING}


class _Watch:
    """Polls the router's ``/models`` until stopped: every model running at each poll."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: list[set[str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self.stop.is_set():
            try:
                self.seen.append(_running(self.url))
            except httpx.HTTPError:
                continue
            self.stop.wait(0.05)

    def __enter__(self) -> _Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def test_the_router_command_keeps_one_model_of_an_rpc_device_loaded(
    tmp_path: Path, rpc: str
) -> None:
    for name in ("tiny-a", "tiny-b"):
        _tune(write_model(tmp_path / f"{name}.gguf", "qwen3moe", n_layers=8), rpc)
    preset = tmp_path / "models.ini"
    done = moetune("export", "preset", "--out", str(preset), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    command = doc["router_command"]
    assert command[1:] == ["--models-preset", str(preset), "--models-max", "1"]
    assert Path(command[0]).name == "llama-server"
    assert {m["name"] for m in doc["models"]} == {"tiny-a", "tiny-b"}
    assert all(m["peaks"][0]["device"] == f"RPC0 {rpc}" for m in doc["models"])
    # two models at once on one RPC device: refused, with the reason
    refused = moetune("export", "preset", "--models-max", "2")
    assert refused.returncode != 0 and "serves one process at a time" in refused.stderr
    with (
        running_server(None, *command[1:], verbose=False, binary=Path(command[0])) as router,
        _Watch(router.url) as watch,
    ):
        for model in ("tiny-a", "tiny-b", "tiny-a"):
            assert _ask(router.url, model)
            assert _running(router.url) == {model}  # the other was unloaded first
    both = [running for running in watch.seen if len(running) > 1]
    assert not both, both
    assert {"tiny-a"} in watch.seen and {"tiny-b"} in watch.seen
