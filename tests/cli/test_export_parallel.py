"""``--parallel N`` in exports: a profile tuned with -np N (run --parallel N) is picked by it and
exported with its slots (the preset's ``parallel`` key, llama-swap's ``-np``); without a tuned
profile, the plan for N slots."""

from __future__ import annotations

from pathlib import Path

from moetune.store.tuned import ProfileStore, TuneKey, profile_name

from support.factory import write_model
from support.helpers import moetune
from support.llama_swap import load_swap
from support.preset_ini import load_preset
from support.profiles import make_profile

SERVER = "/usr/bin/llama-server"


def _tuned_with_slots() -> tuple[str, str]:
    """Two profiles of one model: one tuned with -np 4, one without; their names."""
    auto = make_profile([SERVER, "-m", "/models/m.gguf", "--n-cpu-moe", "3"])
    settings = auto.settings.model_copy(update={"parallel": 4})
    key = TuneKey(model=auto.model, gpu=auto.gpu, llama_cpp=auto.llama_cpp, settings=settings)
    four = auto.model_copy(
        update={
            "name": profile_name(key),
            "settings": settings,
            "tuned_at": "2025-02-01T00:00:00+00:00",
            "command": [SERVER, "-m", "/models/m.gguf", "--n-cpu-moe", "5", "-np", "4"],
        }
    )
    ProfileStore().save(auto)
    ProfileStore().save(four)
    return auto.name, four.name


def test_a_profile_of_n_slots_is_its_own_and_picked_by_parallel(tmp_path: Path) -> None:
    auto, four = _tuned_with_slots()
    assert four == f"{auto}-np4"
    done = moetune("export", "preset", "--parallel", "4", "--out", str(tmp_path / "p.ini"))
    assert done.returncode == 0, done.stderr
    (section,) = load_preset((tmp_path / "p.ini").read_text()).models.values()
    assert section["parallel"] == "4" and section["n-cpu-moe"] == "5"
    swap = moetune("export", "llama-swap", "--parallel", "4", "--out", str(tmp_path / "s.yaml"))
    assert swap.returncode == 0, swap.stderr
    (argv,) = load_swap((tmp_path / "s.yaml").read_text()).values()
    assert argv[argv.index("-np") + 1] == "4" and argv[argv.index("--n-cpu-moe") + 1] == "5"
    # both match without --parallel: the newest, the other named with what tells them apart
    both = moetune("export", "preset")
    said = " ".join(both.stderr.split())
    assert f"{auto} (--parallel none) also" in said, said
    none = moetune("export", "preset", "--parallel", "2", "--require-tuned")
    assert none.returncode != 0 and "no tuned profile" in none.stderr


def test_without_a_profile_the_plan_is_for_n_slots(tmp_path: Path) -> None:
    model = write_model(tmp_path / "plain.gguf", "qwen3moe", n_layers=4)
    out = tmp_path / "p.ini"
    done = moetune(
        "export", "preset", str(model), "--vram", "4G", "--parallel", "3", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    (section,) = load_preset(out.read_text()).models.values()
    assert section["parallel"] == "3"
    plain = moetune("export", "llama-swap", str(model), "--vram", "4G")
    assert plain.returncode == 0, plain.stderr
    assert "-np" not in plain.stdout
