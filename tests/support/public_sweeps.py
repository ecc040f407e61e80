"""The public llama-bench sweeps under benchmarks/data/public_sweeps/ as the speed model reads
them: each row a ``Measured`` on the header-only example of its model, and each machine's
public figures (a hardware profile's GPU memory bandwidth, PCIe link and FLOP/s; the RAM's
peak where the source states its type, rate and channels). benchmarks/speed_forecast.py
forecasts them, scripts/speed-prior.py fits core/prior.py's typical factors on them, and
core/routing.py's routing exponents on the copy-all / copy-used pairs among them."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from moetune.core.calibrate import Measured, fit_pooled, point_forecast, relative_error
from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts, facts_from_gguf
from moetune.core.figures import FigureSource, Quantity
from moetune.core.placement import Placement
from moetune.core.prior import SpeedPrior
from moetune.core.ram import RamFigure
from moetune.core.routing import touched_share
from moetune.core.settings import Settings
from moetune.core.speed import DeviceFigures, Efficiency, MachineFigures, forecast, placement_layout
from moetune.gguf.split import read_model
from moetune.jobs.figures import figures_of, machine_figures
from moetune.store.hardware import find_hardware_profile, pcie_bandwidth_bytes_per_s
from moetune.units import parse_size

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "benchmarks" / "data" / "public_sweeps"
EXAMPLES = ROOT / "examples" / "models"

Key = tuple[object, int]  # (placement: n_cpu_moe or -ot, ubatch)
Row = dict[str, Any]


def _all(row: Row) -> bool:
    return True


@dataclass(frozen=True)
class Sweep:
    """A public sweep, the example header of its model, and its machine."""

    file: str
    model: str  # examples/models/ header
    machine: str  # one name per machine: the sweeps of one machine share it
    calibrate: tuple[Key, ...]  # the configurations the benchmark's fit is made on
    gpu_profile: str | None  # a hardware profile of its GPU (None: there is none)
    note: str
    keep: Callable[[Row], bool] = _all
    device: str = "CUDA0"
    skip_first: bool = False  # the first row repeats the second's setting: the warm-up (notes)
    vram: str | None = None  # the card's memory where it has no profile (its class's figures)

    @property
    def data(self) -> dict[str, Any]:
        return _data(self.file)

    def rows(self) -> list[Row]:
        rows = self.data["rows"][1:] if self.skip_first else self.data["rows"]
        return [r for r in rows if self.keep(r) and r.get("ts")]

    def points(self) -> list[Measured]:
        facts = _facts(self.model)
        # the CUDA rules (op offload from 32 tokens): SYCL's offload_op is the same rule
        device = DeviceSpec(name=self.device, buft=self.device)
        return [measured(facts, r, device) for r in self.rows()]

    def keys(self) -> list[Key]:
        return [key(r) for r in self.rows()]

    def figures(self) -> MachineFigures:
        """The machine's public figures: its GPU's from a hardware profile, else those the
        sweep's source states (``machine``: ``gpu_memory_bandwidth_gb_s``, each with its
        source in the file); its PCIe link as the source states it (``pcie_gen``,
        ``pcie_lanes``: the slot, which may be narrower than the card), else the card's; the
        RAM's peak where the source states type, rate and channels (``ram_peak_gb_s``); None
        where none is given."""
        machine = self.data["machine"]
        memory = link = flops = None
        if self.gpu_profile is not None:
            profile = find_hardware_profile(self.gpu_profile)
            memory = profile.memory_bandwidth_bytes_per_s
            link = profile.pcie_bytes_per_s
            flops = getattr(profile, "flops_per_s", None)
        if memory is None and machine.get("gpu_memory_bandwidth_gb_s"):
            memory = machine["gpu_memory_bandwidth_gb_s"] * 1e9
        if machine.get("pcie_gen") and machine.get("pcie_lanes"):  # the machine's own slot
            link = pcie_bandwidth_bytes_per_s(machine["pcie_gen"], machine["pcie_lanes"])
        gpu = DeviceFigures(memory_bytes_per_s=memory, link_bytes_per_s=link, flops_per_s=flops)
        ram = machine.get("ram_peak_gb_s")
        return MachineFigures(devices=(gpu,), ram_bytes_per_s=ram * 1e9 if ram else None)

    def _stated(self, what: str, value: float, quantity: Quantity) -> FigureSource:
        return FigureSource(
            figure=f"{self.device} {what}",
            value=value,
            provenance="published",
            basis="the sweep's source",
            device=0,
            quantity=quantity,
        )

    def filled_figures(self) -> MachineFigures:
        """Every figure, as a new machine's forecast has them (jobs/figures.py): a profile's,
        the figures the sweep's source states (``figures``: memory bandwidth, the machine's
        own PCIe slot, the RAM's peak) and the RAM's peak the author posted
        (``ram_theoretical_gb_s_posted``), published; the rest the typical figures of the
        card's class, the typical RAM and CPU (core/figures.py), assumed."""
        public, machine = self.figures(), self.data["machine"]
        profile = find_hardware_profile(self.gpu_profile) if self.gpu_profile else None
        size = profile.vram_bytes if profile else parse_size(self.vram) if self.vram else None
        device = DeviceSpec(name=self.device, buft=self.device, total_bytes=size)
        ram = public.ram_bytes_per_s or (machine.get("ram_theoretical_gb_s_posted") or 0) * 1e9
        given = RamFigure(bytes_per_s=round(ram), source="given") if ram else None
        gpu, stated = public.devices[0], []
        memory, link = gpu.memory_bytes_per_s, gpu.link_bytes_per_s
        if memory is not None and profile is None:
            stated.append(self._stated("memory bandwidth", memory, "memory"))
        if link is not None and (profile is None or link != profile.pcie_bytes_per_s):
            stated.append(self._stated("host link bandwidth", link, "link"))
        filled = machine_figures((device,), (profile,), given, cores=None, stated=(stated,))
        if given is None:
            return filled
        sources = [
            replace(s, provenance="published", basis="the sweep's source")
            if s.quantity == "ram"
            else s
            for s in filled.sources
        ]
        return figures_of(1, sources)


@cache
def _data(file: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SWEEPS / file).read_text())
    return data


@cache
def _facts(model: str) -> ModelFacts:
    return facts_from_gguf(read_model(str(EXAMPLES / model)))


def placement(row: Row) -> Placement:
    if row.get("ot") == "exps=CPU":
        return Placement.all_experts_on_cpu()
    n = row["n_cpu_moe"]
    assert isinstance(n, int)
    return Placement.with_n_cpu_moe(n)


def key(row: Row) -> Key:
    ub = row["n_ubatch"]
    assert isinstance(ub, int)
    return (row.get("ot") or row["n_cpu_moe"], ub)


def _int(row: Row, name: str) -> int:
    """A row's count; 0 where the source gives none."""
    value = row.get(name)
    return value if isinstance(value, int) else 0


def measured(facts: ModelFacts, row: Row, device: DeviceSpec) -> Measured:
    """A row as the fit reads it: its placement's layout at its ubatch, its test, its speed."""
    ub, n_prompt = _int(row, "n_ubatch"), _int(row, "n_prompt")
    # a generation row whose length the source does not give: taken at depth 0
    n_gen = _int(row, "n_gen") or (0 if n_prompt else 1)
    batch = max(_int(row, "n_batch") or 2048, ub)
    settings = Settings(n_ctx=max(n_prompt + n_gen, 512), n_ubatch=ub, n_batch=batch)
    layout = placement_layout(facts, placement(row), settings, (device,))
    tps = row["ts"]
    assert isinstance(tps, (int, float))
    return Measured(layout, n_prompt, n_gen, _int(row, "n_depth"), float(tps))


QWEN3_30B = "Qwen3-30B-A3B-Q4_K_M.header.gguf"
QUADRO = "Quadro RTX 5000 + Core i9-14900K"

PUBLIC = (
    Sweep(
        file="moearc-b580-sycl-qwen3-30b-a3b-q4km-ncmoe-tg.json",
        model="Qwen3-30B-A3B-Q4_K_M.header.gguf",
        machine="Arc B580 + Core Ultra 7 265K",
        calibrate=((28, 512), (20, 512)),  # decode only: the ubatch does not change it
        gpu_profile=None,  # Intel Arc B580: no profile
        note="Arc B580 + Core Ultra 7 265K, SYCL; tg64 over --n-cpu-moe",
        device="SYCL0",
        vram="12G",
        skip_first=True,
    ),
    Sweep(
        file="moearc-b580-sycl-gptoss120b-mxfp4-ncmoe-tg.json",
        model="gpt-oss-120b-MXFP4.header.gguf",
        machine="Arc B580 + Core Ultra 7 265K",
        calibrate=((34, 512), (31, 512)),
        gpu_profile=None,
        note="the same machine, gpt-oss-120b; part of the run may have read from disk (notes)",
        device="SYCL0",
        vram="12G",
        skip_first=True,
    ),
    Sweep(
        file="rtx3090-gptoss120b-f16-ubatch-ncmoe.json",
        model="gpt-oss-120b-MXFP4.header.gguf",
        machine="RTX 3090",
        calibrate=((25, 256), (26, 4096)),
        gpu_profile="rtx3090",
        note="RTX 3090, CPU/RAM not given; N and -ub change together; the file is "
        "'F16' (non-expert tensors), the header MXFP4 (the expert bytes match, the rest not)",
    ),
    Sweep(
        file="ik_llama-pr698-gptoss120b-4080-5975wx-cpuexps-ubatch.json",
        model="gpt-oss-120b-MXFP4.header.gguf",
        machine="RTX 4080 + Ryzen 5975WX",
        calibrate=(("exps=CPU", 1024), ("exps=CPU", 4096)),
        gpu_profile="rtx4080",
        note="RTX 4080 + Ryzen 5975WX, ik_llama.cpp PR 698 rows (only used experts copied, as "
        "mainline); one placement, three ubatch sizes",
        keep=lambda row: row["build"] == "PR 698",
    ),
    Sweep(
        file="goodolclint-quadrortx5000-cuda-qwen3-30b-a3b-q4km-ncmoe-ddr5-4000.json",
        model=QWEN3_30B,
        machine=QUADRO,
        calibrate=((40, 512), (16, 512)),
        gpu_profile="quadro-rtx5000",
        note="Quadro RTX 5000 (PCIe 3.0 x16) + i9-14900K, DDR5-4000 2 channels, in a VM; "
        "N 40/24/16, pp512, pp8192, tg128",
    ),
    Sweep(
        file="goodolclint-quadrortx5000-cuda-qwen3-30b-a3b-q4km-ncmoe-ddr5-4800.json",
        model=QWEN3_30B,
        machine=QUADRO,
        calibrate=((40, 512), (16, 512)),
        gpu_profile="quadro-rtx5000",
        note="the same machine with its RAM at DDR5-4800",
    ),
    Sweep(
        file="ik_llama-pr698-gptoss20b-4080-7950x-cpuexps-ubatch.json",
        model="gpt-oss-20b-MXFP4.header.gguf",
        machine="RTX 4080 + Ryzen 7950X",
        calibrate=(("exps=CPU", 512), ("exps=CPU", 4096)),
        gpu_profile="rtx4080",
        note="RTX 4080 + Ryzen 7950X, ik_llama.cpp PR 698 rows; every expert on the CPU, "
        "ubatch 256..4096",
        keep=lambda row: row["build"] == "PR 698",
    ),
)

# measured with every layer on the GPU: what a card reaches of its figures, no RAM involved
ALL_ON_GPU = (
    Sweep(
        file="gpuext-rtx5090-cuda-gptoss20b-mxfp4-allgpu.json",
        model="gpt-oss-20b-MXFP4.header.gguf",
        machine="RTX 5090",
        calibrate=(),
        gpu_profile="rtx5090",
        note="RTX 5090, gpt-oss-20b fully on the GPU",
    ),
    Sweep(
        file="goodolclint-arcprob70-vulkan-qwen3-30b-a3b-q4km-allgpu.json",
        model=QWEN3_30B,
        machine="Arc Pro B70 + Core i9-14900K",
        calibrate=(),
        gpu_profile=None,
        note="Arc Pro B70 (Vulkan), Qwen3-30B-A3B fully on the GPU",
        device="Vulkan0",
        vram="32G",
    ),
)


def complete(m: Measured, machine: MachineFigures) -> bool:
    """Whether ``machine`` has every figure ``m``'s terms need."""
    found = forecast(m.layout, machine, depth=m.n_depth, n_prompt=max(m.n_prompt, 1))
    terms = found.decode_terms if m.is_decode else found.prefill_terms
    return all(t.seconds is not None for t in terms)


def prior_samples(without: str | None = None) -> list[tuple[str, Measured, MachineFigures]]:
    """(machine, point, its figures) of every public point whose machine's figures are all
    known, of every machine but ``without``."""
    samples = []
    for sweep in (*PUBLIC, *ALL_ON_GPU):
        if sweep.machine == without:
            continue
        figures = sweep.figures()
        samples += [(sweep.machine, m, figures) for m in sweep.points() if complete(m, figures)]
    return samples


def uncalibrated_errors() -> list[tuple[Sweep, Measured, float | None]]:
    """Every row of every public sweep with the relative error of its uncalibrated forecast
    (None: no forecast): each machine's rows forecast from its ``filled_figures`` with the
    typical factors fitted without its points (leave one machine out), what a machine moetune
    has never seen gets. core/prior.py's ``UNCALIBRATED_ERROR`` is their median."""
    priors: dict[str, SpeedPrior | None] = {}
    found = []
    for sweep in (*PUBLIC, *ALL_ON_GPU):
        if sweep.machine not in priors:
            try:
                priors[sweep.machine] = fit_prior(without=sweep.machine)
            except ValueError:  # too few points elsewhere
                priors[sweep.machine] = None
        figures = sweep.filled_figures()
        for m in sweep.points():
            speed = point_forecast(m, figures, None, priors[sweep.machine])
            found.append((sweep, m, relative_error(speed, m.tps)))
    return found


def _sig(value: float, digits: int = 3) -> float:
    return float(f"{value:.{digits}g}")


def fit_prior(without: str | None = None) -> SpeedPrior:
    """core/prior.py's typical factors, fitted on ``prior_samples(without)`` (3 significant
    digits)."""
    samples = prior_samples(without)
    fit = fit_pooled([(m, figures) for _, m, figures in samples])
    factors = {k: _sig(getattr(fit.efficiency, k)) for k in fit.fitted}
    machines = {machine for machine, _, _ in samples}
    return SpeedPrior(
        efficiency=Efficiency(**factors, points=len(samples)),
        block_token_s=_sig(fit.token_overhead_s),
        points=len(samples),
        machines=len(machines),
    )


# --- the routing exponent (core/routing.py) ------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """A copy-all / copy-used pair: one llama-bench prompt sweep over ubatch, every expert on
    the CPU, run by a build that copies all of a block's experts per ubatch and by one that
    copies only those the ubatch uses."""

    file: str
    copy_all: str  # the rows' ``build`` of each
    copy_used: str
    model: str | None = None  # examples/models/ header giving n_expert, n_used (None: the file)


PAIRS = (
    Pair(
        "llamacpp-pr15346-gptoss20b-cpuexps-ubatch.json",
        "master",
        "sl/sched-used-experts",
        "gpt-oss-20b-MXFP4.header.gguf",
    ),
    Pair(
        "ik_llama-pr698-gptoss20b-4080-7950x-cpuexps-ubatch.json",
        "main",
        "PR 698",
        "gpt-oss-20b-MXFP4.header.gguf",
    ),
    Pair(
        "ik_llama-pr698-gptoss120b-4080-5975wx-cpuexps-ubatch.json",
        "main",
        "PR 698",
        "gpt-oss-120b-MXFP4.header.gguf",
    ),
    Pair("ik_llama-pr698-deepseeklite-4080-7950x-cpuexps-ubatch.json", "main", "PR 698"),
)


class Touched(NamedTuple):
    """One ubatch size of a pair: the share of experts it touched, as the pair shows it."""

    architecture: str
    n_used: int
    n_expert: int
    n_ubatch: int
    share: float


def touched_of(pair: Pair) -> list[Touched]:
    """Per ubatch ``U``: copy all takes ``L + c U`` per ubatch (``L`` the whole copy, ``c U``
    the rest, a least-squares line over the sweep), copy used ``s L + c U``: ``s = 1 -
    (T_all - T_used) / L``."""
    data = _data(pair.file)
    if pair.model is not None:
        facts = _facts(pair.model)
        arch, n_used, n_expert = facts.architecture, facts.n_experts_used, facts.n_experts
    else:
        model = data["model"]
        arch, n_used, n_expert = model["arch"], model["n_expert_used"], model["n_expert"]
    per_ubatch: dict[str, dict[int, float]] = {pair.copy_all: {}, pair.copy_used: {}}
    for row in data["rows"]:
        if row["build"] in per_ubatch:
            per_ubatch[row["build"]][row["n_ubatch"]] = row["n_ubatch"] / row["ts"]
    every, used = per_ubatch[pair.copy_all], per_ubatch[pair.copy_used]
    sizes = sorted(every)
    mean_u = sum(sizes) / len(sizes)
    mean_t = sum(every[u] for u in sizes) / len(sizes)
    slope = sum((u - mean_u) * (every[u] - mean_t) for u in sizes) / sum(
        (u - mean_u) ** 2 for u in sizes
    )
    whole = mean_t - slope * mean_u
    return [Touched(arch, n_used, n_expert, u, 1 - (every[u] - used[u]) / whole) for u in sizes]


def _routing_error(points: list[Touched], exponent: float) -> float:
    return sum(
        (touched_share(p.n_used, p.n_expert, p.n_ubatch, exponent) - p.share) ** 2 for p in points
    )


def fit_routing() -> dict[str, float]:
    """core/routing.py's exponent of each architecture with pairs: the least squares of the
    touched share over its pairs' points, ``0 < a <= 1`` (3 significant digits)."""
    by_arch: dict[str, list[Touched]] = {}
    for pair in PAIRS:
        for point in touched_of(pair):
            by_arch.setdefault(point.architecture, []).append(point)
    fitted = {}
    for arch, points in sorted(by_arch.items()):
        low, high = 1e-3, 1.0  # the error is unimodal in a: a golden-section search
        ratio = (5**0.5 - 1) / 2
        for _ in range(80):
            a, b = high - ratio * (high - low), low + ratio * (high - low)
            if _routing_error(points, a) <= _routing_error(points, b):
                high = b
            else:
                low = a
        fitted[arch] = _sig((low + high) / 2)
    return fitted
