"""core/speed.py: the bytes a generated token and a prompt ubatch move, against sums taken
here from the header-only examples' tensor lists (read with moetune's reader), and the time
from figures on hand-computed examples.

The expected values are derived from the tensor list by name alone, not by the module:

- routed experts: ``blk.N.ffn_{gate,up,down,gate_up}_{ch,}exps.*``; a 3-D tensor is a
  MUL_MAT_ID matrix, a 2-D one (gpt-oss) a bias read by ADD_ID; block N's experts are on the
  CPU under ``--n-cpu-moe n`` iff N < n;
- everything else of a block (attention, norms, router, shared experts, dense FFN) is read in
  full where its block is; ``output.*`` is read where the output layer is (the last device),
  in a ubatch with logits; ``token_embd`` (one row per token) is left out;
- a token reads ``k/n`` of the routed experts (k used of n); a ubatch of U tokens the share
  ``1 - (1 - k/n)^(U^a)``, ``a`` the router's exponent (core/routing.py's docstring, fitted on
  public copy-all / copy-used pairs): Qwen3-30B-A3B (qwen3moe) 1, uniform routing; gpt-oss
  0.398; DeepSeek-V3 (deepseek2) 0.952. At U = 512: Qwen3 1 - (120/128)^512 = 1 - 4.4e-15;
  gpt-oss-120b 512^0.398 = 11.98 picks, 1 - (124/128)^11.98 = 0.316; DeepSeek-V3 512^0.952
  = 379.5 picks, 1 - (248/256)^379.5 = 1 - 5.9e-6;
- KV bytes per cell and layer at f16 (2 bytes): GQA ``2 * head_count_kv * (key_length +
  value_length)``: Qwen3-30B-A3B 2 * 4 * 256 = 2048, gpt-oss-120b 2 * 8 * 128 = 2048;
  DeepSeek-V3 (MLA, no V) ``2 * (kv_lora_rank + rope.dimension_count)`` = 2 * 576 = 1152. A
  token at depth d sees d + 1 cells, a sliding-window layer (gpt-oss: even blocks, window
  128) at most 128.

Totals of the three headers (bytes), as the sums below find them:

    model            blocks  k/n    expert mats      expert biases  other in blocks  output
    Qwen3-30B-A3B    48      8/128  17 553 162 240   0              567 263 232      255 260 672
    gpt-oss-120b     36      4/128  60 914 073 600   159 252 480    1 070 327 808    615 340 800
    DeepSeek-V3      61      8/256  393 983 557 632  0              9 223 837 696    760 195 072
      (DeepSeek's "other" holds its shared experts, 1 538 998 272, read in full by every token)

So Qwen3-30B-A3B with every expert on one GPU reads 567 263 232 + 255 260 672 +
17 553 162 240 * 8/128 = 1 919 596 544 bytes of weights per token; at --n-cpu-moe 48 the GPU
reads 822 524 416 and RAM 1 097 072 640.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from functools import cache
from typing import NamedTuple

import pytest

from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts, facts_from_gguf
from moetune.core.placement import Override, Placement
from moetune.core.settings import Settings
from moetune.core.speed import (
    UNCALIBRATED,
    DeviceFigures,
    Efficiency,
    HomeLoad,
    MachineFigures,
    SpeedLayout,
    Traffic,
    forecast,
    placement_layout,
    prompt_traffic,
    token_traffic,
    ubatch_traffic,
)
from moetune.errors import BadValueError
from moetune.gguf.split import GGUFModel, read_model

from support.helpers import EXAMPLES

SETTINGS = Settings(n_ctx=32768)
ONE = (DeviceSpec(),)
TWO = (DeviceSpec(name="CUDA0", buft="CUDA0"), DeviceSpec(name="CUDA1", buft="CUDA1"))
EXPERT = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down|gate_up)_(ch|)exps\.")
BLOCK = re.compile(r"^blk\.(\d+)\.")


class Example(NamedTuple):
    file: str
    blocks: int
    used: int
    experts: int
    routing: float  # the router's exponent a (the module docstring)
    kv_cell_layer: int  # KV bytes per cell per layer (the module docstring's derivation)
    swa: frozenset[int]  # sliding-window blocks
    window: int


MODELS = {
    "qwen3": Example("Qwen3-30B-A3B-Q4_K_M", 48, 8, 128, 1.0, 2 * 4 * (128 + 128), frozenset(), 0),
    "gpt-oss": Example(
        "gpt-oss-120b-MXFP4", 36, 4, 128, 0.398, 2 * 8 * (64 + 64), frozenset(range(0, 36, 2)), 128
    ),
    "deepseek": Example(
        "DeepSeek-V3-0324-Q4_K_M", 61, 8, 256, 0.952, 2 * (512 + 64), frozenset(), 0
    ),
}


@cache
def _model(file: str) -> tuple[GGUFModel, ModelFacts]:
    model = read_model(EXAMPLES / f"{file}.header.gguf")
    return model, facts_from_gguf(model)


class Sums(NamedTuple):
    """Per block: expert matrices, expert biases, everything else; and the output layer."""

    mats: dict[int, int]
    biases: dict[int, int]
    other: dict[int, int]
    output: int


@cache
def _sums(file: str) -> Sums:
    model, _ = _model(file)
    mats: dict[int, int] = {}
    biases: dict[int, int] = {}
    other: dict[int, int] = {}
    output = 0
    for tensor in model.tensors:
        expert, block = EXPERT.match(tensor.name), BLOCK.match(tensor.name)
        nbytes = tensor.nbytes or 0
        if expert:
            into = mats if len(tensor.shape) == 3 else biases
            into[int(expert[1])] = into.get(int(expert[1]), 0) + nbytes
        elif block:
            other[int(block[1])] = other.get(int(block[1]), 0) + nbytes
        elif tensor.name.startswith("output"):
            output += nbytes
    return Sums(mats, biases, other, output)


def test_the_sums_are_the_tables() -> None:
    """The sums the expectations use are the module docstring's table."""
    table = {
        "qwen3": (17_553_162_240, 0, 567_263_232, 255_260_672),
        "gpt-oss": (60_914_073_600, 159_252_480, 1_070_327_808, 615_340_800),
        "deepseek": (393_983_557_632, 0, 9_223_837_696, 760_195_072),
    }
    for key, (mats, biases, other, output) in table.items():
        sums = _sums(MODELS[key].file)
        assert sum(sums.mats.values()) == mats
        assert sum(sums.biases.values()) == biases
        assert sum(sums.other.values()) == other
        assert sums.output == output


def _split(n_blocks: int, two: bool) -> tuple[float, ...]:
    """``-ts A,B`` putting blocks 0..A-1 on CUDA0 and the rest and the output on CUDA1:
    the split points are A/(n+1) and 1, block il goes to CUDA0 iff il/(n+1) < A/(n+1)."""
    half = n_blocks // 2
    return (float(half), float(n_blocks + 1 - half)) if two else ()


def _device_of(example: Example, block: int, two: bool) -> int:
    return 0 if not two or block < example.blocks // 2 else 1


PLACEMENTS = ("gpu", "half", "cpu")


def _n_cpu(example: Example, which: str) -> int:
    return {"gpu": 0, "half": example.blocks // 2, "cpu": example.blocks}[which]


CASES = [(key, which, two) for key in MODELS for which in PLACEMENTS for two in (False, True)]


def _layout(key: str, which: str, two: bool) -> SpeedLayout:
    example = MODELS[key]
    _, facts = _model(example.file)
    n = _n_cpu(example, which)
    placement = Placement.with_n_cpu_moe(n, tensor_split=_split(example.blocks, two))
    return placement_layout(facts, placement, SETTINGS, TWO if two else ONE)


@pytest.mark.parametrize(("key", "which", "two"), CASES)
def test_bytes_per_generated_token(key: str, which: str, two: bool) -> None:
    """Each device reads its blocks' other weights in full, k/n of its routed experts and
    its KV at the depth; RAM reads k/n of the CPU's experts (no KV: every block offloaded)."""
    example = MODELS[key]
    sums = _sums(example.file)
    n_cpu = _n_cpu(example, which)
    share = example.used / example.experts
    depth = 4096
    n_devices = 2 if two else 1
    weights = [0.0] * n_devices
    kv = [0.0] * n_devices
    ram = 0.0
    for block in range(example.blocks):
        device = _device_of(example, block, two)
        experts = sums.mats.get(block, 0) + sums.biases.get(block, 0)
        weights[device] += sums.other[block]
        if block < n_cpu:
            ram += share * experts
        else:
            weights[device] += share * experts
        cells = min(depth + 1, example.window) if block in example.swa else depth + 1
        kv[device] += example.kv_cell_layer * cells
    weights[-1] += sums.output

    traffic = token_traffic(_layout(key, which, two), depth)

    assert traffic.device_weight_bytes == pytest.approx(weights, rel=1e-12)
    assert traffic.device_kv_bytes == pytest.approx(kv, rel=1e-12)
    assert traffic.ram_weight_bytes == pytest.approx(ram, rel=1e-12)
    assert traffic.ram_kv_bytes == 0
    assert traffic.link_bytes == (0.0,) * n_devices  # one token: below op offload's batch


@pytest.mark.parametrize(("key", "which", "two"), CASES)
def test_bytes_per_prompt_ubatch(key: str, which: str, two: bool) -> None:
    """A 512-token ubatch without logits: each device reads its other weights and the
    touched share of its experts; the CPU's expert matrices cross CUDA0's link at the touched
    share, their biases (ADD_ID) whole; nothing is read from RAM."""
    example = MODELS[key]
    sums = _sums(example.file)
    n_cpu = _n_cpu(example, which)
    touched = 1 - (1 - example.used / example.experts) ** (512**example.routing)
    n_devices = 2 if two else 1
    weights = [0.0] * n_devices
    link = 0.0
    for block in range(example.blocks):
        device = _device_of(example, block, two)
        mats, biases = sums.mats.get(block, 0), sums.biases.get(block, 0)
        weights[device] += sums.other[block]
        if block < n_cpu:
            link += touched * mats + biases
        else:
            weights[device] += touched * (mats + biases)

    traffic = ubatch_traffic(_layout(key, which, two), 512, depth=0)

    assert traffic.device_weight_bytes == pytest.approx(weights, rel=1e-12)
    assert traffic.link_bytes == pytest.approx([link] + [0.0] * (n_devices - 1), rel=1e-12)
    assert traffic.ram_weight_bytes == 0
    cells = [0.0] * n_devices
    for block in range(example.blocks):  # 512 cells; 128 + 511 for a window layer
        cells[_device_of(example, block, two)] += example.kv_cell_layer * 512
    assert traffic.device_kv_bytes == pytest.approx(cells, rel=1e-12)


def test_shared_experts_are_read_in_full() -> None:
    """DeepSeek-V3 with every routed expert on the CPU: the GPU still reads every shared
    expert (1 538 998 272 bytes) each token."""
    model, _ = _model("DeepSeek-V3-0324-Q4_K_M")
    shared = sum(t.nbytes or 0 for t in model.tensors if "_shexp." in t.name)
    assert shared == 1_538_998_272
    sums = _sums("DeepSeek-V3-0324-Q4_K_M")
    others = sum(sums.other.values()) + sums.output
    gpu = token_traffic(_layout("deepseek", "cpu", False), 0).device_weight_bytes[0]
    assert gpu == others  # attention, norms, routers, dense blocks, shared experts, output
    without = token_traffic(_layout("deepseek", "cpu", False), 0)
    assert without.ram_weight_bytes == pytest.approx(393_983_557_632 * 8 / 256, rel=1e-12)


def test_an_override_moves_one_tensor() -> None:
    """``-ot blk\\.5\\.ffn_down_exps=CPU``: RAM reads 8/128 of that one tensor per token."""
    model, facts = _model("Qwen3-30B-A3B-Q4_K_M")
    down = next(t.nbytes or 0 for t in model.tensors if t.name == "blk.5.ffn_down_exps.weight")
    placement = Placement(overrides=(Override(r"blk\.5\.ffn_down_exps"),))
    layout = placement_layout(facts, placement, SETTINGS, ONE)
    traffic = token_traffic(layout, 0)
    assert traffic.ram_weight_bytes == pytest.approx(down * 8 / 128, rel=1e-12)
    everything = token_traffic(_layout("qwen3", "gpu", False), 0).device_weight_bytes[0]
    assert traffic.device_weight_bytes[0] + traffic.ram_weight_bytes == pytest.approx(everything)


def test_op_offload_starts_at_32_tokens() -> None:
    """ggml-cuda's offload_op takes a MUL_MAT_ID of 32 tokens or more (its ne[2]): at 31 the
    CPU reads the touched experts from RAM, at 32 they cross the link."""
    layout = _layout("qwen3", "cpu", False)
    experts = 17_553_162_240
    below = ubatch_traffic(layout, 31)
    assert below.link_bytes == (0.0,)
    assert below.ram_weight_bytes == pytest.approx(experts * (1 - (120 / 128) ** 31), rel=1e-12)
    at = ubatch_traffic(layout, 32)
    assert at.link_bytes[0] == pytest.approx(experts * (1 - (120 / 128) ** 32), rel=1e-12)
    assert at.ram_weight_bytes == 0


def test_expert_biases_follow_their_own_batch() -> None:
    """gpt-oss's expert biases are ADD_ID ops of ``4 * U`` rows: at U = 16 the matrices stay
    on the CPU (16 < 32) while the biases (64 rows) are copied whole; at U = 4 both stay. The
    CPU reads the touched share: 16^0.398 = 3.01 picks' worth, 4^0.398 = 1.74."""
    layout = _layout("gpt-oss", "cpu", False)
    mats, biases = 60_914_073_600, 159_252_480
    sixteen = ubatch_traffic(layout, 16)
    touched = 1 - (124 / 128) ** (16**0.398)
    assert sixteen.link_bytes[0] == pytest.approx(biases, rel=1e-12)
    assert sixteen.ram_weight_bytes == pytest.approx(touched * mats, rel=1e-12)
    four = ubatch_traffic(layout, 4)
    assert four.link_bytes == (0.0,)
    touched = 1 - (124 / 128) ** (4**0.398)
    assert four.ram_weight_bytes == pytest.approx(touched * (mats + biases), rel=1e-12)


def test_no_op_offload_computes_on_the_cpu() -> None:
    """``--no-op-offload``: nothing crosses the link; the CPU reads the touched experts and
    computes 2 FLOPs per active expert parameter per token."""
    _, facts = _model("Qwen3-30B-A3B-Q4_K_M")
    placement = Placement.with_n_cpu_moe(48)
    layout = placement_layout(facts, placement, SETTINGS, ONE, op_offload=False)
    traffic = ubatch_traffic(layout, 512)
    assert traffic.link_bytes == (0.0,)
    touched = 1 - (120 / 128) ** 512
    assert traffic.ram_weight_bytes == pytest.approx(17_553_162_240 * touched, rel=1e-12)
    # 48 blocks x 3 matrices x 2048 x 768 x 128 parameters, 8/128 of them active
    params = 48 * 3 * 2048 * 768 * 128
    assert traffic.cpu_flops == pytest.approx(2 * params * 8 / 128 * 512, rel=1e-12)


def test_offload_goes_to_the_first_cuda_device() -> None:
    """RPC devices have no offload_op: with RPC0 before CUDA0 the copies go to CUDA0; with
    only RPC devices the CPU computes its experts."""
    _, facts = _model("Qwen3-30B-A3B-Q4_K_M")
    rpc = DeviceSpec(name="RPC0", buft="RPC0[127.0.0.1:50052]", kind="rpc", overhead_bytes=0)
    placement = Placement.with_n_cpu_moe(48, tensor_split=(24.0, 25.0))
    mixed = placement_layout(facts, placement, SETTINGS, (rpc, TWO[0]))
    assert ubatch_traffic(mixed, 512).link_bytes[0] == 0
    assert ubatch_traffic(mixed, 512).link_bytes[1] > 0
    alone = placement_layout(facts, Placement.with_n_cpu_moe(48), SETTINGS, (rpc,))
    traffic = ubatch_traffic(alone, 512)
    assert traffic.link_bytes == (0.0,)
    assert traffic.ram_weight_bytes == pytest.approx(
        17_553_162_240 * (1 - (120 / 128) ** 512), rel=1e-12
    )


def test_cpu_layers_read_their_cache_from_ram() -> None:
    """``-ngl 47``: block 0 is on the CPU, its weights and its KV cache in RAM."""
    model, facts = _model("Qwen3-30B-A3B-Q4_K_M")
    block0 = sum(t.nbytes or 0 for t in model.tensors if t.name.startswith("blk.0."))
    layout = placement_layout(facts, Placement(n_gpu_layers=48), SETTINGS, ONE)
    traffic = token_traffic(layout, 1023)
    sums = _sums("Qwen3-30B-A3B-Q4_K_M")
    assert traffic.ram_weight_bytes == pytest.approx(
        sums.other[0] + sums.mats[0] * 8 / 128, rel=1e-12
    )
    assert block0 == sums.other[0] + sums.mats[0]
    assert traffic.ram_kv_bytes == 2048 * 1024


def test_everything_on_the_cpu() -> None:
    """``-ngl 0``: RAM reads every block's other weights, k/n of the experts, the KV cache
    and, with logits only, the output layer (a prompt's first ubatch has none)."""
    _, facts = _model("Qwen3-30B-A3B-Q4_K_M")
    layout = placement_layout(facts, Placement(n_gpu_layers=0), SETTINGS, ONE)
    token = token_traffic(layout, 0)
    assert token.device_weight_bytes == (0.0,)
    expected = 567_263_232 + 255_260_672 + 17_553_162_240 * 8 / 128
    assert token.ram_weight_bytes == pytest.approx(expected, rel=1e-12)
    assert token.ram_kv_bytes == 48 * 2048  # one cell of 48 layers
    ubatch = ubatch_traffic(layout, 16)  # below op offload's batch: all on the CPU
    expected = 567_263_232 + 17_553_162_240 * (1 - (120 / 128) ** 16)
    assert ubatch.ram_weight_bytes == pytest.approx(expected, rel=1e-12)


def test_prompt_in_ubatches() -> None:
    """A 1000-token prompt at -ub 512 is a 512-token ubatch and a 488-token one, the last with
    the one logits row: the output layer is read once."""
    _, facts = _model("Qwen3-30B-A3B-Q4_K_M")
    layout = placement_layout(facts, Placement(), SETTINGS, ONE)
    whole = prompt_traffic(layout, 1000)
    parts = ubatch_traffic(layout, 512, 0) + ubatch_traffic(layout, 488, 512, n_outputs=1)
    assert whole == parts
    assert whole.n_tokens == 1000
    head = ubatch_traffic(layout, 488, 512, n_outputs=1).device_weight_bytes[0]
    assert head - ubatch_traffic(layout, 488, 512).device_weight_bytes[0] == 255_260_672


# --- the time from figures ---------------------------------------------------------------------

# A hand-made layout: the GPU holds 1 GB of dense weights and no experts, the CPU 16 GB of
# experts (8 of 128 used) with 8e9 parameters; no cache.
HAND = SpeedLayout(
    devices=(HomeLoad(dense_bytes=10**9, dense_params=10**9),),
    cpu=HomeLoad(expert_bytes=16 * 10**9, expert_params=8 * 10**9),
    device_names=("CUDA0",),
    n_expert=128,
    n_expert_used=8,
    n_swa=0,
    n_cells=4096,
    n_ubatch=512,
    offload_to=0,
)
FIGURES = MachineFigures(
    devices=(DeviceFigures(memory_bytes_per_s=1e12, link_bytes_per_s=25e9, flops_per_s=100e12),),
    ram_bytes_per_s=50e9,
    cpu_flops_per_s=1e12,
)


def test_decode_time_by_hand() -> None:
    """A token: the GPU reads 1 GB at 1 TB/s (1 ms), RAM 16 GB * 8/128 = 1 GB at 50 GB/s
    (20 ms): 21 ms, 47.62 tok/s. Half the RAM's efficiency doubles its term: 41 ms."""
    found = forecast(HAND, FIGURES, depth=0, n_prompt=1024)
    assert found.decode_tok_s == pytest.approx(1 / 0.021)
    assert found.calibration.label == UNCALIBRATED
    assert found.missing == []
    slower = forecast(HAND, FIGURES, efficiency=Efficiency(ram=0.5, points=4))
    assert slower.decode_tok_s == pytest.approx(1 / 0.041)
    assert slower.calibration.points == 4


def test_prefill_time_by_hand() -> None:
    """1024 tokens in two 512-token ubatches. Each: the experts touched, t = 1 - (120/128)^512
    (1 - 4.4e-15), cross the link (16e9 t B at 25 GB/s = 0.64 s) and the GPU reads them and its
    own 1 GB (17e9 B at 1 TB/s = 17 ms); it computes 2 * 512 * (1e9 + 8e9 * 8/128) = 1.536e12
    FLOPs (15.36 ms at 100 TFLOP/s). The CPU does nothing. The output layer (none) adds
    nothing: 2 * (0.64 + 0.017 + 0.01536) s for 1024 tokens."""
    touched = 1 - (120 / 128) ** 512
    per_ubatch = 16e9 * touched / 25e9 + (1e9 + 16e9 * touched) / 1e12 + 1.536e12 / 100e12
    found = forecast(HAND, FIGURES, n_prompt=1024)
    assert found.prefill_tok_s == pytest.approx(1024 / (2 * per_ubatch))
    terms = {t.term: t for t in found.prefill_terms}
    assert terms["CUDA0 link"].amount == pytest.approx(2 * 16e9 * touched)
    assert terms["CPU compute"].seconds == 0
    assert found.n_ubatch == 512


def test_unknown_figures_are_named() -> None:
    """No RAM bandwidth: the decode forecast is unknown and says why; no FLOP/s: the prefill
    one. A term that moves nothing needs no figure."""
    blind = MachineFigures(devices=(DeviceFigures(memory_bytes_per_s=1e12),))
    found = forecast(HAND, blind)
    assert found.decode_tok_s is None
    assert found.prefill_tok_s is None
    assert found.missing == [
        "RAM bandwidth",
        "CUDA0 host link bandwidth",
        "CUDA0 FLOP/s",
    ]
    on_gpu = replace(HAND, cpu=HomeLoad())
    found = forecast(on_gpu, blind)
    assert found.decode_tok_s == pytest.approx(1000.0)  # 1 GB at 1 TB/s
    assert found.missing == ["CUDA0 FLOP/s"]


def test_figures_for_each_device() -> None:
    with pytest.raises(ValueError, match="figures for 2 devices"):
        forecast(HAND, MachineFigures(devices=(DeviceFigures(), DeviceFigures())))


def test_efficiency_is_bounded() -> None:
    """A term cannot beat its figure: factors are in (0, 1]."""
    with pytest.raises(BadValueError):
        Efficiency(link=1.5)
    with pytest.raises(BadValueError):
        Efficiency(ram=0)


def test_uniform_routing() -> None:
    """The expected share of experts touched: one token k/n, many tokens nearly all."""
    assert HAND.touched(1) == 8 / 128
    assert HAND.touched(2) == pytest.approx(1 - (120 / 128) ** 2)
    assert math.isclose(HAND.touched(4096), 1.0)
    assert replace(HAND, n_expert=0).touched(512) == 0


def test_a_concentrated_router_touches_fewer() -> None:
    """gpt-oss's router (a = 0.398, the module docstring): a 512-token ubatch of gpt-oss-120b
    touches 1 - (124/128)^(512^0.398) = 0.316 of a block's experts, Qwen3-30B-A3B's all but
    4.4e-15; one token k/n either way."""
    oss, qwen = _layout("gpt-oss", "cpu", False), _layout("qwen3", "cpu", False)
    assert oss.routing_exponent == 0.398 and qwen.routing_exponent == 1.0
    assert oss.touched(512) == pytest.approx(0.31628, abs=1e-5)
    assert oss.touched(1) == 4 / 128
    assert 1 - qwen.touched(512) == pytest.approx(4.46e-15, rel=1e-2)


def test_traffic_adds_up() -> None:
    a = Traffic(1, (1.0,), (2.0,), (3.0,), 4.0, 5.0, (6.0,), 7.0)
    assert (a + a).device_memory_bytes == (12.0,)
    assert (a + a).ram_bytes == 18.0
