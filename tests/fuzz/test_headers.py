"""Fuzz: mutated GGUF headers of models, shard sets, projectors (--mmproj) and draft models
(--draft) through plan, inspect, alias and export, in-process; seeded and bounded.

Each case is one valid tiny model's header with one to three mutations (support/mutate.py),
or with its bytes changed; the data region is a hole (the file is sparse), so a case costs
what reading its header and planning costs. What every case must hold: support/fuzz.py.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.factory import ModelFactory
from support.fuzz import Case, Fuzz, warns
from support.helpers import cli
from support.mutate import (
    HEADER_MUTATIONS,
    Flagged,
    Mutation,
    int_value,
    kv_index,
    m_delete_key,
    mutate_bytes,
    mutate_header,
    set_kv,
    wrapped,
)
from support.projector_factory import write_projector
from support.rawgguf import ARR, I32, STR, U16, U32, RawGGUF, parse_raw

SEED = 20
VRAM = ("--vram", "24G")
PLAN = ("--no-verify", "--json")
SEED_MODELS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("qwen3moe", {}),
    ("gpt-oss", {}),
    ("deepseek2", {}),
    ("glm4moe", {}),
    ("qwen35moe", {}),
    ("qwen3", {}),
    ("glm4moe", {"n_nextn": 1}),
    ("qwen35moe", {"n_nextn": 1}),
)
PROJECTORS = ("gemma3", "qwen3vl_merger", "glm4v", "qwen2.5vl_merger")


class Seed:
    """One valid file held as a RawGGUF and its data size; ``write`` puts a version of it on
    disk with the data region as a hole."""

    def __init__(self, path: Path) -> None:
        self.name = path.name
        self.raw, self.data_bytes = parse_raw(path.read_bytes())

    def write(self, raw: RawGGUF, path: Path) -> Path:
        head = raw.header()
        write_sparse(path, head + b"\0" * (-len(head) % raw.alignment), self.data_bytes)
        return path


def write_sparse(path: Path, head: bytes, data_bytes: int) -> None:
    path.write_bytes(head)
    os.truncate(path, len(head) + data_bytes)


@pytest.fixture(scope="module")
def seeds(model_factory: ModelFactory) -> list[Seed]:
    return [Seed(model_factory(arch, **options)) for arch, options in SEED_MODELS]


def model_commands(path: Path, rng: random.Random) -> tuple[str, ...]:
    """One of the commands that read a model, chosen by weight."""
    m = str(path)
    choices: tuple[tuple[str, ...], ...] = (
        ("plan", m, *VRAM, *PLAN),
        ("plan", m, *VRAM, *PLAN),
        ("plan", m, *VRAM, *PLAN),
        ("plan", m, *VRAM, "--ctx", "max", *PLAN),
        ("inspect", m, "--json"),
        ("inspect", m, "--json", "--layers", "--tensors"),
        ("alias", "fz", m, *VRAM),
        ("export", "preset", m, *VRAM),
    )
    return rng.choice(choices)


def _clean(fuzz: Fuzz, args: tuple[str, ...]) -> None:
    """The unmutated seed passes without a warning: the mutations start from a file moetune
    accepts, so a warning or an error after one is the mutation's."""
    code, out, err = cli(*args)
    assert code == 0 and not warns(out, err), err


def refused(done: list[str]) -> bool:
    """Whether a mutation moetune must refuse (or warn about) is in ``done`` and no later one
    undid it (``K = V`` then ``delete K``: the key is gone, and llama.cpp's default holds)."""
    flagged: dict[str, bool] = {}
    for i, step in enumerate(done):
        if step.startswith("delete ") and not isinstance(step, Flagged):
            flagged.pop(step.removeprefix("delete "), None)
        elif isinstance(step, Flagged):
            flagged[step.split(" = ")[0] if " = " in step else f"#{i}"] = True
    return bool(flagged)


def test_model_headers(seeds: list[Seed], tmp_path: Path) -> None:
    """600 mutated headers of 8 architectures' tiny models (structured: 510, bytes: 90)."""
    rng = random.Random(SEED)
    fuzz = Fuzz()
    path = tmp_path / "model.gguf"
    for seed in seeds:
        seed.write(seed.raw, path)
        _clean(fuzz, ("plan", str(path), *VRAM, *PLAN))
    for i in range(600):
        seed = seeds[i % len(seeds)]
        if i % 20 < 17:
            raw, done = mutate_header(rng, seed.raw)
            seed.write(raw, path)
            what, size, refuse = "; ".join(done), len(done), refused(done)
        else:
            head = seed.raw.header()
            data, what = mutate_bytes(rng, head)
            write_sparse(path, data, seed.data_bytes if len(data) >= len(head) else 0)
            size, refuse = 4, False
        fuzz.run(Case(model_commands(path, rng), f"{seed.name}: {what}", size, refuse))
    fuzz.check(min_runs=600)


# --- shard sets -----------------------------------------------------------------------------


def shard_set(seed: Seed) -> tuple[RawGGUF, RawGGUF, int]:
    """``seed`` as llama-gguf-split writes it in two shards: every key and the first half of
    the tensors in the first, only the split keys in the second; the tensors' offsets
    relative to each shard's data."""
    first = RawGGUF(version=seed.raw.version, kv=list(seed.raw.kv), alignment=seed.raw.alignment)
    second = RawGGUF(version=seed.raw.version, alignment=seed.raw.alignment)
    half = len(seed.raw.tensors) // 2
    first.tensors = list(seed.raw.tensors[:half])
    base = seed.raw.tensors[half][3]
    second.tensors = [(n, s, t, o - base) for n, s, t, o in seed.raw.tensors[half:]]
    for i, shard in enumerate((first, second)):
        set_kv(shard, "split.no", U16, i)
        set_kv(shard, "split.count", U16, 2)
        set_kv(shard, "split.tensors.count", I32, len(seed.raw.tensors))
    return first, second, base


def m_shard_keys(rng: random.Random, raw: RawGGUF) -> str:
    key = rng.choice(("split.no", "split.count", "split.tensors.count"))
    value = int_value(raw, key, 0) + rng.choice((-1, 1, 2, 100))
    set_kv(raw, key, I32, value)
    return f"{key} = {value}"


def m_shard_arch(rng: random.Random, raw: RawGGUF) -> str:
    name = rng.choice(("llama", "qwen3", ""))
    set_kv(raw, "general.architecture", STR, name)
    return f"general.architecture = {name!r}"


SHARD_MUTATIONS: tuple[tuple[int, Mutation], ...] = (
    *HEADER_MUTATIONS,
    (20, m_shard_keys),
    (5, m_shard_arch),
)


def test_shard_sets(seeds: list[Seed], tmp_path: Path) -> None:
    """300 two-shard sets with one shard mutated, a tensor in both shards, or a shard gone."""
    rng = random.Random(SEED + 1)
    fuzz = Fuzz()
    paths = [tmp_path / f"m-0000{i}-of-00002.gguf" for i in (1, 2)]

    def write(seed: Seed, shards: tuple[RawGGUF, RawGGUF], base: int) -> None:
        for raw, path, data in zip(shards, paths, (base, seed.data_bytes - base), strict=True):
            head = raw.header()
            write_sparse(path, head + b"\0" * (-len(head) % raw.alignment), max(data, 0))

    for seed in seeds[:2]:
        first, second, base = shard_set(seed)
        write(seed, (first, second), base)
        _clean(fuzz, ("plan", str(paths[0]), *VRAM, *PLAN))
    for i in range(300):
        seed = seeds[i % len(seeds)]
        first, second, base = shard_set(seed)
        choice = rng.random()
        if choice < 0.15:
            tensor = rng.choice(first.tensors)
            second.tensors.append((tensor[0], tensor[1], tensor[2], 0))
            what, size, refuse = f"tensor {tensor[0]} in both shards", 1, True
        elif choice < 0.25:
            what, size, refuse = "the second shard missing", 1, True
        else:
            which = rng.randrange(2)
            mutated, done = mutate_header(rng, (first, second)[which], SHARD_MUTATIONS)
            first, second = (mutated, second) if which == 0 else (first, mutated)
            what, size = f"shard {which + 1}: " + "; ".join(done), len(done)
            # llama.cpp reads the metadata of the first shard only: a key of another shard is
            # ignored (moetune too); its tensors count
            kept = [d for d in done if which == 0 or not (" = " in d or "negative" in d)]
            refuse = refused(kept)
        write(seed, (first, second), base)
        if what == "the second shard missing":
            paths[1].unlink()
        m = paths[rng.randrange(2) if rng.random() < 0.2 else 0]
        args = rng.choice((("plan", str(m), *VRAM, *PLAN), ("inspect", str(m), "--json")))
        fuzz.run(Case(args, f"{seed.name} split in 2: {what}", size, refuse))
    fuzz.check(min_runs=300)


# --- projectors and drafts ------------------------------------------------------------------


def test_projector_headers(model_factory: ModelFactory, tmp_path: Path) -> None:
    """300 mutated projectors (4 types) beside a tiny qwen3moe, through plan and alias."""
    rng = random.Random(SEED + 2)
    fuzz = Fuzz()
    model = str(model_factory("qwen3moe"))

    def writer(kind: str) -> Callable[[Path], Path]:
        return lambda p: write_projector(p, projector_type=kind, n_embd_out=256)

    seeds = [Seed(model_factory.written(f"fuzz-mmproj-{k}", writer(k))) for k in PROJECTORS]
    path = tmp_path / "mmproj.gguf"
    for seed in seeds:
        seed.write(seed.raw, path)
        _clean(fuzz, ("plan", model, "--mmproj", str(path), *VRAM, *PLAN))
    for i in range(300):
        seed = seeds[i % len(seeds)]
        raw, done = mutate_header(rng, seed.raw, PROJECTOR_MUTATIONS)
        seed.write(raw, path)
        p = str(path)
        args = rng.choice(
            (
                ("plan", model, "--mmproj", p, *VRAM, *PLAN),
                ("plan", model, "--mmproj", p, *VRAM, *PLAN),
                ("plan", model, *VRAM, *PLAN, "--", "--mmproj", p, "--no-mmproj-offload"),
                ("alias", "fz", model, "--mmproj", p, *VRAM),
            )
        )
        # clip files keep their facts under clip.vision.*: only the tensor table's flags apply
        refuse = any(isinstance(d, Flagged) and ("offset" in d or "twice" in d) for d in done)
        fuzz.run(Case(args, f"{seed.name}: {'; '.join(done)}", len(done), refuse))
    fuzz.check(min_runs=300)


def m_clip_key(rng: random.Random, raw: RawGGUF) -> str:
    """A clip.* key deleted or hostile: the projector's own facts."""
    keys = [k for k, _, _ in raw.kv if k.startswith("clip.")]
    key = rng.choice(keys)
    if rng.random() < 0.35:
        raw.kv = [kv for kv in raw.kv if kv[0] != key]
        return f"delete {key}"
    value = rng.choice((0, 1, 3, 2**31 - 1, 2**32 - 1))
    i = kv_index(raw, key)
    assert i is not None
    if raw.kv[i][1] == STR:
        text = rng.choice(("", "unknown_proj", "gemma3", "qwen3vl_merger", "idefics3"))
        raw.kv[i] = (key, STR, text)
        return f"{key} = {text!r}"
    value_type = I32 if rng.random() < 0.3 else U32
    set_kv(raw, key, value_type, wrapped(value_type, value))
    return f"{key} = {wrapped(value_type, value)}"


PROJECTOR_MUTATIONS: tuple[tuple[int, Mutation], ...] = (
    *((w, m) for w, m in HEADER_MUTATIONS if m is not m_delete_key),
    (25, m_clip_key),
)


def test_draft_headers(model_factory: ModelFactory, tmp_path: Path) -> None:
    """300 mutated draft models (a tiny dense qwen3 and a qwen3moe of the target's vocabulary)
    beside a tiny qwen3moe, through plan and alias."""
    rng = random.Random(SEED + 3)
    fuzz = Fuzz()
    model = str(model_factory("qwen3moe"))
    seeds = [Seed(model_factory("qwen3", n_layers=2)), Seed(model_factory("qwen3moe", n_layers=2))]
    path = tmp_path / "draft.gguf"
    for seed in seeds:
        seed.write(seed.raw, path)
        _clean(fuzz, ("plan", model, "--draft", str(path), *VRAM, *PLAN))
    for i in range(300):
        seed = seeds[i % len(seeds)]
        raw, done = mutate_header(rng, seed.raw, DRAFT_MUTATIONS)
        seed.write(raw, path)
        p = str(path)
        args = rng.choice(
            (
                ("plan", model, "--draft", p, *VRAM, *PLAN),
                ("plan", model, "--draft", p, *VRAM, *PLAN),
                ("plan", model, *VRAM, *PLAN, "--", "-md", p, "-ngld", "99"),
                ("alias", "fz", model, "--draft", p, *VRAM),
            )
        )
        fuzz.run(Case(args, f"draft {seed.name}: {'; '.join(done)}", len(done), refused(done)))
    fuzz.check(min_runs=300)


def m_vocabulary(rng: random.Random, raw: RawGGUF) -> str:
    """The draft's vocabulary changed: fewer tokens, other tokens, another type, none."""
    i = kv_index(raw, "tokenizer.ggml.tokens")
    value: Any = raw.kv[i][2] if i is not None else None
    if i is None or raw.kv[i][1] != ARR or value[0] != STR:
        return m_delete_key(rng, raw)
    key, value_type = raw.kv[i][:2]
    item_type: int = value[0]
    tokens: tuple[Any, ...] = value[1]
    choice = rng.random()
    if choice < 0.25:
        raw.kv[i] = (key, value_type, (item_type, tokens[: rng.randrange(len(tokens))]))
        return "fewer tokens"
    if choice < 0.5:
        raw.kv[i] = (key, value_type, (item_type, ("zz", *tokens[1:])))
        return "another first token"
    if choice < 0.7:
        raw.kv[i] = (key, value_type, (U32, tuple(range(len(tokens)))))
        return "tokens as u32"
    if choice < 0.85:
        raw.kv[i] = (key, value_type, (item_type, (b"\xff\xfe", *tokens[1:])))
        return "a token that is not UTF-8"
    del raw.kv[i]
    return "no tokenizer.ggml.tokens"


DRAFT_MUTATIONS: tuple[tuple[int, Mutation], ...] = (*HEADER_MUTATIONS, (15, m_vocabulary))
