"""Fuzz: hostile speed files through `moetune calibrate FILE` (issue 38), seeded, in-process.

llama-bench's ``-o json`` and ``-o jsonl`` rows of the shipped example model with a field set
to a value no measurement has (NaN, Infinity, negative, past llama.cpp's limits, a 400-digit
integer, the wrong type, nested 100,000 deep), a key given twice, the text cut short or
broken, binary garbage, llama-bench's other formats (csv, md, sql), 10,000 rows, and files
that are no text file at all (a sparse 17 GB GGUF or text, a FIFO, a folder). Every import
ends in exit 0 saying how many rows it refused, or in one error line with a named code; a
row known to be past the bounds is refused. Imports go on into one ``MOETUNE_HOME``, and
every few cases `plan EXAMPLE --vram 24G` must answer as before: exit 0, no speed file
skipped, nothing stored that is not finite.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moetune.jobs.calibrate import MAX_TEXT_BYTES
from moetune.llamacpp.bench_results import array_items

from support.fuzz import Case, Fuzz
from support.helpers import EXAMPLE_QWEN, ROOT
from support.mutate import deep, mutate_json_doc, mutate_text
from support.speed_fit import good_rows

SEED = 38
CASES = 150
PLAN_EVERY = 10  # a plan after this many imports (each import adds to the same store)
ROWS_JSON = ROOT / "tests" / "data" / "llama_bench" / "readme_rtx4080_qwen2.5_7b.json"
PLAN = ("plan", str(EXAMPLE_QWEN), "--vram", "24G")

# values no field of a real measurement has, or has only at the edge
HOSTILE: tuple[object, ...] = (
    math.nan,
    math.inf,
    -math.inf,
    -1,
    0,
    2**31,
    2**63,
    2**64,
    10**400,
    1e308,
    -1e308,
    5e-324,
    "",
    "nan",
    "1e999",
    "١٢",
    None,
    True,
    [],
    {},
    [math.nan],
    [10**400],
    [1e308, -1.0],
    "nan/1",
    "inf/0",
    "-1/2",
    "1/" * 5000 + "1",
    "a" * 10_000,
    "\x00",
)
# (field, value) a row is refused for: past records/speed.py's bounds or of the wrong type
REFUSED: tuple[tuple[str, object], ...] = (
    ("avg_ts", math.nan),
    ("avg_ts", math.inf),
    ("avg_ts", -1.0),
    ("avg_ts", 1e308),
    ("avg_ts", 10**400),
    ("avg_ts", "90"),
    ("avg_ts", None),
    ("stddev_ts", 10**400),
    ("stddev_ts", math.nan),
    ("samples_ts", [math.nan]),
    ("samples_ts", [math.inf, 1.0]),
    ("samples_ts", "90"),
    ("n_cpu_moe", 2**63),
    ("n_cpu_moe", -1),
    ("n_prompt", 2**63),
    ("n_prompt", -1),
    ("n_gen", 2**64),
    ("n_ubatch", 0),
    ("n_batch", "512"),
    ("n_threads", 10**6),
    ("n_threads", 0),
    ("n_gpu_layers", 10**9),
    ("n_depth", 2**40),
    ("tensor_split", "nan/1"),
    ("tensor_split", "inf/1"),
    ("flash_attn", 7),
    ("model_filename", ""),
    ("model_filename", 12),
)


def as_text(rows: list[Any], jsonl: bool) -> str:
    """llama-bench's ``-o jsonl`` (one object a line) or ``-o json`` (an indented array)."""
    if jsonl:
        return "".join(json.dumps(row) + "\n" for row in rows)
    return json.dumps(rows, indent=2)


def other_format(rng: random.Random, rows: list[dict[str, Any]]) -> tuple[bytes, str]:
    """llama-bench's ``-o csv``, ``-o md`` or ``-o sql`` of the rows (not read: refused)."""
    kind = rng.choice(("csv", "md", "sql"))
    fields = list(rows[0])
    if kind == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fields)
        writer.writeheader()
        writer.writerows({k: json.dumps(v) for k, v in row.items()} for row in rows)
        return out.getvalue().encode(), "llama-bench -o csv"
    if kind == "md":
        head = "| model | size | params | backend | ngl | n_cpu_moe | test | t/s |\n"
        line = "| --- | ---: | ---: | --- | --: | --: | --: | ---: |\n"
        body = "".join(
            f"| qwen3moe 30B.A3B Q4_K - Medium | 17.28 GiB | 30.53 B | CUDA | 99 | "
            f"{r['n_cpu_moe']} | pp{r['n_prompt']} | {r['avg_ts']:.2f} ± 1.00 |\n"
            for r in rows
        )
        return (head + line + body).encode(), "llama-bench -o md"
    create = "CREATE TABLE IF NOT EXISTS llama_bench (\n" + ",\n".join(
        f"  {f} TEXT" for f in fields
    )
    inserts = "".join(
        f"INSERT INTO llama_bench ({', '.join(fields)}) VALUES "
        f"({', '.join(repr(json.dumps(v)) for v in row.values())});\n"
        for row in rows
    )
    return (create + "\n);\n" + inserts).encode(), "llama-bench -o sql"


def duplicate_key(rng: random.Random, rows: list[dict[str, Any]]) -> tuple[bytes, str]:
    """The ``-o jsonl`` text with a row's field given twice, the second time past the bounds
    (JSON keeps the last: the row is refused)."""
    index = rng.randrange(len(rows))
    field, value = rng.choice(REFUSED)
    lines = as_text(rows, jsonl=True).splitlines()
    lines[index] = lines[index][:-1] + f", {json.dumps(field)}: {json.dumps(value)}}}"
    what = f"row {index + 1}: {field} given twice, last {json.dumps(value)[:40]}"
    return "\n".join(lines).encode(), what


def generate(rng: random.Random, rows: list[dict[str, Any]]) -> tuple[bytes, str, bool]:
    """One hostile file: its bytes, what was done, whether a row must be refused (or the file
    with it)."""
    jsonl = rng.random() < 0.5
    form = "jsonl" if jsonl else "json"
    choice = rng.random()
    if choice < 0.25:  # a row's field past the bounds: it must be refused
        index = rng.randrange(len(rows))
        field, value = rng.choice(REFUSED)
        changed = [dict(r) for r in rows]
        changed[index][field] = value
        what = f"{form}: row {index + 1} {field} = {json.dumps(value)[:40]}"
        return as_text(changed, jsonl).encode(), what, True
    if choice < 0.45:  # any field set to a hostile value, or a field deleted
        index = rng.randrange(len(rows))
        changed = [dict(r) for r in rows]
        field = rng.choice([*changed[index], "n_cpu_moe", "n_depth", "samples_ts"])
        if rng.random() < 0.15:
            changed[index].pop(field, None)
            what = f"{form}: row {index + 1} without {field}"
        else:
            value = rng.choice(HOSTILE)
            changed[index][field] = value
            what = f"{form}: row {index + 1} {field} = {json.dumps(value)[:40]}"
        return as_text(changed, jsonl).encode(), what, False
    if choice < 0.55:
        text, what = mutate_json_doc(rng, rows)
        return text.encode(), f"json: {what[:80]}", False
    if choice < 0.65:
        data, what = duplicate_key(rng, rows)
        return data, f"jsonl: {what}", True
    if choice < 0.8:
        data, what = mutate_text(rng, as_text(rows, jsonl))
        return data, f"{form}: {what}", False
    if choice < 0.87:
        size = rng.choice((1, 16, 4096, 100_000))
        prefix = rng.choice((b"", b"[", b"{", b'[{"avg_ts": '))
        return prefix + rng.randbytes(size), f"{prefix!r} and {size} random bytes", False
    if choice < 0.93:
        data, what = other_format(rng, rows)
        return data, what, True
    index = rng.randrange(len(rows))
    field = rng.choice(list(rows[index]))
    changed = [dict(r) for r in rows]
    changed[index][field] = "__deep__"
    text = as_text(changed, jsonl).replace('"__deep__"', deep(100_000, rng.choice("[{")), 1)
    return text.encode(), f"{form}: row {index + 1} {field} nested 100,000 deep", False


def stored_problems(home: Path) -> list[str]:
    """A stored speed file that holds what no finite point has."""
    return [
        f"{path.name} holds {word}"
        for path in sorted((home / "speed").glob("*.json"))
        for word in ("NaN", "Infinity")
        if word in path.read_text(errors="replace")
    ]


def refused_something(code: int, out: str, json_out: bool) -> bool:
    """The import failed, or said it refused a row."""
    if code != 0:
        return True
    if json_out:
        return any(f.get("refused", 0) > 0 for f in json.loads(out).get("files", []))
    return "refused" in out


class Importer:
    """Runs imports and the plans after them against one ``MOETUNE_HOME``."""

    def __init__(self, home: Path, fuzz: Fuzz) -> None:
        self.home, self.fuzz = home, fuzz
        self.since_plan: list[str] = []

    def calibrate(self, path: Path, what: str, must_refuse: bool, json_out: bool) -> None:
        args = ("calibrate", str(path), *(("--json",) if json_out else ()))
        case = Case(args, what, len(what))
        done = self.fuzz.run(case, lambda: stored_problems(self.home))
        self.since_plan.append(what)
        if done is None:
            return
        code, out, _ = done
        if must_refuse and not refused_something(code, out, json_out):
            self.fuzz.add("a row past the bounds was kept without a word", case)

    def plan(self, json_out: bool) -> None:
        args = (*PLAN, *(("--json",) if json_out else ()))
        what = "after: " + "; ".join(self.since_plan[-PLAN_EVERY:])
        case = Case(args, what, len(self.since_plan), succeed=True)
        self.since_plan = []
        done = self.fuzz.run(case)
        if done is not None and "skipping" in done[2]:
            self.fuzz.add(f"plan skipped a stored speed file: {done[2].strip()[:200]}", case)


@pytest.fixture
def home(_moetune_home: Path) -> Path:
    return _moetune_home


def test_hostile_speed_files(tmp_path: Path, home: Path) -> None:
    """150 seeded hostile files, each imported into the same store; a plan every ten."""
    rng = random.Random(SEED)
    fuzz = Fuzz(limit_s=10.0)
    rows = good_rows()
    importer = Importer(home, fuzz)
    for i in range(CASES):
        data, what, must_refuse = generate(rng, rows)
        path = tmp_path / f"bench-{i}.{'jsonl' if 'jsonl' in what else 'json'}"
        path.write_bytes(data)
        importer.calibrate(path, what, must_refuse, json_out=i % 3 == 0)
        path.unlink()
        if (i + 1) % PLAN_EVERY == 0:
            importer.plan(json_out=i % 20 == 9)
    importer.plan(json_out=True)
    fuzz.check(min_runs=CASES + CASES // PLAN_EVERY + 1)


def test_refused_rows_each_then_plan(tmp_path: Path, home: Path) -> None:
    """Each known row past the bounds, in the middle of good rows, in either format: the
    row refused and counted, the rest kept, and the plan after answers."""
    fuzz = Fuzz(limit_s=10.0)
    importer = Importer(home, fuzz)
    rows = good_rows()
    for i, (field, value) in enumerate(REFUSED):
        changed = [dict(r) for r in rows]
        changed[3][field] = value
        path = tmp_path / f"refused-{i}.json"
        path.write_text(as_text(changed, jsonl=i % 2 == 1))
        what = f"row 4 {field} = {json.dumps(value)[:40]}"
        importer.calibrate(path, what, must_refuse=True, json_out=i % 2 == 0)
    importer.plan(json_out=False)
    importer.plan(json_out=True)
    fuzz.check(min_runs=len(REFUSED) + 2)


def test_ten_thousand_rows(tmp_path: Path, home: Path) -> None:
    """10,000 rows, all but the eight good ones refused for a seeded reason each: imported
    with the exact count, three named, and the plan after answers."""
    rng = random.Random(SEED)
    rows = good_rows()
    many = list(rows)
    for _ in range(10_000 - len(rows)):
        field, value = rng.choice(REFUSED)
        many.insert(rng.randrange(len(many) + 1), rows[rng.randrange(len(rows))] | {field: value})
    path = tmp_path / "ten-thousand.jsonl"
    path.write_text(as_text(many, jsonl=True))
    fuzz = Fuzz(limit_s=30.0)
    done = fuzz.run(Case(("calibrate", str(path), "--json"), "10,000 rows", succeed=True))
    assert done is not None, fuzz.summary()
    (imported,) = json.loads(done[1])["files"]
    assert (len(imported["points"]), imported["refused"]) == (8, 9992)
    assert len(imported["refusals"]) == 3
    Importer(home, fuzz).plan(json_out=False)
    fuzz.check(min_runs=2)


def sparse(path: Path, head: bytes, size: int) -> Path:
    with path.open("wb") as file:
        file.write(head)
        file.truncate(size)
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def folder(path: Path) -> Path:
    path.mkdir()
    return path


NOT_TEXT: tuple[tuple[str, Callable[[Path], Path], str], ...] = (
    (
        "a sparse 17 GB GGUF",
        lambda d: sparse(d / "model.gguf", b"GGUF\x03\x00\x00\x00", 17 * 10**9),
        "is a GGUF model",
    ),
    (
        "a sparse 17 GB text file",
        lambda d: sparse(d / "big.json", b"[" + b" " * 8191, 17 * 10**9),
        f"more than the {MAX_TEXT_BYTES >> 20} MiB",
    ),
    (
        "a text file one byte over the cap",
        lambda d: sparse(d / "over.json", b"[" + b" " * 8191, MAX_TEXT_BYTES + 1),
        f"more than the {MAX_TEXT_BYTES >> 20} MiB",
    ),
    ("a FIFO", lambda d: fifo(d / "fifo.json"), "not a regular file"),
    ("a folder", lambda d: folder(d / "dir.json"), "folder"),
    ("/dev/zero", lambda d: Path("/dev/zero"), "not a regular file"),
    (
        "NULs after the first 4 KiB",
        lambda d: sparse(d / "nul.json", b"[" * 5000, 6000),
        "not valid JSON",
    ),
)


@pytest.mark.parametrize(("what", "make", "said"), NOT_TEXT, ids=[c[0] for c in NOT_TEXT])
def test_not_a_text_file(
    tmp_path: Path, what: str, make: Callable[[Path], Path], said: str
) -> None:
    """Refused in one line, from its first bytes and size (never read whole), quickly."""
    path = make(tmp_path)
    fuzz = Fuzz(limit_s=5.0)
    for args in (("calibrate", str(path)), ("calibrate", str(path), "--json")):
        done = fuzz.run(Case(args, what, refuse=True))
        assert done is not None, fuzz.summary()
        assert done[0] != 0 and said in done[2], done[2]
    fuzz.check(min_runs=2)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    items=st.lists(JSON_VALUES, max_size=5),
    indent=st.none() | st.integers(0, 3),
    cut=st.none() | st.integers(0, 400),
    tail=st.sampled_from(("", "\n", " x", ",", "]", "\x0c")),
)
def test_an_array_read_item_by_item_is_json_loads(
    items: list[Any], indent: int | None, cut: int | None, tail: str
) -> None:
    """llama-bench's ``-o json`` read an item at a time (llamacpp/bench_results.py) gives
    what ``json.loads`` gives, and fails where it fails: any array, cut or with a tail."""
    text = json.dumps(items, indent=indent)
    text = (text if cut is None else text[:cut]) + tail
    try:
        whole: object = json.loads(text)
    except ValueError:
        whole = ValueError
    try:
        streamed: object = list(array_items(text))
    except ValueError:
        streamed = ValueError
    if whole is ValueError:
        assert streamed is ValueError, text
    else:
        assert json.dumps(streamed) == json.dumps(whole), text
