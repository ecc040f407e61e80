"""A --target-vram is checked against the hardware: above a device's total, or above what is
free on it where that is known, it is BAD_VALUE naming the device and its size, before
anything is planned; --force accepts it. (The RPC devices' side, with llama-server's own list
of them, is in tests/server/test_budget_checks.py.)"""

from __future__ import annotations

import json

import pytest

from moetune import hardware
from moetune.core.devices import DeviceSpec
from moetune.core.plan import check_targets
from moetune.errors import BadValueError, ExitCode
from moetune.units import GIB, MIB

from support.fakes import FakeGpuProbe
from support.helpers import EXAMPLE_QWEN, cli

QWEN = str(EXAMPLE_QWEN)
RTX_4090_TOTAL = "23.99 GiB"  # the rtx4090 hardware profile: vram = "24564MiB"


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_target_above_the_card_is_refused() -> None:
    """The issue's case: --gpu rtx4090 --target-vram 30G planned a 30 GiB budget."""
    code, out, err = cli("plan", QWEN, "--gpu", "rtx4090", "--ram", "64G", "--target-vram", "30G")
    assert code == ExitCode.BAD_VALUE and out == ""
    line = one_error_line(err)
    assert "--target-vram 30.00 GiB" in line, line
    assert f"CUDA0 (NVIDIA GeForce RTX 4090) has: {RTX_4090_TOTAL}" in line, line
    assert "--force" in line and "[BAD_VALUE, exit 5]" in line, line


def test_force_plans_the_target_as_given() -> None:
    args = ("plan", QWEN, "--gpu", "rtx4090", "--ram", "64G", "--target-vram", "30G", "--force")
    code, out, _ = cli(*args, "--json")
    assert code == 0, out
    assert json.loads(out)["budget_bytes"] == 30 * GIB


def test_a_target_of_the_whole_card_is_accepted() -> None:
    code, out, _ = cli("plan", QWEN, "--vram", "24G", "--ram", "64G", "--target-vram", "24G")
    assert code == 0, out


def test_the_json_document_names_the_device() -> None:
    code, out, _ = cli(
        "plan", QWEN, "--gpu", "rtx4090", "--ram", "64G", "--target-vram", "30G", "--json"
    )
    error = json.loads(out)["error"]
    assert code == ExitCode.BAD_VALUE and error["name"] == "BAD_VALUE"
    assert "CUDA0 (NVIDIA GeForce RTX 4090)" in error["message"]
    assert RTX_4090_TOTAL in error["message"] and "--force" in error["hint"]


def test_each_device_is_held_to_its_own_size() -> None:
    code, _, err = cli(
        "plan", QWEN, "--vram", "24G,12G", "--ram", "64G", "--target-vram", "20G,13G"
    )
    assert code == ExitCode.BAD_VALUE
    line = one_error_line(err)
    assert "--target-vram 13.00 GiB is more than CUDA1 has: 12.00 GiB" in line, line
    # one size for every device: the smaller device refuses it
    two = ("plan", QWEN, "--vram", "24G,12G", "--ram", "64G")
    code, _, err = cli(*two, "--target-vram", "16G")
    assert code == ExitCode.BAD_VALUE and "CUDA1 has: 12.00 GiB" in err, err
    code, out, _ = cli(*two, "--target-vram", "20G,12G")
    assert code == 0, out


def test_a_target_above_what_is_free_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A detected GPU says what is free: 4 GiB of its 24 are held by another process."""
    probe = FakeGpuProbe.single(24 * GIB, vram_used_bytes=4 * GIB)
    monkeypatch.setattr(hardware, "detect_gpu_probe", lambda: probe)
    base = ("plan", QWEN, "--ram", "64G", "--no-verify")
    code, _, err = cli(*base, "--target-vram", "22G")
    assert code == ExitCode.BAD_VALUE
    line = one_error_line(err)
    assert "is more than is free on CUDA0 (NVIDIA GeForce RTX 4090): 20.00 GiB of 24.00" in line
    code, out, _ = cli(*base, "--target-vram", "20G")
    assert code == 0, out
    code, out, _ = cli(*base, "--target-vram", "22G", "--force")
    assert code == 0, out


def test_doctor_fails_the_model_check_on_it() -> None:
    """doctor reports a model's problems as findings: the target is its failing one."""
    code, out, _ = cli(
        "doctor", QWEN, "--gpu", "rtx4090", "--target-vram", "30G", "--no-measure", "--json"
    )
    assert code == ExitCode.CHECK_FAILED
    fit = next(f for f in json.loads(out)["findings"] if f["check"] == "model-fit")
    assert fit["status"] == "fail" and f"CUDA0 has: {RTX_4090_TOTAL}" in fit["message"]
    code, out, _ = cli(
        "doctor",
        QWEN,
        "--gpu",
        "rtx4090",
        "--target-vram",
        "30G",
        "--no-measure",
        "--json",
        "--force",
    )
    assert not [f for f in json.loads(out)["findings"] if f["check"] == "model-fit"], out


@pytest.mark.parametrize(
    ("device", "target", "words"),
    [
        (DeviceSpec(name="RPC0", description="10.0.0.2:50052", total_bytes=GIB), 2 * GIB, "has"),
        (
            DeviceSpec(name="CUDA0", total_bytes=24 * GIB, free_bytes=GIB),
            GIB + MIB,
            "is free on CUDA0: 1.00 GiB of 24.00 GiB",
        ),
        (DeviceSpec(name="RPC0", total_bytes=GIB, free_bytes=None), GIB + 1, "RPC0 has"),
    ],
)
def test_check_targets_refuses(device: DeviceSpec, target: int, words: str) -> None:
    with pytest.raises(BadValueError) as info:
        check_targets((device,), (target,))
    assert words in info.value.message


def test_check_targets_accepts_what_fits_and_what_is_unknown() -> None:
    known = DeviceSpec(name="CUDA0", total_bytes=24 * GIB, free_bytes=20 * GIB)
    check_targets((known,), (20 * GIB,))
    check_targets((known,), (None,))  # no target for it: its headroom decides
    check_targets((DeviceSpec(name="CUDA0"),), (100 * GIB,))  # size unknown: nothing to hold to
