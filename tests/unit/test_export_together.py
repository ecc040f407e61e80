"""``export --together``'s texts: the preset's sections of models planned together load on
startup (never through ``[*]``), llama-swap gets one group that runs them at once (``swap:
false``), merged into a file it wrote before, refused beside a group or matrix of the user's;
the check of ``--models-max`` counts every member of the group."""

from __future__ import annotations

import pytest
import yaml

from moetune.errors import BadValueError
from moetune.jobs.export import (
    GROUP,
    DevicePeak,
    ServeEntry,
    check_together,
    llama_swap_text,
    preset_text,
    serve_notes,
)
from moetune.units import MIB

from support.llama_swap import load_swap
from support.preset_ini import load_preset


def _entry(name: str, peak_mib: int = 10, *, together: bool = True) -> ServeEntry:
    args = ("-m", f"/m/{name}.gguf", "-ngl", "99", "-c", "512", "-fa", "on")
    peaks = (DevicePeak(device="Vulkan0", peak_bytes=peak_mib * MIB, budget_bytes=40 * MIB),)
    return ServeEntry(name, args, False, f"planned {name}", (), peaks, load_on_startup=together)


def test_the_preset_loads_the_models_planned_together_on_startup() -> None:
    text = preset_text([_entry("a"), _entry("b")], models_max=2)
    preset = load_preset(text)
    assert preset.models["a"]["load-on-startup"] == "true"
    assert preset.models["b"]["load-on-startup"] == "true"
    assert "load-on-startup" not in preset.shared  # only the sections, never [*]
    assert "--models-max 2" in text.splitlines()[0]
    alone = load_preset(preset_text([_entry("a", together=False), _entry("b", together=False)]))
    assert all("load-on-startup" not in keys for keys in alone.models.values())


def test_llama_swap_gets_one_group_that_runs_them_at_once() -> None:
    text = llama_swap_text([_entry("a"), _entry("b")], "llama-server", group=True)
    doc = yaml.safe_load(text)
    assert doc["groups"] == {GROUP: {"swap": False, "exclusive": True, "members": ["a", "b"]}}
    assert set(load_swap(text)) == {"a", "b"}  # llama-swap reads the models as before
    # re-exported into it: the group replaced where it stands, once
    again = llama_swap_text([_entry("a"), _entry("c")], "llama-server", text, group=True)
    doc = yaml.safe_load(again)
    assert doc["groups"] == {GROUP: {"swap": False, "exclusive": True, "members": ["a", "c"]}}
    assert again.count("groups:") == 1
    # a group of the user's: moetune's would be a second way to run models at once
    mine = (
        "models:\n  x:\n    cmd: llama-server -m x.gguf --port ${PORT}\n"
        "groups:\n  g:\n    members: [x]\n"
    )
    with pytest.raises(BadValueError, match="its own groups"):
        llama_swap_text([_entry("a"), _entry("b")], "llama-server", mine, group=True)
    plain = llama_swap_text([_entry("a", together=False)], "llama-server")
    assert "groups" not in yaml.safe_load(plain)


def test_models_max_counts_every_member_of_the_group() -> None:
    fits = [_entry("a", 15), _entry("b", 20)]
    check_together("preset", fits, 2)
    check_together("llama-swap", fits, 1, group=True)
    over = [_entry("a", 25), _entry("b", 20)]
    with pytest.raises(BadValueError, match="need 25"):
        check_together("llama-swap", over, 1, group=True)
    with pytest.raises(BadValueError, match="llama-swap runs one"):
        check_together("llama-swap", fits, 2)
    note = serve_notes("preset", ["llama-server", "--models-max", "2"], 2, group=True)
    assert "load when the router starts" in note[0]
    assert GROUP in serve_notes("llama-swap", ["llama-swap"], 1, group=True)[0]
