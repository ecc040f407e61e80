"""KV / RS cache prediction (moetune.core.kvcache) against llama.cpp build 11434.

The ``server`` tests start the real llama-server CPU-only on each tiny fixture over a grid of
context sizes, cache types, slot settings and SWA options, and compare every printed cache line
(``KV buffer size``, ``RS buffer size``, ``llama_kv_cache: size = ... (N cells, L layers, a/b
seqs), K (..): .. MiB, V (..): .. MiB``, ``llama_memory_recurrent: size = ... (N cells``) and
the context llama.cpp settled on with the prediction. llama.cpp prints MiB with 2 decimals, so
a prediction is right when it is within 0.005 MiB of each printed figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from moetune.core.facts import ModelFacts
from moetune.core.kvcache import CacheEstimate, estimate_cache
from moetune.errors import BadValueError
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_buffers
from moetune.units import MIB

from support.factory import ARCHS
from support.llama import CPU_PLAIN, LlamaBinaryError, running_server

PRINTED_TOLERANCE_MIB = 0.005 + 1e-9  # %.2f rounding
_KV_SIZE_RE = re.compile(
    r"llama_kv_cache: size = +(?P<mib>[\d.]+) MiB \( *(?P<cells>\d+) cells, +(?P<layers>\d+) "
    r"layers, +(?P<seqs>\d+)/(?P<streams>\d+) seqs\), K \(\w+\): +(?P<k>[\d.]+) MiB, "
    r"V \(\w+\): +(?P<v>[\d.]+) MiB"
)
_RS_SIZE_RE = re.compile(r"llama_memory_recurrent: size = +(?P<mib>[\d.]+) MiB \( *(?P<cells>\d+)")
_CTX_RE = re.compile(r"llama_context: n_ctx += (\d+)")
_CTX_SEQ_RE = re.compile(r"llama_context: n_ctx_seq += (\d+)")
_CONTEXT_START = "llama_context: constructing llama_context"


# --- the server grid ------------------------------------------------------------------------


@dataclass(frozen=True)
class Slots:
    """How llama-server is told about slots, and what it then uses (tools/server/server.cpp)."""

    argv: tuple[str, ...]
    n_seq: int
    unified: bool


SLOTS: dict[str, Slots] = {
    "auto": Slots((), 4, True),
    # -np auto forces kv_unified = true after parsing, so --no-kv-unified has no effect
    "auto-nokvu": Slots(("--no-kv-unified",), 4, True),
    "np1": Slots(("-np", "1"), 1, False),  # an explicit -np leaves kv_unified off
    "np4": Slots(("-np", "4"), 4, False),
    "np4-kvu": Slots(("-np", "4", "-kvu"), 4, True),
}
CTXS = (512, 4096, 10000)
TYPES = ("f16", "q8_0", "q4_0")
SLOT_CYCLE = ("auto", "np1", "np4", "np4-kvu")


@dataclass(frozen=True)
class Case:
    """One llama-server start."""

    arch: str
    ctx: int
    type_k: str
    type_v: str
    slots: str
    swa_full: bool = False
    flash_attn: bool = True
    n_ubatch: int | None = None

    @property
    def id(self) -> str:
        parts = [self.arch, f"c{self.ctx}", self.type_k, self.type_v, self.slots]
        parts += ["swafull"] * self.swa_full + ["faoff"] * (not self.flash_attn)
        parts += [f"ub{self.n_ubatch}"] if self.n_ubatch else []
        return "-".join(parts)

    def argv(self) -> list[str]:
        argv = ["-c", str(self.ctx), "-ctk", self.type_k, "-ctv", self.type_v]
        argv += ["-fa", "on" if self.flash_attn else "off", *SLOTS[self.slots].argv]
        argv += ["--swa-full"] * self.swa_full
        return argv + (["-ub", str(self.n_ubatch)] if self.n_ubatch else [])

    def estimate(self, facts: ModelFacts) -> CacheEstimate:
        slots = SLOTS[self.slots]
        extra = {"n_ubatch": self.n_ubatch} if self.n_ubatch else {}
        return estimate_cache(
            facts,
            n_ctx=self.ctx,
            type_k=self.type_k,
            type_v=self.type_v,
            n_seq=slots.n_seq,
            kv_unified=slots.unified,
            flash_attn=self.flash_attn,
            swa_full=self.swa_full,
            **extra,
        )


def _arch_cases(arch: str, offset: int) -> list[Case]:
    """ctx x type (K = V) with the slot modes rotated, plus mixed K/V and FA-off cases."""
    cases = [
        Case(arch, ctx, t, t, SLOT_CYCLE[(i + j + offset) % len(SLOT_CYCLE)])
        for i, ctx in enumerate(CTXS)
        for j, t in enumerate(TYPES)
    ]
    mixed = ("q8_0", "q8_0") if arch == "deepseek2" else ("q8_0", "f16")  # MLA: K type = V type
    cases.append(Case(arch, 4096, *mixed, "auto-nokvu"))
    no_fa = ("f16", "f16") if arch == "deepseek2" else ("q4_0", "f16")  # quantized K, no FA
    cases.append(Case(arch, 10000, *no_fa, "np4", flash_attn=False))
    return cases


def _swa_cases() -> list[Case]:
    """gpt-oss: --swa-full on/off and the n_ubatch term of the SWA cache size."""
    return [
        Case("gpt-oss", 512, "q8_0", "q8_0", "auto", swa_full=True),
        Case("gpt-oss", 10000, "f16", "f16", "np4", swa_full=True),
        Case("gpt-oss", 4096, "q4_0", "q4_0", "np4-kvu", swa_full=True),
        Case("gpt-oss", 10000, "f16", "f16", "np4-kvu", swa_full=False),
        Case("gpt-oss", 10000, "f16", "f16", "auto", n_ubatch=1024),
        Case("gpt-oss", 10000, "q8_0", "q8_0", "np1", n_ubatch=256),
        Case("gpt-oss", 300, "f16", "f16", "np1"),
    ]


GRID: list[Case] = [c for k, a in enumerate(ARCHS) for c in _arch_cases(a, k)] + _swa_cases()


@dataclass(frozen=True)
class LoggedCache:
    """One ``llama_kv_cache: size`` line and the KV buffer lines printed just before it."""

    buffer_mib: float
    n_buffers: int
    mib: float
    cells: int
    layers: int
    seqs: int
    streams: int
    k_mib: float
    v_mib: float


def _last_context(log: str) -> str:
    """The log of the real context (the fit dry run, when logged, builds one first)."""
    return log[log.rindex(_CONTEXT_START) :]


def _logged_kv_caches(log: str) -> list[LoggedCache]:
    caches: list[LoggedCache] = []
    buffers: list[float] = []
    for line in log.splitlines():
        buffers += [b.mib for b in parse_buffers(line) if b.kind == "KV"]
        match = _KV_SIZE_RE.search(line)
        if match is None:
            continue
        caches.append(
            LoggedCache(
                sum(buffers),
                len(buffers),
                float(match["mib"]),
                int(match["cells"]),
                int(match["layers"]),
                int(match["seqs"]),
                int(match["streams"]),
                float(match["k"]),
                float(match["v"]),
            )
        )
        buffers = []
    return caches


def _predicted_caches(est: CacheEstimate) -> list[tuple[int, int, int, int]]:
    """(cells, layers, K bytes, V bytes) per KV cache, non-SWA first (llama_kv_cache_iswa)."""
    out = []
    for is_swa in (False, True):
        group = [c for c in est.layers if c.n_cells and c.is_swa == is_swa]
        if group:
            k = sum(c.k_bytes for c in group)
            out.append((group[0].n_cells, len(group), k, sum(c.kv_bytes for c in group) - k))
    return out


def _near(pred_bytes: int, printed_mib: float, n_figures: int = 1) -> bool:
    return abs(pred_bytes / MIB - printed_mib) <= PRINTED_TOLERANCE_MIB * n_figures


def _check_kv(log: str, case: Case, est: CacheEstimate) -> None:
    logged = _logged_kv_caches(log)
    predicted = _predicted_caches(est)
    assert len(logged) == len(predicted), (logged, predicted)
    for got, (cells, layers, k, v) in zip(logged, predicted, strict=True):
        assert (got.cells, got.layers) == (cells, layers), (got, cells, layers)
        assert (got.seqs, got.streams) == (SLOTS[case.slots].n_seq, est.n_stream)
        assert _near(k, got.k_mib) and _near(v, got.v_mib), (got, k, v)
        assert _near(k + v, got.mib), (got, k + v)
        assert _near(k + v, got.buffer_mib, got.n_buffers), (got, k + v)


def _check_rs(log: str, est: CacheEstimate) -> None:
    rs_lines = list(_RS_SIZE_RE.finditer(log))
    rs_buffers = [b for b in parse_buffers(log) if b.kind == "RS"]
    if est.rs_cells == 0:
        assert not rs_lines and not rs_buffers
        return
    assert [int(m["cells"]) for m in rs_lines] == [est.rs_cells]
    assert _near(est.rs_bytes, float(rs_lines[0]["mib"]))
    assert _near(est.rs_bytes, sum(b.mib for b in rs_buffers), len(rs_buffers))


@pytest.fixture(scope="module")
def grid_facts(tiny_models: dict[str, Path]) -> dict[str, ModelFacts]:
    return {arch: load_model_facts(path) for arch, path in tiny_models.items()}


@pytest.mark.parametrize("case", GRID, ids=[c.id for c in GRID])
def test_matches_llama_server(
    case: Case, tiny_models: dict[str, Path], grid_facts: dict[str, ModelFacts]
) -> None:
    est = case.estimate(grid_facts[case.arch])
    assert est.exact
    with running_server(tiny_models[case.arch], *case.argv(), *CPU_PLAIN) as server:
        log = _last_context(server.log_text())
    assert int(_CTX_RE.findall(log)[0]) == est.n_ctx
    assert int(_CTX_SEQ_RE.findall(log)[0]) == est.n_ctx_seq
    _check_kv(log, case, est)
    _check_rs(log, est)


REFUSED = [
    Case("qwen3moe", 4096, "f16", "q8_0", "auto", flash_attn=False),  # quantized V needs FA
    Case("deepseek2", 4096, "q8_0", "f16", "auto"),  # MLA: K and V types must match
]


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
def test_refused_like_llama_server(
    case: Case, tiny_models: dict[str, Path], grid_facts: dict[str, ModelFacts]
) -> None:
    with pytest.raises(BadValueError):
        case.estimate(grid_facts[case.arch])
    with (
        pytest.raises(LlamaBinaryError),
        running_server(tiny_models[case.arch], *case.argv(), *CPU_PLAIN),
    ):
        pass


# --- pure edge cases ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def facts(tiny_models: dict[str, Path]) -> dict[str, ModelFacts]:
    return {a: load_model_facts(p) for a, p in tiny_models.items()}
