"""``moetune export``: a router preset the real llama-server serves two tuned models from,
with their tuned placement and context; a llama-swap file whose every ``cmd`` llama-server
takes; the plan as a marked fallback; re-exporting keeps what was written by hand."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from moetune.errors import ExitCode
from moetune.jobs.export import ServeEntry, llama_swap_text, preset_keys, preset_text
from moetune.store.tuned import ProfileStore, model_identity, profile_name

from factory import write_model
from helpers import moetune
from llama import bin_path, free_port, running_server
from test_alias import make_profile

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


@pytest.mark.server
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


@pytest.mark.server
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


def test_a_model_without_a_profile_is_exported_from_its_plan(tmp_path: Path) -> None:
    model = write_model(tmp_path / "plain.gguf", "qwen3moe", n_layers=4)
    done = moetune("export", "preset", str(model), "--vram", "4G")
    assert done.returncode == 0, done.stderr
    assert "PREDICTED" in done.stdout and f"model = {model}" in done.stdout
    assert "predicted, not measured" in done.stderr
    refused = moetune("export", "preset", str(model), "--vram", "4G", "--require-tuned")
    assert refused.returncode == ExitCode.FILE_NOT_FOUND


def test_reexport_keeps_what_was_written_by_hand() -> None:
    a = ServeEntry(
        "a", ("-m", "/m/a.gguf", "-ngl", "99", "-c", "4096", "--n-cpu-moe", "3"), True, "tuned"
    )
    b = ServeEntry(
        "user/b:Q4_K_M", ("-hf", "user/b:Q4_K_M", "-ngl", "99", "-c", "4096"), False, "plan"
    )
    first = preset_text([a, b])
    assert "hf-repo = user/b:Q4_K_M" in first and "n-cpu-moe = 3" in first
    assert "[*]" in first and "n-gpu-layers = 99" in first.split("[a]")[0]
    edited = first.replace("[a]\n", "[a]\n").replace(
        "; --- below this line: your own, kept on re-export ---\n\n[user/b",
        "; --- below this line: your own, kept on re-export ---\njinja = true\n\n[user/b",
        1,
    )
    edited += "\n[mine]\nmodel = /m/mine.gguf\n"
    again = preset_text([a._replace(args=(*a.args[:-1], "5")), b], edited)
    assert "n-cpu-moe = 5" in again and "n-cpu-moe = 3" not in again
    assert "jinja = true" in again and "[mine]\nmodel = /m/mine.gguf" in again
    assert again.count("[a]") == 1 and again.count("[*]") == 1
    swap = llama_swap_text([a, b], "/bin/llama-server")
    mine = "  my-model:\n    cmd: /bin/llama-server --port ${PORT} -m /m/mine.gguf\n"
    again_swap = llama_swap_text(
        [a._replace(args=(*a.args[:-1], "5")), b], "/bin/llama-server", swap + mine
    )
    parsed = yaml.safe_load(again_swap)
    assert set(parsed["models"]) == {"a", "user/b:Q4_K_M", "my-model"}
    assert "--n-cpu-moe 5" in parsed["models"]["a"]["cmd"]


def test_preset_keys_are_long_names() -> None:
    keys = preset_keys(
        [
            "-m",
            "/m.gguf",
            "-ngl",
            "99",
            "-fa",
            "on",
            "-ot",
            "x=CPU",
            "--no-mmproj-offload",
            "-ts",
            "3,1",
            "-ngld",
            "-1",
        ]
    )
    assert keys == {
        "model": "/m.gguf",
        "n-gpu-layers": "99",
        "flash-attn": "on",
        "override-tensor": "x=CPU",
        "no-mmproj-offload": "true",
        "tensor-split": "3,1",
        "spec-draft-ngl": "-1",
    }
    assert json.dumps(keys)
