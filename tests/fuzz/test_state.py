"""Fuzz: stored state under $MOETUNE_HOME broken as a disk, an editor or a crash breaks it:
tuned profiles (profiles/), hardware profiles of one's own (hardware/) and saved bench
results (bench/), through profiles list/show, alias, export, plan and report; seeded and
bounded, in-process.

Each case writes a valid profile beside the broken file, so what reads the folder has
something good to find; besides what support/fuzz.py checks of every case, no file in
$MOETUNE_HOME is changed or lost by a command that only reads.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from moetune.report import payloads, to_json
from moetune.store.tuned import TunedFigures, new_profile

from support.bench import bench_result
from support.factory import ModelFactory
from support.fuzz import Case, Fuzz
from support.mutate import deep, mutate_json_doc, mutate_text, toml_text
from support.profiles import a_key

SEED = 21
VRAM = ("--vram", "24G")
PROFILE_TARGETS = (
    "command",
    "name",
    "settings.command",
    "settings.extra_args",
    "settings.n_ctx",
    "settings.target_bytes",
    "placement.n_cpu_moe",
    "placement.override_tensor",
    "placement.tensor_split",
    "model.file_name",
    "model.header_sha256",
    "schema_version",
    "measured",
)


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: a file's bytes, else what it is (a link's target)."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            found[key] = f"link to {path.readlink()}"
        elif path.is_dir():
            found[key] = "folder"
        elif path.is_file():
            found[key] = path.read_bytes()
        else:
            found[key] = "special"
    return found


def unchanged(root: Path, before: dict[str, bytes | str]) -> Callable[[], list[str]]:
    def check() -> list[str]:
        after = snapshot(root)
        return [
            f"{name} was changed or removed" for name in before if after.get(name) != before[name]
        ]

    return check


def break_file(rng: random.Random, path: Path, good_doc: object, targets: tuple[str, ...]) -> str:
    """Write a broken version of ``good_doc`` at ``path``: its JSON mutated, its bytes, or
    something that is not a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    choice = rng.random()
    if choice < 0.5:
        text, what = mutate_json_doc(rng, good_doc, targets)
        path.write_text(text, encoding="utf-8")
        return what
    if choice < 0.85:
        data, what = mutate_text(rng, json.dumps(good_doc, indent=2))
        path.write_bytes(data)
        return what
    return break_path(rng, path)


def break_path(rng: random.Random, path: Path, kind: str = "") -> str:
    """A folder, a symlink loop, a dangling link or (only when asked: reading one may wait
    for ever) a FIFO where the file should be."""
    kind = kind or rng.choice(("folder", "loop", "loop", "dangling"))
    if kind == "folder":
        path.mkdir()
        (path / "x.json").write_text("{}")
    elif kind == "loop":
        other = path.with_name("loop-" + path.name)
        other.symlink_to(path.name)
        path.symlink_to(other.name)
    elif kind == "dangling":
        path.symlink_to("nowhere.json")
    else:
        os.mkfifo(path)
    return {"folder": "a folder", "loop": "a symlink loop", "dangling": "a dangling link"}.get(
        kind, "a FIFO"
    ) + f" as {path.name}"


@pytest.fixture
def home(_moetune_home: Path) -> Path:
    return _moetune_home


def clear(home: Path) -> None:
    for child in home.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def test_tuned_profiles(model_factory: ModelFactory, home: Path) -> None:
    """400 broken tuned profiles beside a good one, through every command that reads them."""
    rng = random.Random(SEED)
    fuzz = Fuzz(limit_s=2.0, max_hangs=8)  # 4 of the first 6 cases: a FIFO
    model = model_factory("qwen3moe")
    other = model_factory("qwen3")
    measured = TunedFigures(vram_bytes=1 << 30, ttft_s=0.2, decode_tps=50.0, prompt_tps=800.0)
    command = ["/usr/bin/llama-server", "-m", str(model), "--n-cpu-moe", "2"]
    good = json.loads(new_profile(a_key(model), 2, measured, command).model_dump_json())
    kept = new_profile(a_key(other), 0, measured, ["/usr/bin/llama-server", "-m", str(other)])
    for i in range(400):
        clear(home)
        folder = home / "profiles"
        folder.mkdir()
        (folder / f"{kept.name}.json").write_text(kept.model_dump_json(indent=2))
        name = good["name"] if rng.random() < 0.8 else "zz-broken"
        path = folder / f"{name}.json"
        if i in (0, 1, 3, 5):  # profiles list, profiles show, alias, export preset
            what = break_path(rng, path, "fifo")
        elif i < 9 + 9 * len(KNOWN):
            what, text = KNOWN[(i - 9) // 9](good)
            path.write_text(text)
        else:
            what = break_file(rng, path, good, PROFILE_TARGETS)
        before = snapshot(home)
        m = str(model)
        args = (
            ("profiles", "list", "--json"),
            ("profiles", "show", name[:12], "--json"),
            ("profiles", "show", kept.name, "--json"),
            ("alias", "fz", m, *VRAM),
            ("alias", "fz", m, "--require-tuned"),
            ("export", "preset"),
            ("export", "llama-swap"),
            ("export", "preset", m, *VRAM),
            ("plan", m, *VRAM, "--no-verify", "--json"),
        )[i % 9]
        intact = args[:2] == ("profiles", "list") or kept.name in args
        case = Case(args, f"profiles/{name}.json: {what}", 1, succeed=intact)
        fuzz.run(case, unchanged(home, before))
    fuzz.check(min_runs=400)


def _with(doc: dict[str, Any], path: tuple[str, ...], value: object) -> str:
    doc = json.loads(json.dumps(doc))
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return json.dumps(doc, indent=2)


# issue 20's tuned profiles, each through every command
KNOWN: tuple[Callable[[dict[str, Any]], tuple[str, str]], ...] = (
    lambda d: ("command = []", _with(d, ("command",), [])),
    lambda d: ("settings.command = []", _with(d, ("settings", "command"), [])),
    lambda d: ("100,000 levels of arrays", deep(100_000)),
    lambda d: (
        "command nested 100,000 deep",
        json.dumps(d).replace(
            '"command": [', '"command": ' + "[" * 100_000 + "]" * 99_999 + ", [", 1
        ),
    ),
)


HARDWARE = {
    "name": "Test GPU",
    "aliases": ["tg"],
    "vram": "12G",
    "memory_bandwidth_gb_s": 360,
    "pcie_gen": 4,
    "pcie_lanes": 16,
}


def test_hardware_profiles(model_factory: ModelFactory, home: Path) -> None:
    """150 broken hardware profiles of one's own, through profiles list/show and plan --gpu."""
    rng = random.Random(SEED + 1)
    fuzz = Fuzz(limit_s=2.0, max_hangs=5)  # 2 cases: a FIFO
    model = str(model_factory("qwen3moe"))
    for i in range(150):
        clear(home)
        path = home / "hardware" / "mygpu.toml"
        path.parent.mkdir()
        choice = rng.random()
        if i in (0, 2):  # profiles list, plan --gpu mygpu
            what = break_path(rng, path, "fifo")
        elif choice < 0.5:
            text, what = mutate_json_doc(rng, HARDWARE)
            try:
                path.write_text(toml_text(json.loads(text)))
            except (TypeError, ValueError, RecursionError):
                path.write_text(text)  # not a flat table: the JSON text itself
        elif choice < 0.85:
            data, what = mutate_text(rng, toml_text(HARDWARE))
            path.write_bytes(data)
        else:
            what = break_path(rng, path)
        before = snapshot(home)
        args = (
            ("profiles", "list", "--json"),
            ("profiles", "show", "mygpu", "--json"),
            ("plan", model, "--gpu", "mygpu", "--no-verify", "--json"),
            ("plan", model, "--gpu", "rtx4090", "--no-verify", "--json"),
            ("plan", model, "--gpu", str(path), "--no-verify", "--json"),
        )[i % 5]
        intact = args[:2] == ("profiles", "list") or "rtx4090" in args
        case = Case(args, f"hardware/mygpu.toml: {what}", 1, succeed=intact)
        fuzz.run(case, unchanged(home, before))
    fuzz.check(min_runs=150)


BENCH_TARGETS = ("kind", "schema_version", "results", "configs", "depths", "verdicts", "model")


def test_bench_results(home: Path) -> None:
    """150 broken saved bench results through report."""
    rng = random.Random(SEED + 2)
    fuzz = Fuzz(limit_s=2.0)
    good = json.loads(to_json(payloads.bench_payload(bench_result())))
    for i in range(150):
        clear(home)
        path = home / "bench" / "20250102T030405-m.json"
        what = break_file(rng, path, good, BENCH_TARGETS)
        before = snapshot(home)
        args = ("report", str(path), "--json") if i % 3 else ("report", str(path))
        fuzz.run(Case(args, f"bench/{path.name}: {what}", 1), unchanged(home, before))
    fuzz.check(min_runs=150)
