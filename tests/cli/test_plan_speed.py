"""`moetune plan`'s speed forecast: from a ``--gpu`` hardware profile's figures and
``--ram-bandwidth``, in the JSON and as one line of text."""

from __future__ import annotations

import json
import re

import pytest

from moetune.core.prior import PUBLIC_PRIOR, UNCALIBRATED_ERROR
from moetune.errors import ExitCode
from moetune.gguf.split import read_model
from moetune.store.hardware import find_hardware_profile
from moetune.units import GIB

from support.helpers import EXAMPLE_QWEN, cli
from support.plan import plan

QWEN = str(EXAMPLE_QWEN)
EXPERT = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down)_exps\.")


def test_json_forecast_from_a_profile_and_the_ram_bandwidth() -> None:
    """rtx4070 (504 GB/s, its profile) and 60 GiB/s of RAM: a token reads, on the GPU, every
    non-expert weight but token_embd, 8/128 of the experts of blocks N..47 and one q8_0 KV
    cell of 48 layers (2 x 544 bytes each); from RAM 8/128 of blocks 0..N-1's experts; each
    at core/prior.py's typical share of its figure, plus its fixed time per block (48). The
    forecast is of the first command: at the planned N given with --n-cpu-moe, the N form
    (without it, the -ot form, which keeps more on the GPU and is forecast faster)."""
    given = ("--gpu", "rtx4070", "--ram", "64G", "--ram-bandwidth", "60G/s", "--json")
    code, out = plan(QWEN, *given)
    assert code == 0, out
    default = json.loads(out)
    n = default["n_cpu_moe"]
    assert n > 0  # 12 GB: some experts on the CPU
    code, out = plan(QWEN, *given, "--n-cpu-moe", str(n))
    assert code == 0, out
    data = json.loads(out)
    assert data["first"]["form"] == "n_cpu_moe"
    assert default["first"]["form"] == "override"
    assert default["forecast"]["decode_tok_s"] > data["forecast"]["decode_tok_s"]
    gpu = ram = 0.0
    for tensor in read_model(QWEN).tensors:
        nbytes = tensor.nbytes or 0
        match = EXPERT.match(tensor.name)
        if match and int(match[1]) < n:
            ram += nbytes * 8 / 128
        elif match:
            gpu += nbytes * 8 / 128
        elif tensor.name != "token_embd.weight":
            gpu += nbytes
    gpu += 48 * 2 * 544
    found = data["forecast"]
    eff, prior = PUBLIC_PRIOR.efficiency, PUBLIC_PRIOR
    fixed = 48 * prior.block_token_s
    expected = 1 / (gpu / (504e9 * eff.device_memory) + ram / (60 * GIB * eff.ram) + fixed)
    assert abs(found["decode_tok_s"] - expected) < 1e-9 * expected
    assert found["calibration"] == {
        "points": 0,
        "median_error": None,
        "max_error": None,
        "own_points": 0,
        "other_models": [],
    }
    assert found["expected_error"] == UNCALIBRATED_ERROR
    assert found["prefill_tok_s"] > 0  # its FLOP/s: the profile's, or its class's
    assert found["missing"] == []
    figures = {f["figure"]: f for f in found["figures"]}
    profile = find_hardware_profile("rtx4070")
    flops = figures["CUDA0 FLOP/s"]["provenance"]
    if profile.fp16_tflops is None:
        assert flops == "assumed"
    else:
        assert flops == ("derived" if "fp16_tflops" in profile.derived else "published")
    assert figures["CUDA0 memory bandwidth"]["provenance"] == "published"
    assert figures["RAM bandwidth"] == {
        "figure": "RAM bandwidth",
        "value": 60 * GIB,
        "provenance": "given",
        "basis": "--ram-bandwidth",
    }
    # the CPU's experts cross PCIe: no CPU term, so no CPU figure
    assert "CPU FLOP/s" not in figures
    link = next(t for t in found["prefill_terms"] if t["term"] == "CUDA0 link")
    # PCIe 4.0 x16, its profile: 16 GT/s per lane, 128b/130b encoding, 8 bits a byte
    pcie = 16e9 * 128 / 130 / 8 * 16
    assert link["seconds"] == pytest.approx(link["amount"] / (pcie * eff.link))
    assert data["plan"]["forecast"] == found


def test_text_names_what_is_assumed() -> None:
    """Without --ram-bandwidth (and none measured) the RAM's figure is the typical one: the
    line gives numbers, its expected error and the figures it assumed, never ``?``."""
    code, out = plan(QWEN, "--gpu", "rtx4070", "--ram", "64G")
    assert code == 0, out
    flat = " ".join(out.split())
    expected = f"{UNCALIBRATED_ERROR:.0%}".replace("%", " %")
    assert f"speed (uncalibrated, expected error ±{expected}; " in flat
    assert re.search(r"assumed: [^)]*RAM bandwidth[^)]*\): decode [\d.]+ tok/s", flat), flat
    assert re.search(r"prefill [\d.]+ tok/s", flat)
    assert "?" not in out and "missing" not in out


def test_everything_on_the_gpu_needs_no_ram_figure() -> None:
    """rtx4090's profile has memory bandwidth, link and FP16 FLOP/s: with every expert on the
    GPU nothing is missing, and the prompt's GPU compute takes its FLOPs at the profile's rate
    (at core/prior.py's typical share of it)."""
    code, out = plan(QWEN, "--gpu", "rtx4090", "--ram", "64G", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["n_cpu_moe"] == 0
    found = data["forecast"]
    assert found["decode_tok_s"] > 0
    assert found["missing"] == []
    assert found["prefill_tok_s"] is not None and found["prefill_tok_s"] > 0
    flops = find_hardware_profile("rtx4090").flops_per_s
    assert flops is not None
    compute = next(t for t in found["prefill_terms"] if t["term"] == "CUDA0 compute")
    assert compute["amount"] > 0
    rate = flops * PUBLIC_PRIOR.efficiency.device_compute
    assert compute["seconds"] == pytest.approx(compute["amount"] / rate)


def test_a_bandwidth_needs_gb_or_per_second() -> None:
    code, _, err = cli("plan", QWEN, "--gpu", "rtx4090", "--ram-bandwidth", "60M")
    assert code == ExitCode.BAD_VALUE
    assert "not a bandwidth: '60M'" in err
    assert len(err.strip().splitlines()) == 1


def test_no_op_offload_after_the_separator() -> None:
    """``-- --no-op-offload``: the prompt's CPU experts are read from RAM, none cross PCIe;
    a later ``--op-offload`` turns it back on, as llama.cpp reads its flags."""
    args = (QWEN, "--gpu", "rtx4070", "--ram", "64G", "--json", "--")
    terms = {}
    for tail in (("--no-op-offload",), ("--no-op-offload", "--op-offload")):
        code, out = plan(*args, *tail)
        assert code == 0, out
        prefill = json.loads(out)["forecast"]["prefill_terms"]
        terms[tail] = {t["term"]: t["amount"] for t in prefill}
    off, on = terms.values()
    assert off["CUDA0 link"] == 0 and off["RAM"] > 0
    assert on["CUDA0 link"] > 0 and on["RAM"] == 0


def test_parallel_forecasts_each_stream_and_all_together() -> None:
    """``--parallel 4``: decode per stream and for the 4 together (4 times it, larger), in the
    JSON and the text; without it, neither (one stream, as before)."""
    given = ("--gpu", "rtx4090", "--ram", "64G", "--ram-bandwidth", "60G/s")
    code, out = plan(QWEN, *given, "--parallel", "4", "--json")
    assert code == 0, out
    found = json.loads(out)["forecast"]
    assert found["streams"] == 4
    per, total = found["decode_tps_per_stream"], found["decode_tps_aggregate"]
    assert per == found["decode_tok_s"]
    assert total == pytest.approx(4 * per) and total > per
    code, out = plan(QWEN, *given, "--json")
    assert code == 0, out
    single = json.loads(out)["forecast"]
    assert "decode_tps_aggregate" not in single and "streams" not in single
    assert single["decode_tok_s"] > per
    code, out = plan(QWEN, *given, "--parallel", "4")
    assert code == 0, out
    assert "per stream" in out and "for 4 streams together" in out
