"""The architecture matrix's interface: which tiny models it writes, and how.

Each architecture's fixture is ONE registration, keyed by the architecture's name as
src/llama-arch.cpp spells it (``LLM_ARCH_NAMES``): a writer that writes a tiny model of that
architecture which the real llama-server loads, at the given path, and returns the path, with
the extra llama-server (and llama-fit-params) flags the architecture needs::

    @fixture("llama4", "-c", "40960")
    def write_llama4(path: Path) -> Path: ...

in a fixture module (any ``tests/support/archfix_<group>.py``), or ``fixture(arch)(writer)`` for a
writer built otherwise. factory.py's ``MOE_ARCHS`` (written by ``write_model``) are
registered here. ``matrix()`` imports every fixture module and returns one ``ArchCase`` per
architecture; tests/server/test_arch_matrix.py runs each against llama-server's logged buffers and
llama-fit-params, scripts/verified-archs.py lists them in docs/verified-architectures.md,
and the records of core/archs.py marked ``verified`` must name exactly these
(tests/unit/test_verified_archs.py).

Keep fixtures tiny (4 blocks, n_embd 256 or less, a few experts): the whole matrix runs in a
few minutes. ``Tiny`` is a small helper for writing them: common keys, the 320-token byte-level
vocabulary, seeded F16 matrices and F32 norms (the recipes of factory.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import gguf
import numpy as np

from moetune.core.memory import MemoryEstimate, Settings, estimate
from moetune.core.placement import Placement
from moetune.jobs.loader import load_model_facts

from support import factory

Writer = Callable[[Path], Path]
SUPPORT = Path(__file__).resolve().parent
FACTORY_GROUP = "factory"


@dataclass(frozen=True)
class ArchCase:
    """One architecture of the matrix: who writes it, and the extra flags it needs."""

    arch: str
    group: str  # the fixture module's suffix (``a`` for archfix_a.py), or "factory"
    write: Writer
    server_args: tuple[str, ...] = ()


# every registered fixture, by architecture (filled by ``fixture`` as the modules load)
_CASES: dict[str, ArchCase] = {}


def fixture(arch: str, *server_args: str, group: str = "") -> Callable[[Writer], Writer]:
    """Register the decorated writer as ``arch``'s fixture (its group: the module's suffix,
    ``a`` for archfix_a.py); an architecture registered twice fails."""

    def register(write: Writer) -> Writer:
        where = group or getattr(write, "__module__", "").removeprefix("support.archfix_")
        if arch in _CASES:
            raise ValueError(f"{arch!r} has fixtures in both {_CASES[arch].group} and {where}")
        _CASES[arch] = ArchCase(arch, where, write, server_args)
        return write

    return register


def fixture_modules() -> list[str]:
    """The ``archfix_<group>`` module names under tests/, sorted."""
    return sorted(p.stem for p in SUPPORT.glob("archfix_*.py"))


def _factory_writer(arch: str, path: Path) -> Path:
    return factory.write_model(path, arch)


for _arch in factory.MOE_ARCHS:
    fixture(_arch, group=FACTORY_GROUP)(partial(_factory_writer, _arch))


def matrix() -> dict[str, ArchCase]:
    """Every architecture with a fixture, by name (sorted)."""
    for name in fixture_modules():
        importlib.import_module(f"support.{name}")
    return dict(sorted(_CASES.items()))


def matrix_archs() -> list[str]:
    """The architectures the matrix verifies, sorted."""
    return list(matrix())


ARCHS_DOC = SUPPORT.parents[1] / "docs" / "verified-architectures.md"
README_START = "<!-- verified-archs:start (scripts/verified-archs.py --write) -->"
README_END = "<!-- verified-archs:end -->"


def readme_section(archs: list[str]) -> str:
    """docs/verified-architectures.md's list of verified architectures, between its markers."""
    names = ", ".join(f"`{a}`" for a in archs)
    return f"{README_START}\n{len(archs)} architectures: {names}.\n{README_END}"


def readme_archs(text: str) -> str:
    """The section as the page holds it now (empty if the markers are missing)."""
    if README_START not in text or README_END not in text:
        return ""
    rest = text.split(README_START, 1)[1]
    return README_START + rest.split(README_END, 1)[0] + README_END


def rewrite_readme(text: str, archs: list[str]) -> str:
    """``text`` with its section replaced by the list of ``archs``."""
    current = readme_archs(text)
    if not current:
        raise ValueError(f"{ARCHS_DOC.name} has no {README_START!r} ... {README_END!r} markers")
    return text.replace(current, readme_section(archs))


# --- a helper for writing tiny models ------------------------------------------------------


@dataclass
class Tiny:
    """One tiny model being written: ``keys()`` sets the common keys, the ``mat``/``norm``/
    ``f32``/``experts`` methods add seeded tensors (numpy shape order: outer first), and
    ``close()`` writes the file. Default shapes: 4 blocks, n_embd 256, 4 query heads of 64,
    2 KV heads, 4 experts (2 used) of width 256, dense FFN 512."""

    path: Path
    arch: str
    n_layers: int = 4
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_experts: int = 4
    n_experts_used: int = 2
    n_ff: int = 512
    n_ff_exp: int = 256
    n_vocab: int = 320
    seed: int = 0
    writer: gguf.GGUFWriter = field(init=False)
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.writer = gguf.GGUFWriter(self.path, self.arch)
        self.rng = np.random.default_rng(self.seed)

    @property
    def q_width(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_head_kv * self.head_dim

    def keys(self, *, experts: bool = True, head_sizes: bool = True) -> None:
        """Name, sizes, heads, rope base, RMS eps, experts, and the tokenizer."""
        w = self.writer
        w.add_name(f"moetune tiny {self.arch}")
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        w.add_context_length(4096)
        w.add_embedding_length(self.n_embd)
        w.add_block_count(self.n_layers)
        w.add_feed_forward_length(self.n_ff)
        w.add_head_count(self.n_head)
        w.add_head_count_kv(self.n_head_kv)
        if head_sizes:
            w.add_key_length(self.head_dim)
            w.add_value_length(self.head_dim)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-6)
        if experts:
            w.add_expert_count(self.n_experts)
            w.add_expert_used_count(self.n_experts_used)
            w.add_expert_feed_forward_length(self.n_ff_exp)
        factory._add_tokenizer(w)

    def norm(self, name: str, n: int, value: float = 1.0) -> None:
        self.writer.add_tensor(name, np.full(n, value, dtype=np.float32))

    def f32(self, name: str, *shape: int, scale: float = 0.02) -> None:
        self.writer.add_tensor(name, self.rng.standard_normal(shape, dtype=np.float32) * scale)

    def mat(self, name: str, *shape: int) -> None:
        data = self.rng.standard_normal(shape, dtype=np.float32) * 0.02
        self.writer.add_tensor(name, data.astype(np.float16))

    def experts(self, name: str, *shape: int) -> None:
        self.mat(name, *shape)

    # common pieces

    def globals(self, *, output: bool = True) -> None:
        self.mat("token_embd.weight", self.n_vocab, self.n_embd)
        self.norm("output_norm.weight", self.n_embd)
        if output:
            self.mat("output.weight", self.n_vocab, self.n_embd)

    def attention(
        self, i: int, *, qk_norm: bool = False, bias: bool = False, out_bias: bool = False
    ) -> None:
        """attn_norm, q/k/v/output (+ per-head q/k norms, q/k/v biases, output bias)."""
        p, e = f"blk.{i}", self.n_embd
        self.norm(f"{p}.attn_norm.weight", e)
        self.mat(f"{p}.attn_q.weight", self.q_width, e)
        self.mat(f"{p}.attn_k.weight", self.kv_width, e)
        self.mat(f"{p}.attn_v.weight", self.kv_width, e)
        self.mat(f"{p}.attn_output.weight", e, self.q_width)
        if qk_norm:
            self.norm(f"{p}.attn_q_norm.weight", self.head_dim)
            self.norm(f"{p}.attn_k_norm.weight", self.head_dim)
        if bias:
            self.f32(f"{p}.attn_q.bias", self.q_width)
            self.f32(f"{p}.attn_k.bias", self.kv_width)
            self.f32(f"{p}.attn_v.bias", self.kv_width)
        if out_bias:
            self.f32(f"{p}.attn_output.bias", e)

    def dense_ffn(self, i: int, *, norm: bool = True) -> None:
        p, e, f = f"blk.{i}", self.n_embd, self.n_ff
        if norm:
            self.norm(f"{p}.ffn_norm.weight", e)
        self.mat(f"{p}.ffn_gate.weight", f, e)
        self.mat(f"{p}.ffn_up.weight", f, e)
        self.mat(f"{p}.ffn_down.weight", e, f)

    def moe(self, i: int, *, norm: bool = True, gate: bool = True) -> None:
        """ffn_norm, the F32 router and the routed experts (gate, up, down)."""
        p, e, x, f = f"blk.{i}", self.n_embd, self.n_experts, self.n_ff_exp
        if norm:
            self.norm(f"{p}.ffn_norm.weight", e)
        self.f32(f"{p}.ffn_gate_inp.weight", x, e)
        if gate:
            self.experts(f"{p}.ffn_gate_exps.weight", x, f, e)
        self.experts(f"{p}.ffn_up_exps.weight", x, f, e)
        self.experts(f"{p}.ffn_down_exps.weight", x, e, f)

    def shared_expert(self, i: int, width: int | None = None, *, gate_inp: bool = False) -> None:
        p, e, f = f"blk.{i}", self.n_embd, width or self.n_ff_exp
        self.mat(f"{p}.ffn_gate_shexp.weight", f, e)
        self.mat(f"{p}.ffn_up_shexp.weight", f, e)
        self.mat(f"{p}.ffn_down_shexp.weight", e, f)
        if gate_inp:
            self.f32(f"{p}.ffn_gate_inp_shexp.weight", e)

    def close(self) -> Path:
        self.writer.write_header_to_file()
        self.writer.write_kv_data_to_file()
        self.writer.write_tensors_to_file()
        self.writer.close()
        return self.path


__all__ = [
    "ArchCase",
    "Tiny",
    "Writer",
    "fixture",
    "fixture_modules",
    "matrix",
    "matrix_archs",
    "readme_archs",
    "readme_section",
    "rewrite_readme",
]


# --- the matrix's settings: the server's flags and moetune's estimate at them -------------

N_CPU_MOE, N_CTX, CACHE = 1, 4096, "q8_0"


def flags(case: ArchCase, rpc: str) -> list[str]:
    return [
        "--rpc",
        rpc,
        "-ngl",
        "99",
        "--n-cpu-moe",
        str(N_CPU_MOE),
        "-c",
        str(N_CTX),
        "-ctk",
        CACHE,
        "-ctv",
        CACHE,
        "-fa",
        "on",
        *case.server_args,
    ]


def context(case: ArchCase) -> int:
    """-c: the matrix's, or the last one the architecture's own flags give (a context beyond
    a sliding window or attention chunk, so that the window shows)."""
    values = [
        int(v) for f, v in zip(case.server_args, case.server_args[1:], strict=False) if f == "-c"
    ]
    return values[-1] if values else N_CTX


def predict(model: Path, case: ArchCase, fit_params: bool = False) -> MemoryEstimate:
    """moetune's estimate at the matrix's settings; llama-fit-params has one slot and
    reserves logits for every token of the batch."""
    settings = Settings(
        n_ctx=context(case),
        type_k=CACHE,
        type_v=CACHE,
        gpu_overhead_bytes=0,
        device_kind="rpc",
        n_seq=1 if fit_params else 4,
        all_outputs=fit_params,
    )
    return estimate(load_model_facts(model), Placement.with_n_cpu_moe(N_CPU_MOE), settings)


# --- an architecture moetune was never taught (tests/*/test_untaught.py) ------------------

UNTAUGHT_REAL = "rnd1"


def write_rnd1(path: Path) -> Path:
    """src/models/rnd1.cpp: qwen3moe-shaped blocks (Q/K norms), non-causal attention."""
    t = Tiny(path, UNTAUGHT_REAL)
    t.keys()
    t.globals()
    for i in range(t.n_layers):
        t.attention(i, qk_norm=True)
        t.moe(i)
    return t.close()
