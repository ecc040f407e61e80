"""``moetune export``: a router preset the real llama-server serves two tuned models from,
with their tuned placement and context; a llama-swap file whose every ``cmd`` llama-server
takes."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from moetune.store.tuned import ProfileStore, model_identity, profile_name

from support.factory import write_model
from support.helpers import moetune
from support.llama import bin_path, free_port, running_server
from support.profiles import make_profile

COMMON = ("-ngl", "99", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "--fit", "off")


@pytest.fixture
def tuned(tmp_path: Path) -> dict[str, Path]:
    """Two tiny models with a tuned profile each (saved as `moetune run` saves them)."""
    models = {
        "tiny-a": write_model(tmp_path / "tiny-a.gguf", "qwen3moe", n_layers=4),
        "tiny-b": write_model(tmp_path / "tiny-b.gguf", "glm4moe", n_layers=4),
    }
    placements = {
        "tiny-a": ("-c", "2048", "--n-cpu-moe", "2"),
        "tiny-b": ("-c", "1024", "-ot", r"blk\.1\.ffn_(up|down|gate)_(ch|)exps=CPU"),
    }
    server = str(bin_path("llama-server"))
    for name, path in models.items():
        identity = model_identity(path)
        command = [server, "-m", str(path), *COMMON, *placements[name]]
        profile = make_profile(command, file_name=identity.file_name, identity_path=identity.path)
        profile = profile.model_copy(update={"model": identity})
        ProfileStore().save(profile.model_copy(update={"name": profile_name(profile.key)}))
    return models


def _ask(url: str, model: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def test_the_router_serves_both_tuned_models(tuned: dict[str, Path], tmp_path: Path) -> None:
    preset = tmp_path / "models.ini"
    done = moetune("export", "preset", "--out", str(preset))
    assert done.returncode == 0, done.stderr
    text = preset.read_text()
    assert "[*]" in text and "[tiny-a]" in text and "[tiny-b]" in text
    with running_server(None, "--models-preset", str(preset), verbose=False) as router:
        for model in tuned:
            assert _ask(router.url, model)
        log = router.log_text()
    # each child was spawned with its tuned placement and context
    a, b = log.split("name=tiny-a", 1)[1], log.split("name=tiny-b", 1)[1]
    args_a = [line.split("load:", 1)[1].strip() for line in a.splitlines()[:40] if "load:" in line]
    assert args_a[args_a.index("--n-cpu-moe") + 1] == "2"
    assert "n_ctx_slot = 2048" in a and "n_ctx_slot = 1024" in b
    assert r"blk\.1\.ffn_(up|down|gate)_(ch|)exps=CPU" in b


def test_every_llama_swap_cmd_is_one_llama_server_takes(tuned: dict[str, Path]) -> None:
    done = moetune("export", "llama-swap")
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(done.stdout)
    assert set(config["models"]) == set(tuned)
    shared = config["macros"]["moetune-shared"]
    for entry in config["models"].values():
        port = free_port()
        cmd = entry["cmd"].replace("${moetune-shared}", shared).replace("${PORT}", str(port))
        argv = shlex.split(cmd)
        assert argv[0] == str(bin_path("llama-server")) and "-m" in argv
        host = ["--host", "127.0.0.1"]
        proc = subprocess.Popen(
            [*argv, *host],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            for _ in range(300):
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None, f"llama-server refused {cmd}"
                time.sleep(0.1)
            else:
                raise AssertionError(f"not healthy: {cmd}")
        finally:
            proc.kill()
            proc.wait()
