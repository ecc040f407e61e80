"""The forecast has every figure: the README's example plan (``--vram`` alone, no RAM
measured) and ``plan EXAMPLE --gpu rtx3060`` print numbers for decode and prefill, marked
with what they assumed or derived and their expected error, never ``?``; ``--vram SIZE:ID``
names the card whose figures a forecast takes."""

from __future__ import annotations

import json
import re

import pytest

from moetune.core.prior import UNCALIBRATED_ERROR
from moetune.errors import ExitCode
from moetune.store.hardware import find_hardware_profile

from support.helpers import EXAMPLE_QWEN, cli

QWEN = str(EXAMPLE_QWEN)
README_ARGS = ("--vram", "16G", "--ram", "64G")  # scripts/readme-example.py's
NUMBERS = re.compile(r"decode [\d.]+ tok/s at depth 0, prefill [\d.]+ tok/s")


def _speed_line(out: str) -> str:
    flat = " ".join(out.split())
    start = flat.index("speed (")
    return flat[start : flat.index(" -ub ", start)]


@pytest.mark.parametrize(
    "args", [README_ARGS, ("--gpu", "rtx3060", "--ram", "64G")], ids=["readme", "rtx3060"]
)
def test_numbers_never_a_question_mark(args: tuple[str, ...]) -> None:
    code, out, err = cli("plan", QWEN, *args)
    assert code == 0, err
    assert "?" not in out and "missing" not in out
    line = _speed_line(out)
    assert NUMBERS.search(line), line
    expected = f"{UNCALIBRATED_ERROR:.0%}".replace("%", " %")
    assert line.startswith(f"speed (uncalibrated, expected error ±{expected}; "), line
    assert "assumed: " in line and "RAM bandwidth" in line  # nothing measured (the tests)


def test_readme_json_has_each_figure_with_its_provenance() -> None:
    code, out, err = cli("plan", QWEN, *README_ARGS, "--json")
    assert code == 0, err
    found = json.loads(out)["forecast"]
    assert found["missing"] == [] and found["expected_error"] == UNCALIBRATED_ERROR
    assert found["decode_tok_s"] > 0 and found["prefill_tok_s"] > 0
    figures = {f["figure"]: f for f in found["figures"]}
    assert {"CUDA0 memory bandwidth", "CUDA0 FLOP/s", "RAM bandwidth"} <= set(figures)
    for figure in figures.values():
        assert set(figure) == {"figure", "value", "provenance", "basis"}
        assert figure["provenance"] == "assumed" and figure["value"] > 0 and figure["basis"]
    assert "GPUs of 12-16 GiB" in figures["CUDA0 memory bandwidth"]["basis"]


def test_rtx3060_takes_its_profile_and_names_the_rest() -> None:
    """Its profile's bandwidth and link are published; its FLOP/s the profile's (derived or
    published) where it has one, else assumed from its class."""
    code, out, err = cli("plan", QWEN, "--gpu", "rtx3060", "--ram", "64G", "--json")
    assert code == 0, err
    figures = {f["figure"]: f for f in json.loads(out)["forecast"]["figures"]}
    assert figures["CUDA0 memory bandwidth"]["provenance"] == "published"
    assert figures["CUDA0 memory bandwidth"]["value"] == 360e9
    profile = find_hardware_profile("rtx3060")
    flops = figures["CUDA0 FLOP/s"]["provenance"]
    if profile.fp16_tflops is None:
        assert flops == "assumed"
    else:
        assert flops == ("derived" if "fp16_tflops" in profile.derived else "published")


def test_vram_names_the_card() -> None:
    """``--vram 16G:rtx4080``: the plan's memory is 16G, its speed figures rtx4080's."""
    code, out, err = cli("plan", QWEN, "--vram", "16G:rtx4080", "--ram", "64G", "--json")
    assert code == 0, err
    data = json.loads(out)
    figures = {f["figure"]: f for f in data["forecast"]["figures"]}
    assert figures["CUDA0 memory bandwidth"]["value"] == 716.8e9
    assert figures["CUDA0 memory bandwidth"]["basis"].startswith("hardware profile rtx4080")
    plain = json.loads(cli("plan", QWEN, "--vram", "16G", "--ram", "64G", "--json")[1])
    assert data["n_cpu_moe"] == plain["n_cpu_moe"]  # the same memory
    assert data["forecast"]["decode_tok_s"] != plain["forecast"]["decode_tok_s"]
    # one size per device, each may name its card
    code, out, err = cli("plan", QWEN, "--vram", "12G:rtx3060,12G", "--ram", "64G", "--json")
    assert code == 0, err
    figures = {f["figure"]: f for f in json.loads(out)["forecast"]["figures"]}
    assert figures["CUDA0 memory bandwidth"]["provenance"] == "published"
    assert figures["CUDA1 memory bandwidth"]["provenance"] == "assumed"


@pytest.mark.parametrize(
    ("vram", "code", "text"),
    [
        ("16G:", ExitCode.BAD_VALUE, "no card after the colon in '16G:'"),
        (":rtx4080", ExitCode.BAD_VALUE, "not a size list"),
        ("16G:" + "x" * 300, ExitCode.BAD_VALUE, "not a hardware profile name"),
        ("16G:rtx\x07", ExitCode.BAD_VALUE, "not a hardware profile name"),
        ("16G:nosuchcard", ExitCode.BAD_VALUE, "no hardware profile 'nosuchcard'"),
    ],
)
def test_a_bad_card_is_one_line(vram: str, code: int, text: str) -> None:
    got, _, err = cli("plan", QWEN, "--vram", vram, "--ram", "64G")
    assert got == code, err
    assert text in err and len(err.strip().splitlines()) == 1
