"""`moetune doctor` as a command: text and JSON, bad options, a named exit code, the planning
options, with the probes replaced by fakes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moetune import hardware
from moetune.cli import app
from moetune.errors import ExitCode
from moetune.hardware import host as hardware_host
from moetune.hardware import membw
from moetune.llamacpp import process
from moetune.store.hardware import find_hardware_profile

from support.doctor import HARDWARE, QWEN, cuda_server, gpu_4090, host, only, run
from support.fakes import FakeGpuProbe, FakeHostProbe, FakeRamBandwidthProbe


def test_model_on_a_4060ti_names_ram_as_the_bottleneck() -> None:
    profile = find_hardware_profile("rtx4060ti-16g", HARDWARE)
    report = run(model=QWEN, gpu_profile=profile, ram_bandwidth_bytes_per_s=40 * 10**9)
    c = report.ceiling
    assert c is not None and c.n_cpu_moe is not None and c.n_cpu_moe > 0
    assert c.bottleneck == "RAM bandwidth" and c.ram_bandwidth_source == "given"
    assert c.cpu_bytes_per_token / c.ram_bandwidth_bytes_per_s > (
        c.gpu_bytes_per_token / (288 * 10**9)
    )
    # the active share of the CPU experts, not all of them
    assert c.cpu_bytes_per_token < c.cpu_expert_bytes / 10
    prefill = only(report, "prefill")
    assert prefill.status == "warn" and "PCIe 4.0 x8" in prefill.message  # 15.8 GB/s
    assert c.prefill_tps == pytest.approx(512 * c.pcie_bytes_per_s / c.cpu_expert_bytes)  # type: ignore[operator]


# --- the command -------------------------------------------------------------------------------


@pytest.fixture
def fake_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = gpu_4090(pcie_gen_max=3, pcie_gen_current=3)
    # The command imports these when it runs: patch them where it finds them.
    monkeypatch.setattr(hardware, "detect_gpu_probe", lambda: FakeGpuProbe([gpu]))
    monkeypatch.setattr(hardware_host, "LiveHostProbe", lambda: FakeHostProbe(host(is_wsl=True)))
    monkeypatch.setattr(membw, "StreamingReadProbe", FakeRamBandwidthProbe.typical)
    monkeypatch.setattr(process, "find_server", lambda explicit: Path("/x/llama-server"))
    monkeypatch.setattr(process, "server_info", lambda path: cuda_server())


@pytest.mark.usefixtures("fake_machine")
def test_cli_doctor() -> None:
    result = CliRunner().invoke(app, ["doctor", str(QWEN)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for words in ("warn", "pcie", "wsl", ".wslconfig", "decode ceiling", "fix:", "model-ram"):
        assert words in out, out


@pytest.mark.usefixtures("fake_machine")
def test_cli_doctor_json() -> None:
    result = CliRunner().invoke(
        app, ["doctor", str(QWEN), "--gpu", "rtx5090", "--json", "--ram-bandwidth", "90"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1 and data["worst"] == "warn"
    assert data["ceiling"]["gpu_bandwidth_bytes_per_s"] == 1792 * 10**9
    assert data["ceiling"]["ram_bandwidth_bytes_per_s"] == 90 * 10**9
    assert {f["status"] for f in data["findings"]} <= {"ok", "warn", "fail"}


@pytest.mark.usefixtures("fake_machine")
def test_cli_doctor_bad_options() -> None:
    bad = CliRunner().invoke(app, ["doctor", "--ram-bandwidth", "0"])
    assert bad.exit_code == 5
    unknown = CliRunner().invoke(app, ["doctor", str(QWEN), "--gpu", "rtx9999"])
    assert unknown.exit_code == 5 and "no hardware profile" in unknown.stderr


@pytest.mark.usefixtures("fake_machine")
def test_cli_doctor_fails_with_a_named_code() -> None:
    """A failing finding (RAM short for the model's CPU side) exits CHECK_FAILED, with the
    report printed first and one line naming what failed."""
    result = CliRunner().invoke(
        app, ["doctor", str(QWEN), "--ctx", "32k", "--vram", "8G"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == ExitCode.OK, result.output  # 64 GB of RAM: all is well
    tight = CliRunner().invoke(app, ["doctor", str(QWEN), "--vram", "8G", "--ram", "8G"])
    assert tight.exit_code == ExitCode.CHECK_FAILED, tight.output
    assert "model-ram" in tight.stdout and "fail" in tight.stdout
    assert tight.stderr.strip() == (
        "moetune: error: 1 check failed: model-ram (each with its "
        "fix above) [CHECK_FAILED, exit 12]"
    )
    as_json = CliRunner().invoke(
        app, ["doctor", str(QWEN), "--vram", "8G", "--ram", "8G", "--json"]
    )
    assert as_json.exit_code == ExitCode.CHECK_FAILED
    assert json.loads(as_json.stdout)["worst"] == "fail"


@pytest.mark.usefixtures("fake_machine")
def test_cli_doctor_takes_the_planning_options() -> None:
    """--vram, --target-vram, --headroom, --ctx 32k: as plan reads them."""
    base = ["doctor", str(QWEN), "--json", "--ram", "64G"]

    def n_cpu_moe(*args: str) -> int:
        result = CliRunner().invoke(app, [*base, "--ctx", "32k", *args])
        assert result.exit_code == 0, result.output
        return int(json.loads(result.stdout)["ceiling"]["n_cpu_moe"])

    roomy = n_cpu_moe("--vram", "16G")  # budget 16 - 1.5 GiB
    assert n_cpu_moe("--vram", "16G", "--target-vram", "12G") > roomy
    assert n_cpu_moe("--vram", "16G", "--headroom", "0") < roomy
    refused = CliRunner().invoke(app, [*base, "--ctx", "max"])
    assert refused.exit_code == ExitCode.BAD_VALUE and "one context" in refused.stderr


@pytest.mark.usefixtures("fake_machine")
def test_cli_doctor_measures_links_and_ram_bandwidth() -> None:
    """JSON: each GPU's link under gpus[i].pcie, the measured RAM read bandwidth under host,
    saved, and read back by --no-measure; the text says what was measured."""
    result = CliRunner().invoke(app, ["doctor", str(QWEN), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (gpu,) = data["gpus"]
    assert gpu["pcie"] == {
        "gen_current": 3,
        "width_current": 16,
        "gen_max": 3,
        "width_max": 16,
        "gen_card_max": None,
        "current_bytes_per_s": 15_753_846_154,
        "max_bytes_per_s": 15_753_846_154,
    }
    assert "pcie_gen_max" not in gpu  # one place for the link
    assert data["host"]["ram_read_bandwidth_bytes_per_s"] == 80 * 10**9
    measured = data["host"]["ram_read_bandwidth"]
    assert measured["source"] == "measured" and measured["threads"] == 8
    assert measured["buffer_bytes"] == 512 * 1024**2 and measured["by_threads"]["1"] > 0
    assert data["ceiling"]["ram_bandwidth_source"] == "measured"
    assert data["ceiling"]["ram_bandwidth_bytes_per_s"] == 80 * 10**9
    again = CliRunner().invoke(app, ["doctor", "--no-measure", "--json"])
    saved = json.loads(again.stdout)["host"]
    assert saved["ram_read_bandwidth"]["source"] == "saved"
    assert saved["ram_read_bandwidth_bytes_per_s"] == 80 * 10**9
    text = CliRunner().invoke(app, ["doctor"], env={"COLUMNS": "200"}).stdout
    assert "ram-bandwidth" in text and "RAM read 80.0 GB/s (a read-only streaming figure" in text
