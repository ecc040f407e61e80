"""store/files.py: a write killed at any point (SIGKILL) leaves the old file or the new one,
for tuned profiles, bench results and ``export --out``'s update; deep JSON is bad JSON."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moetune.errors import BadValueError
from moetune.hub import cache
from moetune.store.bench import load_result, write_result

from support.helpers import moetune_env

SIZE = 4 << 20  # big enough that a kill often lands inside a write

# each writer alternates two versions of one file, 'a' * SIZE and 'b' * SIZE, forever;
# "ready" once the first is complete
WRITERS = {
    "profile": """
from pathlib import Path
from moetune.store.tuned import ProfileStore
from support.profiles import make_profile
store, base = ProfileStore(Path(sys.argv[1]).parent), make_profile(["/bin/llama-server"])
def write(letter):
    profile = base.model_copy(update={"name": "p", "command": ["/bin/llama-server", letter * SIZE]})
    store.save(profile)
""",
    "bench": """
from pathlib import Path
from moetune.store.bench import write_result
def write(letter):
    write_result(Path(sys.argv[1]), letter * SIZE)
""",
    "export": """
from pathlib import Path
from moetune.store.files import update_text
def write(letter):
    update_text(Path(sys.argv[1]), lambda old: letter * SIZE)
""",
}
LOOP = """
for i in itertools.count():
    write("ab"[i % 2])
    if i == 0:
        print("ready", flush=True)
"""


def _letters(path: Path, kind: str) -> str:
    """The letter the whole file is made of (or '' when it is half of one)."""
    text = path.read_text()
    if kind == "profile":
        text = json.loads(text)["command"][1]
    elif kind == "bench":
        text = text.removesuffix("\n")
    return text[0] if len(text) == SIZE and len(set(text)) == 1 else ""


@pytest.mark.parametrize("kind", WRITERS)
def test_a_killed_write_leaves_the_old_file_or_the_new_one(tmp_path: Path, kind: str) -> None:
    target = tmp_path / ("p.json" if kind == "profile" else "out.txt")
    script = f"import itertools, sys\nSIZE = {SIZE}\n{WRITERS[kind]}{LOOP}"
    tests = Path(__file__).resolve().parents[1]
    env = moetune_env()
    env["PYTHONPATH"] = f"{tests}:{env.get('PYTHONPATH', '')}"
    rng = random.Random(20)
    for _ in range(12):
        child = subprocess.Popen(
            [sys.executable, "-c", script, str(target)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert _letters(target, kind) in ("a", "b"), f"{kind}: half a file after SIGKILL"


def test_json_nested_too_deeply_is_bad_json(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    result = tmp_path / "result.json"
    result.write_text(deep)
    with pytest.raises(BadValueError, match="not JSON: nested too deeply"):
        load_result(result, 1)
    listing = cache.hub_cache_dir() / "listings" / cache.repo_folder("u/m") / ("0" * 40 + ".json")
    listing.parent.mkdir(parents=True)
    listing.write_text(deep)
    assert cache.load_listing("u/m", "0" * 40) is None


def test_a_saved_file_through_a_link_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "results" / "r.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "r.json"
    link.symlink_to(real)
    assert write_result(link, "{}") == link
    assert link.is_symlink() and real.read_text() == "{}\n"
