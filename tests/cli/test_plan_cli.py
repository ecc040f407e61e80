"""`moetune plan`: output, JSON, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from moetune.errors import ExitCode
from moetune.units import GIB, format_bytes

from support.factory import ARCHS
from support.helpers import EXAMPLE_GPT_OSS, EXAMPLE_QWEN, cli, moetune
from support.plan import TINY, plan

QWEN = str(EXAMPLE_QWEN)


def test_main_job_example_prints_the_plan() -> None:
    code, out = plan(QWEN, "--vram", "24G", "--ram", "64G")
    assert code == 0, out
    for words in ("--n-cpu-moe", "-ot ", "GPU total", "RAM total", "llama-server -m", "--fit off"):
        assert words in out


def test_json_keys() -> None:
    code, out = plan(QWEN, "--vram", "16G", "--ram", "64G", "--json")
    assert code == 0, out
    data = json.loads(out)
    keys = [
        "schema_version",
        "n_cpu_moe",
        "override_tensor",
        "command",
        "gpu_bytes",
        "gpu_weights_bytes",
        "gpu_kv_bytes",
        "gpu_compute_bytes",
        "gpu_overhead_bytes",
        "cpu_weights_bytes",
        "budget_bytes",
        "fits",
    ]
    assert all(key in data for key in keys)
    assert data["fits"] is True and data["n_cpu_moe"] > 0
    parts = ("gpu_weights_bytes", "gpu_kv_bytes", "gpu_compute_bytes", "gpu_overhead_bytes")
    assert data["gpu_bytes"] == sum(data[k] for k in parts)
    assert data["gpu_bytes"] <= data["budget_bytes"]
    assert data["command"][0] == "llama-server"
    assert all(rule.endswith("=CPU") for rule in data["override_tensor"])


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--vram", "24Q"], ExitCode.BAD_VALUE, "not a size"),
        (["--vram", "24G", "--ctx", "0"], ExitCode.BAD_VALUE, "context must be positive"),
        (["--vram", "24G", "--ctx", "lots"], ExitCode.BAD_VALUE, "not a token count"),
        (["--vram", "24G", "--cache-type", "q3_z"], ExitCode.BAD_VALUE, "cache type"),
        (["--vram", "2G"], ExitCode.DOES_NOT_FIT, "does not fit"),
        ([], ExitCode.NO_GPU, "no GPU"),
    ],
)
def test_bad_input_is_one_clear_line(args: list[str], code: ExitCode, words: str) -> None:
    result = moetune("plan", QWEN, "--ram", "64G", *args)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr


def test_target_is_the_budget() -> None:
    """--target-vram is the peak allowed; --headroom counts only without it."""
    code, out = plan(QWEN, "--vram", "24G", "--ram", "64G", "--target-vram", "12G", "--json")
    assert code == 0
    assert json.loads(out)["budget_bytes"] == 12 * GIB
    code, out = plan(
        QWEN, "--vram", "24G", "--ram", "64G", "--target-vram", "12G", "--headroom", "5G", "--json"
    )
    assert json.loads(out)["budget_bytes"] == 12 * GIB
    code, out = plan(QWEN, "--vram", "24G", "--ram", "64G", "--headroom", "2G", "--json")
    assert json.loads(out)["budget_bytes"] == 22 * GIB
    code, out = plan(QWEN, "--vram", "24G", "--ram", "64G", "--target-vram", "12G")
    assert "budget = --target-vram 12.00 GiB" in out, out


def _max_ctx(vram: str, cache: str) -> dict[str, Any]:
    code, out = plan(
        QWEN, "--vram", vram, "--ram", "64G", "--ctx", "max", "--cache-type", cache, "--json"
    )
    assert code == 0
    return cast(dict[str, Any], json.loads(out))


@pytest.mark.parametrize(("vram", "ctx"), [("16G", "10000000"), ("4G", "32768")])
def test_does_not_fit_is_a_document_with_the_real_maximum(vram: str, ctx: str) -> None:
    """The failure is JSON on stdout (exit code unchanged); each suggested context is what
    --ctx max finds, and the nearest command is the one --ctx max plans."""
    result = moetune("plan", QWEN, "--vram", vram, "--ram", "64G", "--ctx", ctx, "--json")
    assert result.returncode == ExitCode.DOES_NOT_FIT
    assert result.stderr.count("\n") == 1 and "does not fit" in result.stderr
    data = json.loads(result.stdout)
    assert data["fits"] is False and data["fails"] == "gpu"
    assert data["reason"].startswith("the GPU needs ")
    best = _max_ctx(vram, "q8_0")
    assert f"the largest context that fits at q8_0 is -c {best['n_ctx']}" in data["suggestions"]
    assert data["nearest_command"] == best["command"]
    q4 = _max_ctx(vram, "q4_0")
    if q4["n_ctx"] > best["n_ctx"]:
        assert f"the largest context that fits at q4_0 is -c {q4['n_ctx']}" in data["suggestions"]
    else:
        assert not any("q4_0" in line for line in data["suggestions"])


def test_does_not_fit_marks_the_command() -> None:
    code, out = plan(QWEN, "--vram", "4G", "--ram", "64G")
    assert code == ExitCode.DOES_NOT_FIT
    assert "does NOT fit: the GPU needs" in out
    runnable = [line for line in out.splitlines() if line.startswith("llama-server ")]
    assert runnable and all("-c 20480" in line for line in runnable), out  # the nearest only
    assert "# llama-server " in out  # the planned one, commented out


def test_ram_short_is_named_with_one_figure() -> None:
    """gpt-oss-120b on a 24 GB card fits the GPU; RAM is what fails, with the same available
    figure in the message as in the table."""
    code, out, _ = cli("plan", str(EXAMPLE_GPT_OSS), "--vram", "24G", "--ram", "32G", "--json")
    assert code == ExitCode.DOES_NOT_FIT
    data = json.loads(out)
    assert data["fails"] == "ram" and data["gpu_bytes"] <= data["budget_bytes"]
    available = data["plan"]["ram"]["available_bytes"]
    assert format_bytes(available) in data["reason"]
    more = data["host_bytes"] - available
    assert any(f"{format_bytes(more)} more RAM" in line for line in data["suggestions"])
    code, text, _ = cli("plan", str(EXAMPLE_GPT_OSS), "--vram", "24G", "--ram", "32G")
    assert f"available {format_bytes(available)}" in text and "see the table" not in text
    assert "hint:" not in text


def test_no_needless_ot_and_one_layer_count() -> None:
    """The -ot form is offered only when it keeps more on the GPU; -ngl equals the JSON's."""
    code, out = plan(QWEN, "--vram", "3.4G", "--ram", "64G", "--ctx", "8192", "--json")
    data = json.loads(out)
    assert code == 0 and data["n_cpu_moe"] == 48
    assert data["override_command"] is None and data["plan"]["override_gain_bytes"] == 0
    code, text = plan(QWEN, "--vram", "3.4G", "--ram", "64G", "--ctx", "8192")
    assert "-ot " not in text, text
    code, out = plan(QWEN, "--vram", "3.5G", "--ram", "64G", "--ctx", "8192", "--json")
    assert json.loads(out)["override_command"] is not None  # a part of a block fits: offered
    code, out = plan(QWEN, "--vram", "16G", "--ram", "64G", "--json")
    data = json.loads(out)
    assert data["plan"]["override_gain_bytes"] > 0 and data["override_command"] is not None
    ngl = data["command"][data["command"].index("-ngl") + 1]
    assert int(ngl) == data["n_gpu_layers"] == data["plan"]["recommended"]["n_gpu_layers"]


def test_n_cpu_moe_beyond_the_blocks_is_refused() -> None:
    code, _, err = cli("plan", QWEN, "--vram", "16G", "--ram", "64G", "--n-cpu-moe", "60")
    assert code == ExitCode.BAD_VALUE and "48 blocks" in err, err


def test_context_beyond_training_warns() -> None:
    code, out = plan(QWEN, "--vram", "24G", "--ram", "64G", "--ctx", "65536")
    assert code == 0
    assert "beyond the training context 40960" in out


def test_ctx_max_at_a_given_n() -> None:
    code, out = plan(
        QWEN, "--vram", "16G", "--ram", "64G", "--ctx", "max", "--n-cpu-moe", "40", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["n_cpu_moe"] == 40 and data["n_ctx"] % 256 == 0 and data["n_ctx"] <= 40960


@pytest.mark.parametrize("arch", ARCHS)
def test_plan_on_every_fixture(tiny_models: dict[str, Path], arch: str) -> None:
    code, out = plan(str(tiny_models[arch]), "--vram", "30M", *TINY)
    assert code == 0, out
    if arch == "qwen3":
        assert "dense model" in out
    else:
        assert "--n-cpu-moe" in out and "-ot " in out


def test_the_ot_notes_come_with_the_plan() -> None:
    """The note under a command whose -ot names an RPC buffer type otherwise than its device is
    the plan's own (set where the command is built), shown in the text, not in the JSON."""
    from moetune.core.command import buft_notes

    args = ["--rpc", "127.0.0.1:50052,127.0.0.1:50053", "--vram", "8G,8G", "--no-verify"]
    code, text, err = cli("plan", QWEN, *args)
    assert code == 0, err
    code, out, _ = cli("plan", QWEN, *args, "--json")
    alternative = json.loads(out)["plan"]["alternative"]
    assert "notes" not in alternative
    (note,) = buft_notes(alternative["command"])
    assert note.startswith("-ot's RPC0[127.0.0.1:50053] is llama.cpp's buffer-type name of RPC1")
    assert f"note: {note}" in " ".join(text.split())


def test_rpc_from_the_environment_yields_to_named_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """LLAMA_ARG_RPC is --rpc's default (as llama-server reads it), unless --gpu or --vram
    names the devices: a card you may buy is planned alone, the shell's server untouched (this
    one listens nowhere: reaching it would fail). tests/server/test_readme.py's daily loop
    plans on the server it names."""
    monkeypatch.setenv("LLAMA_ARG_RPC", "127.0.0.1:9")
    for devices in (("--gpu", "rtx4090"), ("--vram", "16G")):
        code, out, err = cli("plan", str(EXAMPLE_QWEN), *devices, "--json")
        assert code == 0, err
        assert [d["name"] for d in json.loads(out)["devices"]] == ["CUDA0"]
