"""Compute-buffer estimates against numbers recorded from llama.cpp build 11434 (llama-server
with ggml-rpc-server as the device, and llama-fit-params on the header-only Qwen3-30B-A3B),
the public CUDA data point, and the segment replay against the whole graph
(server/test_compute.py reads the real llama-server's ``compute buffer size`` lines)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from moetune.core.backends import rules
from moetune.core.compute.alloc import simulate
from moetune.core.compute.estimate import estimate_compute
from moetune.core.compute.params import LayerHomes, Options, run_params
from moetune.core.compute.replay import NotSegmentable, Replay, replay_for, structure_of
from moetune.core.facts import ModelFacts
from moetune.gguf.roles import Role
from moetune.jobs.loader import load_model_facts
from moetune.units import MIB

from support.archfix_c import DEEPSEEK32, write_glm_dsa, write_mla
from support.compute import mib
from support.factory import ARCHS, ModelFactory, write_header_only, write_model

# --- recorded figures (no llama.cpp needed) -------------------------------------------------

# llama-server -ngl 99 --rpc ... -c CTX -ub UB -fa on|off: (RPC0, CPU) compute MiB.
TINY_QWEN3MOE = {
    (128, 512, True): (1.38, 0.63),
    (512, 4096, True): (9.01, 6.02),
    (2048, 16384, True): (84.05, 72.07),
    (512, 4096, False): (43.01, 10.51),
    (2048, 16384, False): (652.04, 138.05),
}


@pytest.mark.parametrize(("key", "printed"), TINY_QWEN3MOE.items())
def test_recorded_tiny_server_figures(
    tiny_models: dict[str, Path], key: tuple[int, int, bool], printed: tuple[float, float]
) -> None:
    ub, ctx, fa = key
    facts = load_model_facts(tiny_models["qwen3moe"])
    estimate = estimate_compute(facts, n_ctx=ctx, n_ubatch=ub, flash_attn=fa, device_kind="rpc")
    assert mib(estimate) == printed


# llama-fit-params -fitp on --rpc ...: (RPC0, Host) compute, floor(MiB).
FIT_PARAMS_30B: list[tuple[dict[str, Any], tuple[int, int]]] = [
    ({"n_ctx": 4096, "n_ubatch": 512}, (316, 20)),
    ({"n_ctx": 16384, "n_ubatch": 2048, "flash_attn": False}, (4360, 200)),
    ({"n_ctx": 4096, "n_ubatch": 512, "output_on_device": False}, (88, 304)),
    ({"n_ctx": 16384, "n_ubatch": 512, "flash_attn": False, "cpu_expert_layers": 20}, (1090, 54)),
    ({"n_ctx": 16384, "n_ubatch": 2048, "layers_on_device": 29}, (1203, 416)),
    ({"n_ctx": 4096, "n_ubatch": 128, "flash_attn": False, "layers_on_device": 29}, (76, 75)),
]


@pytest.mark.parametrize(("settings", "printed"), FIT_PARAMS_30B)
def test_recorded_fit_params_figures(
    header_only_big: Path, settings: dict[str, Any], printed: tuple[int, int]
) -> None:
    facts = load_model_facts(header_only_big)
    estimate = estimate_compute(facts, device_kind="rpc", n_seq=1, n_outputs=None, **settings)
    assert (estimate.device_bytes // MIB, estimate.host_bytes // MIB) == printed


@pytest.fixture(scope="module")
def qwen3_30b_f16(model_factory: ModelFactory) -> ModelFacts:
    return load_model_facts(model_factory.header_only("Qwen3-30B-A3B-F16.gguf", quant="F16"))


def test_public_cuda_data_point(qwen3_30b_f16: ModelFacts) -> None:
    """tools/fit-params/README.md: CUDA0 compute 898 MiB with experts of blocks 14-47 and the
    output layer on the CPU, ctx 4096 (build 6895, which output every token of the ubatch)."""
    placement: dict[str, Any] = {"output_on_device": False, "cpu_expert_blocks": range(14, 48)}
    estimate = estimate_compute(qwen3_30b_f16, n_ctx=4096, n_seq=1, n_outputs=None, **placement)
    printed = 898 * MIB
    assert abs(estimate.device_bytes - printed) <= max(0.10 * printed, 64 * MIB)


def test_cuda_op_offload_copies_cpu_weights(qwen3_30b_f16: ModelFacts) -> None:
    """With CPU experts, CUDA runs big batches itself and copies each expert tensor (384 MiB
    in F16) into its compute buffer; below 32 tokens, or without op offload, it does not."""
    expert = 128 * 768 * 2048 * 2
    common: dict[str, Any] = {"n_ctx": 4096, "cpu_expert_layers": 10}
    offload = estimate_compute(qwen3_30b_f16, **common)
    assert offload.device_bytes > expert
    small = estimate_compute(qwen3_30b_f16, n_ubatch=16, **common)
    off = estimate_compute(qwen3_30b_f16, op_offload=False, **common)
    rpc = estimate_compute(qwen3_30b_f16, device_kind="rpc", **common)
    assert max(small.device_bytes, off.device_bytes, rpc.device_bytes) < expert // 2


def test_logits_follow_n_outputs(qwen3_30b_f16: ModelFacts) -> None:
    """llama-server reserves logits for n_seq rows; llama-fit-params for every token."""
    server = estimate_compute(qwen3_30b_f16, n_ctx=4096)
    every = estimate_compute(qwen3_30b_f16, n_ctx=4096, n_outputs=None)
    logits = 151936 * 512 * 4
    assert every.device_bytes > logits > 3 * server.device_bytes


def test_quantized_cache_on_cuda_converts_kv_to_f16(qwen3_30b_f16: ModelFacts) -> None:
    """CUDA's prompt-size flash-attention kernels convert a quantized layer's K and V (here
    2 x 32 MiB) to F16 inside the FA node's allocation; the CPU-like device does not."""
    q8: dict[str, Any] = {"n_ctx": 32768, "type_k": "q8_0", "type_v": "q8_0"}
    cuda = estimate_compute(qwen3_30b_f16, **q8).device_bytes
    cuda_f16 = estimate_compute(qwen3_30b_f16, n_ctx=32768).device_bytes
    rpc = estimate_compute(qwen3_30b_f16, device_kind="rpc", **q8).device_bytes
    rpc_f16 = estimate_compute(qwen3_30b_f16, n_ctx=32768, device_kind="rpc").device_bytes
    assert cuda - cuda_f16 > 32 * MIB
    assert abs(rpc - rpc_f16) < 2 * MIB


def test_bad_arguments(tiny_models: dict[str, Path]) -> None:
    facts = load_model_facts(tiny_models["qwen3"])
    with pytest.raises(ValueError, match="device_kind"):
        estimate_compute(facts, n_ctx=4096, device_kind="metal")
    with pytest.raises(ValueError, match="positive"):
        estimate_compute(facts, n_ctx=0)


@pytest.mark.parametrize("arch", ["qwen3moe", "gpt-oss", "deepseek2", "glm4moe", "qwen35moe"])
def test_every_fixture_arch_and_placement(tiny_models: dict[str, Path], arch: str) -> None:
    facts = load_model_facts(tiny_models[arch])
    for kw in ({}, {"cpu_expert_layers": 4}, {"layers_on_device": 1}, {"output_on_device": False}):
        estimate = estimate_compute(facts, n_ctx=4096, **kw)
        assert estimate.device_bytes > 0
        assert estimate.host_bytes > 0


# --- the segment replay gives the whole-graph replay's figures ---------------------------------


def _placements(facts: ModelFacts, rng: random.Random) -> list[LayerHomes]:
    """Every kind of placement a planner tries (first or last blocks' experts on the CPU, -ngl,
    scattered blocks), and some at random."""
    n, tensors = facts.n_layers, facts.tensors

    def one(dev_start: int, blocks: Iterable[int], output: bool) -> LayerHomes:
        return LayerHomes.single(n, dev_start, blocks, output, tensors)

    found = [one(0, (), True), one(0, range(n), True)]
    found += [one(0, range(k), True) for k in (1, n // 2)]
    found += [one(0, range(n - k, n), k % 2 == 0) for k in (1, n // 2)]
    found += [one(k, (), k < n) for k in (1, n // 2, n)]
    for _ in range(4):
        blocks = [i for i in range(n) if rng.random() < 0.5]
        found.append(one(rng.randrange(n), blocks, rng.random() < 0.5))
    return found


REPLAY_SETTINGS = [  # (n_ctx, n_ubatch, flash attention, cache type, device kind, n_seq, outputs)
    (4096, 512, True, "q8_0", "cuda", 4, 4),
    (1024, 128, False, "f16", "rpc", 4, 4),
    (16384, 2048, True, "q4_0", "rpc", 1, None),
    (2048, 256, True, "f16", "cuda", 1, None),
]


@pytest.mark.parametrize("arch", [*ARCHS, "qwen3moe-q4k-mixed"])
@pytest.mark.parametrize("setting", REPLAY_SETTINGS, ids=lambda s: f"{s[4]}-ctx{s[0]}-ub{s[1]}")
def test_segment_replay_equals_the_whole_graph(
    tmp_path_factory: pytest.TempPathFactory, arch: str, setting: tuple[Any, ...]
) -> None:
    """The memoised segment replay (what estimate_compute uses) reproduces simulate() exactly,
    for every placement kind, on every fixture architecture; one replay serves them all."""
    root = tmp_path_factory.mktemp("replay")
    if arch == "qwen3moe-q4k-mixed":  # blocks of two signatures, as real Q4_K_M files have
        facts = load_model_facts(
            write_header_only(root / "mixed.gguf", n_layers=10, n_vocab=4096, n_merges=10)
        )
    else:
        facts = load_model_facts(write_model(root / f"{arch}.gguf", arch, n_layers=6))
    n_ctx, ubatch, fa, cache, kind, n_seq, outputs = setting
    run = run_params(n_ctx, ubatch, 2048, n_seq, outputs)
    opts = Options(fa, cache, cache if fa else "f16", (kind,), rules(kind).op_offload)
    replay = Replay(facts, run, opts)
    for placement in _placements(facts, random.Random(arch)):
        assert replay.segmented_peaks(placement) == simulate(facts, run, placement, opts), placement


@pytest.mark.parametrize("setting", REPLAY_SETTINGS, ids=lambda s: f"{s[4]}-ctx{s[0]}-ub{s[1]}")
def test_the_quants_of_one_model_share_one_replay(
    tmp_path_factory: pytest.TempPathFactory, setting: tuple[Any, ...]
) -> None:
    """Quants of one model (the same tensors, other types: F16, Q8_0, Q4_K_M's mixed blocks,
    Q2_K) share one replay; each quant's figures are still simulate()'s on its own tensors,
    on one device and on two, and a quant's op offload copies its own expert bytes."""
    root = tmp_path_factory.mktemp("replay-quants")
    quants = [
        load_model_facts(
            write_header_only(root / f"m-{q}.gguf", quant=q, n_layers=8, n_vocab=4096, n_merges=10)
        )
        for q in ("F16", "Q8_0", "Q4_K_M", "Q2_K")
    ]
    n_ctx, ubatch, fa, cache, kind, n_seq, outputs = setting
    run = run_params(n_ctx, ubatch, 2048, n_seq, outputs)
    one = Options(fa, cache, cache if fa else "f16", (kind,), rules(kind).op_offload)
    two = one._replace(kinds=(kind, "rpc"))
    assert len({structure_of(f) for f in quants}) == 1
    for opts, placements in (
        (one, _placements(quants[0], random.Random(str(setting)))),
        (two, _multi_placements(quants[0], 2, random.Random(str(setting)))),
    ):
        replay = replay_for(quants[0], run, opts)
        differ = 0
        for placement in placements:
            figures = set()
            for facts in quants:
                found = replay.peaks(placement, facts)
                assert found == simulate(facts, run, placement, opts), (facts.paths, placement)
                figures.add(tuple(found.items()))
            differ += len(figures) > 1
        assert replay.n_sources == len(quants)
        assert differ or kind != "cuda"  # op offload copies each quant's own host experts


def _multi_placements(facts: ModelFacts, n_dev: int, rng: random.Random) -> list[LayerHomes]:
    """Layers split over ``n_dev`` devices as -ts makes them (contiguous, in device order),
    with experts on the CPU or on another device, whole blocks and single parts."""
    n = facts.n_layers
    experts = [t for t in facts.tensors if t.role is Role.EXPERTS and t.layer is not None]
    found: list[LayerHomes] = []
    for _ in range(6):
        cuts = sorted(rng.sample(range(1, n + 1), n_dev - 1))
        homes = [sum(il >= c for c in cuts) for il in range(n + 1)]
        moves = frozenset(
            (t.name, rng.choice([-1, *range(n_dev)])) for t in experts if rng.random() < 0.3
        )
        found += [LayerHomes(tuple(homes)), LayerHomes(tuple(homes), moves)]
    return found


@pytest.mark.parametrize("arch", ["qwen3moe", "gpt-oss", "deepseek2", "qwen35moe"])
@pytest.mark.parametrize(
    "kinds", [("rpc", "rpc"), ("cuda", "cuda", "rpc"), ("rpc", "cuda"), ("rpc", "vulkan")]
)
def test_segment_replay_on_several_devices(
    tmp_path_factory: pytest.TempPathFactory, arch: str, kinds: tuple[str, ...]
) -> None:
    """Several devices (CUDA, Vulkan and RPC mixed): the segment replay still equals
    simulate()."""
    root = tmp_path_factory.mktemp("replay-multi")
    facts = load_model_facts(write_model(root / f"{arch}.gguf", arch, n_layers=6))
    run = run_params(4096, 512, 2048, 4, 4)
    opts = Options(True, "q8_0", "q8_0", kinds, any(rules(kind).op_offload for kind in kinds))
    replay = Replay(facts, run, opts)
    for placement in _multi_placements(facts, len(kinds), random.Random(arch + str(kinds))):
        assert replay.segmented_peaks(placement) == simulate(facts, run, placement, opts), placement


@pytest.mark.parametrize("setting", REPLAY_SETTINGS, ids=lambda s: f"{s[4]}-ctx{s[0]}-ub{s[1]}")
def test_sparse_attention_blocks_are_replayed_segment_by_segment(
    tmp_path: Path, setting: tuple[Any, ...]
) -> None:
    """DeepSeek sparse attention: each block's own leaf (the zero-filled top-k rows, which
    ggml-alloc allocates before the first node) is allocated by the head where its block
    puts it, and freed by its block; the figures are simulate()'s, on one device and on
    several. glm-dsa's shared layers reuse an earlier block's top-k: replayed whole."""
    shape = replace(DEEPSEEK32, n_layers=9, indexer=(4, 64, 2048))  # top-k rows of 4 MiB
    facts = load_model_facts(write_mla(tmp_path / "ds32.gguf", shape))
    n_ctx, ubatch, fa, cache, kind, n_seq, outputs = setting
    run = run_params(n_ctx, ubatch, 2048, n_seq, outputs)
    opts = Options(fa, cache, cache if fa else "f16", (kind,), rules(kind).op_offload)
    replay = Replay(facts, run, opts)
    for placement in _placements(facts, random.Random(str(setting))):
        assert replay.segmented_peaks(placement) == simulate(facts, run, placement, opts), placement
    two = opts._replace(kinds=(kind, "rpc"))
    replay = Replay(facts, run, two)
    for placement in _multi_placements(facts, 2, random.Random(str(setting))):
        assert replay.segmented_peaks(placement) == simulate(facts, run, placement, two), placement
    shared = load_model_facts(write_glm_dsa(tmp_path / "glm-dsa.gguf"))
    place = LayerHomes.single(shared.n_layers, 0, (), True, shared.tensors)
    with pytest.raises(NotSegmentable, match="earlier block"):
        Replay(shared, run, opts).segmented_peaks(place)
    assert Replay(shared, run, opts).peaks(place) == simulate(shared, run, place, opts)


def test_pipeline_parallelism_is_replayed_segment_by_segment(tmp_path: Path) -> None:
    """4 copies of every split input, allocated before the first node and never freed: the
    head allocates them, and the figures are simulate()'s; every device (not the CPU, whose
    inputs are copied anyway) needs more than without."""
    facts = load_model_facts(write_model(tmp_path / "q.gguf", "qwen3moe", n_layers=6))
    run = run_params(1024, 512, 2048, 4, 4)
    homes = (0, 0, 0, 1, 1, 1, 1)
    one = Options(True, "q8_0", "q8_0", ("rpc", "rpc"), False)
    four = one._replace(n_copies=4)
    plain = Replay(facts, run, one).peaks(LayerHomes(homes))
    copies = Replay(facts, run, four).segmented_peaks(LayerHomes(homes))
    assert copies == simulate(facts, run, LayerHomes(homes), four)
    assert copies[0] > plain[0] and copies[1] > plain[1]


@pytest.mark.parametrize("arch", ["qwen3moe", "gpt-oss", "deepseek2", "qwen35moe"])
@pytest.mark.parametrize("kinds", [("cuda", "cuda"), ("cuda", "rpc", "cuda"), ("rpc", "vulkan")])
def test_pipeline_replay_on_several_devices(
    tmp_path_factory: pytest.TempPathFactory, arch: str, kinds: tuple[str, ...]
) -> None:
    """Pipeline parallelism over several devices, with and without experts moved (llama.cpp
    turns it on only without overrides; the replay is exact either way): simulate()'s
    figures, one replay serving every placement."""
    root = tmp_path_factory.mktemp("replay-pipeline")
    facts = load_model_facts(write_model(root / f"{arch}.gguf", arch, n_layers=6))
    run = run_params(4096, 512, 2048, 4, 4)
    opts = Options(True, "q8_0", "q8_0", kinds, any(rules(k).op_offload for k in kinds), 4)
    replay = Replay(facts, run, opts)
    for placement in _multi_placements(facts, len(kinds), random.Random(arch + str(kinds))):
        assert replay.segmented_peaks(placement) == simulate(facts, run, placement, opts), placement
