"""``moetune export``: a router preset the real llama-server serves two tuned models from,
with their tuned placement and context, and lists models named with INI and YAML syntax as
exactly the sections moetune meant; a llama-swap file whose every ``cmd`` llama-server takes."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from moetune.store.tuned import ProfileStore, model_identity, profile_name

from support.factory import write_model
from support.helpers import moetune
from support.llama import bin_path, free_port, running_server
from support.llama_swap import load_swap
from support.preset_ini import load_preset
from support.profiles import make_profile

COMMON = ("-ngl", "99", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "--fit", "off", "--jinja")


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
    for name, path in models.items():
        save_tuned(path, *placements[name])
    return models


def save_tuned(path: Path, *placement: str) -> None:
    """A tuned profile of the model at ``path``, saved as `moetune run` saves one."""
    identity = model_identity(path)
    command = [str(bin_path("llama-server")), "-m", str(path), *COMMON, *placement]
    profile = make_profile(command, file_name=identity.file_name, identity_path=identity.path)
    profile = profile.model_copy(update={"model": identity})
    ProfileStore().save(profile.model_copy(update={"name": profile_name(profile.key)}))


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
    # they share -ngl, -fa, the cache types and --fit too, but those stay in each section
    assert load_preset(text).shared == {"jinja": "true"}
    assert "[tiny-a]" in text and "[tiny-b]" in text
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


# model files named with INI and YAML syntax: the id the router lists for each (the tag
# after the last ':' canonical, as moetune writes the section)
HOSTILE = {
    "a=b [x": "a=b [x",
    "ü模型 'q' \"d\"": "ü模型 'q' \"d\"",
    "- &x: *y {z} !t": "- &x: *Y {Z} !T",
    "%p `t` $HOME | > ?": "%p `t` $HOME | > ?",
}


def test_the_router_lists_exactly_the_hostile_sections_moetune_meant(tmp_path: Path) -> None:
    folder = tmp_path / "models [x] = y"
    folder.mkdir()
    models = {
        name: write_model(folder / f"{name}.gguf", "qwen3moe", n_layers=4) for name in HOSTILE
    }
    for path in models.values():
        save_tuned(path, "-c", "1024", "--n-cpu-moe", "1")
    preset = tmp_path / "models.ini"
    hand = write_model(tmp_path / "hand.gguf", "qwen3moe", n_layers=4)
    preset.write_text(f"; mine\n[hand-written]\nmodel = {hand}\n")
    done = moetune("export", "preset", "--out", str(preset))
    assert done.returncode == 0, done.stderr
    meant = {HOSTILE[name] for name in HOSTILE} | {"hand-written"}
    assert set(load_preset(preset.read_text()).models) == meant
    with running_server(None, "--models-preset", str(preset), verbose=False) as router:
        listed = httpx.get(f"{router.url}/models", timeout=30).json()["data"]
        assert _ask(router.url, "- &x: *Y {Z} !T")
    args = {m["id"]: m["status"]["args"] for m in listed if m["source"] == "preset"}
    assert set(args) == meant
    for name, path in models.items():
        got = args[HOSTILE[name]]
        assert got[got.index("--model") + 1] == str(path)
        assert got[got.index("--n-cpu-moe") + 1] == "1"


def test_every_llama_swap_cmd_is_one_llama_server_takes(tuned: dict[str, Path]) -> None:
    done = moetune("export", "llama-swap")
    assert done.returncode == 0, done.stderr
    assert "${moetune-shared}" in done.stdout
    commands = load_swap(done.stdout)  # as llama-swap reads each cmd
    assert set(commands) == set(tuned)
    for argv in commands.values():
        port = free_port()
        argv[argv.index("--port") + 1] = str(port)
        cmd = shlex.join(argv)
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


def test_the_tests_preset_reader_reads_as_the_router_does(tmp_path: Path) -> None:
    """tests/support/preset_ini.py, which the unit tests read presets with, against the real
    router on a hand-written file of the grammar's corners."""
    model = write_model(tmp_path / "m [x] = y.gguf", "qwen3moe", n_layers=4)
    text = (
        "; corners\nversion = 1\n"
        f"[ spaced ]  ; a comment after the header\nmodel = {model}   ; and after a value\n"
        f"[a:ud-q4_k_xl]\r\nmodel = {model}\r\nctx-size = 512\r"
        f"[dup]\nmodel = {model}\nctx-size = 1\n[dup]\nmodel = {model}\n"
        f"[x;y#z=w [v]\nmodel={model}\nctx-size=2048#c\n\t \n"
        f"[ü模型 'q' \"d\"]\nmodel = {model}\nctx-size = 256\nctx-size = 768\n"
    )
    preset = tmp_path / "corners.ini"
    preset.write_bytes(text.encode())
    ours = load_preset(text).models
    assert set(ours) == {"spaced ", "a:Q4_K_XL", "dup", "x;y#z=w [v", "ü模型 'q' \"d\""}
    with running_server(None, "--models-preset", str(preset), verbose=False) as router:
        listed = httpx.get(f"{router.url}/models", timeout=30).json()["data"]
    args = {m["id"]: m["status"]["args"] for m in listed if m["source"] == "preset"}
    assert set(args) == set(ours)
    for name, keys in ours.items():
        got = args[name]
        assert got[got.index("--model") + 1] == keys["model"] == str(model)
        ctx = got[got.index("--ctx-size") + 1] if "--ctx-size" in got else None
        assert ctx == keys.get("ctx-size"), name
