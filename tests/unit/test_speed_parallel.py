"""core/speed.py at N concurrent streams (``--parallel N``): one decode step is one ubatch of
N tokens, one of each stream. Expected values derived here from the layout's parts:

- routed experts: the touched share at U = N, ``1 - (1 - k/n)^N`` for uniform routing (Qwen3:
  k/n = 8/128; at N = 4: 1 - (15/16)^4 = 0.2275);
- dense weights and the output layer: once per step, not once per stream;
- the KV cache: each stream reads its own cells, N times one stream's read at the depth;
- from the op-offload threshold (32) on, the CPU's weights are copied over the host link
  (the CPU's expert matrices: their touched share) and the RAM reads none of them.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from moetune.core.devices import DeviceSpec
from moetune.core.facts import facts_from_gguf
from moetune.core.goal import Goal, goal_of, parse_objective
from moetune.core.placement import Placement
from moetune.core.settings import Settings
from moetune.core.speed import (
    DeviceFigures,
    MachineFigures,
    SpeedLayout,
    forecast,
    placement_layout,
    streams_traffic,
    token_traffic,
)
from moetune.errors import BadValueError
from moetune.gguf.split import read_model

from support.helpers import EXAMPLE_QWEN

SETTINGS = Settings(n_ctx=32768)
CUDA = (DeviceSpec(name="CUDA0", buft="CUDA0"),)
MACHINE = MachineFigures(
    devices=(DeviceFigures(memory_bytes_per_s=1e12, link_bytes_per_s=25e9, flops_per_s=80e12),),
    ram_bytes_per_s=60e9,
    cpu_flops_per_s=1e12,
)


def _layout(n_cpu_moe: int) -> SpeedLayout:
    facts = facts_from_gguf(read_model(EXAMPLE_QWEN))
    placement = Placement.with_n_cpu_moe(n_cpu_moe)
    return placement_layout(facts, placement, SETTINGS, CUDA)


def test_one_stream_is_one_token() -> None:
    layout = _layout(20)
    assert streams_traffic(layout, 1, 100) == token_traffic(layout, 100)
    single = forecast(layout, MACHINE, depth=100)
    one = forecast(layout, MACHINE, depth=100, streams=1)
    assert one.decode_tok_s == single.decode_tok_s
    assert one.decode_tps_per_stream == one.decode_tps_aggregate == single.decode_tok_s
    assert single.streams == 0 and single.decode_tps_aggregate is None


def test_a_step_reads_the_union_of_the_experts_and_each_streams_cache() -> None:
    layout = _layout(20)
    cpu, gpu = layout.cpu, layout.devices[0]
    one, four = token_traffic(layout, 100), streams_traffic(layout, 4, 100)
    touched = 1 - (1 - 8 / 128) ** 4
    assert math.isclose(touched, 0.2275, abs_tol=1e-4)
    assert math.isclose(
        four.ram_weight_bytes, cpu.dense_bytes + touched * cpu.expert_bytes, rel_tol=1e-12
    )
    expected_gpu = gpu.dense_bytes + gpu.head_bytes + touched * gpu.expert_bytes
    assert math.isclose(four.device_weight_bytes[0], expected_gpu, rel_tol=1e-12)
    # each stream its own cells at depth 100 (101 seen by its token)
    assert math.isclose(four.device_kv_bytes[0], 4 * one.device_kv_bytes[0], rel_tol=1e-12)
    assert four.device_kv_bytes[0] == 4 * gpu.kv_cell_bytes * 101
    assert four.link_bytes == (0.0,)  # below the op-offload threshold: the CPU reads RAM


def test_from_the_threshold_the_cpu_experts_are_copied() -> None:
    layout = _layout(20)
    below, at = streams_traffic(layout, 31, 0), streams_traffic(layout, 32, 0)
    assert below.link_bytes == (0.0,) and below.ram_weight_bytes > 0
    cpu = layout.cpu
    expected = cpu.dense_bytes + layout.touched(32) * cpu.expert_bytes
    assert math.isclose(at.link_bytes[0], expected, rel_tol=1e-12)
    assert at.ram_weight_bytes == 0.0
    # a threshold above the streams keeps them on the CPU
    high = replace(layout, op_offload_min_batch=64)
    assert streams_traffic(high, 32, 0).link_bytes == (0.0,)


@pytest.mark.parametrize("n_cpu_moe", [0, 20, 48])
def test_each_stream_slows(n_cpu_moe: int) -> None:
    layout = _layout(n_cpu_moe)
    single = forecast(layout, MACHINE).decode_tok_s
    assert single is not None
    last = single
    for n in (2, 4, 8):
        found = forecast(layout, MACHINE, streams=n)
        assert found.decode_tok_s == found.decode_tps_per_stream
        per, total = found.decode_tps_per_stream, found.decode_tps_aggregate
        assert per is not None and total is not None
        assert math.isclose(total, n * per, rel_tol=1e-12)
        assert per < last
        last = per


def test_aggregate_rises_where_the_dense_weights_count() -> None:
    """Every weight on the GPU: the dense weights (822 MB with the output layer) are read once
    for all the streams, the experts' touched share grows slower than the streams, so the
    aggregate rises. With every expert in RAM (uniform routing, 8 of 128) a second stream
    nearly doubles the RAM's reads (1 - (15/16)^2 = 0.121 against 0.0625): the aggregate
    barely moves, which the law says of uniform routing."""
    layout = _layout(0)
    totals = [forecast(layout, MACHINE, streams=n).decode_tps_aggregate for n in (1, 2, 4, 8)]
    assert all(t is not None for t in totals)
    assert sorted(totals) == totals and len(set(totals)) == 4  # type: ignore[type-var]
    cpu = _layout(48)
    one, two = (forecast(cpu, MACHINE, streams=n).decode_tps_aggregate for n in (1, 2))
    assert one is not None and two is not None
    assert abs(two / one - 1) < 0.1


def test_a_step_time_is_its_terms() -> None:
    """Two streams: the memory reads of the step, no link below the threshold, and the
    compute of the second stream's token (the first's runs under the reads)."""
    layout = _layout(48)
    found = forecast(layout, MACHINE, streams=2)
    traffic = streams_traffic(layout, 2, 0)
    seconds = (
        traffic.device_memory_bytes[0] / 1e12
        + traffic.ram_bytes / 60e9
        + traffic.device_flops[0] / 2 / 80e12
        + traffic.cpu_flops / 2 / 1e12
    )
    assert found.decode_tok_s is not None
    assert math.isclose(found.decode_tok_s, 1 / seconds, rel_tol=1e-9)


def test_throughput_and_latency_objectives() -> None:
    layout = _layout(20)
    found = forecast(layout, MACHINE, streams=4)
    assert found.decode_tps_aggregate is not None
    assert Goal("throughput").score(found) == pytest.approx(found.decode_tps_aggregate)
    assert Goal("latency").score(found) == found.decode_tps_per_stream
    assert Goal("decode").score(found) == found.decode_tps_per_stream
    assert goal_of("throughput", None).n_prompt == goal_of("decode", None).n_prompt
    single = forecast(layout, MACHINE)  # one stream: throughput is decode
    assert Goal("throughput").score(single) == single.decode_tok_s
    assert parse_objective("latency") == "latency"
    with pytest.raises(BadValueError) as refused:
        parse_objective("speed")
    assert refused.value.hint is not None and "throughput or latency" in refused.value.hint


def test_settings_streams_only_when_given() -> None:
    assert SETTINGS.streams is None  # -np auto: one stream forecast
    given = replace(SETTINGS, n_seq=4, kv_unified=False, explicit_parallel=True)
    assert given.streams == 4
