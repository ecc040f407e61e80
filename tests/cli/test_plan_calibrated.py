"""`moetune plan`'s forecast calibrated on measured speeds: ``--speed-from FILE`` (the real
llama-bench's output on the test rig, tests/data/llama_bench/rig_tiny_rpc.*), and without it
the points kept on this machine (`moetune calibrate`), of this model and of others."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moetune.core.calibrate import fit_speed
from moetune.core.devices import DeviceSpec
from moetune.core.facts import facts_from_gguf
from moetune.core.noise import LOO_ERROR_BOUND
from moetune.core.settings import Settings
from moetune.core.speed import DeviceFigures, MachineFigures
from moetune.errors import ExitCode
from moetune.gguf.split import read_model
from moetune.hardware.host import cpu_model
from moetune.jobs.speed import measured_of
from moetune.llamacpp.bench_results import parse_bench_text

from support.factory import write_model
from support.helpers import cli

DATA = Path(__file__).resolve().parents[1] / "data"
RIG = DATA / "llama_bench" / "rig_tiny_rpc.jsonl"  # 4 N x 2 ubatch, pp64 + tg16: 16 points
RIG_JSON = DATA / "llama_bench" / "rig_tiny_rpc.json"  # N 0 and 8 at -ub 32: 4 points


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rig's model: make_tiny.py's (the same shapes, so the same file name and header)."""
    return write_model(tmp_path_factory.mktemp("rig") / "tiny-moe.gguf", "qwen3moe", n_layers=8)


def _plan(model: Path, *args: str) -> tuple[int, str, str]:
    return cli("plan", str(model), "--vram", "4G", "--ram", "64G", "--no-verify", *args)


def test_speed_from_a_jsonl_file(tiny: Path) -> None:
    """The file's 16 points, the fit core/calibrate makes of them on the plan's device: the
    rig's llama-bench on a shared 2-core machine, whose samples disagree (tests/data's
    README), its leave-one-out error 38 %, beyond core/noise.py's bound. The forecast does not
    use it: uncalibrated (the same speeds as the plan without the file), saying why, and a
    warning says what to do."""
    code, out, err = _plan(tiny, "--speed-from", str(RIG), "--json")
    assert code == 0, err
    found = json.loads(out)["forecast"]
    facts = facts_from_gguf(read_model(str(tiny)))
    settings = Settings(n_ctx=4096, type_k="q8_0", type_v="q8_0")
    points = parse_bench_text(RIG.read_text(), str(RIG))
    machine = MachineFigures(devices=(DeviceFigures(),))
    fit = fit_speed(measured_of(points, facts, settings, (DeviceSpec(),)), machine)
    assert fit.loo_median_error is not None and fit.loo_median_error > LOO_ERROR_BOUND
    assert found["calibration"] == {
        "points": 0,
        "median_error": None,
        "max_error": None,
        "own_points": 16,
        "other_models": [],
        "refused_points": 16,
        "refused_error": fit.loo_median_error,
    }
    assert (
        f"warning: not calibrated: the points of {RIG} disagree (leave-one-out error 38 %, "
        "bound 25 %): the forecast is uncalibrated; pass measurements taken on a quiet machine"
        in " ".join(err.split())
    )
    code, out, err = _plan(tiny, "--json")
    assert code == 0, err
    alone = json.loads(out)["forecast"]
    assert alone["calibration"]["points"] == 0 and "refused_error" not in alone["calibration"]
    for key in ("decode_tok_s", "prefill_tok_s", "expected_error", "missing"):
        assert found[key] == alone[key], key
    assert found["expected_error"] is not None


def test_speed_from_a_json_file_in_text(tiny: Path) -> None:
    code, out, err = _plan(tiny, "--speed-from", str(RIG_JSON))
    assert code == 0, err
    line = " ".join(out.split())
    assert "speed (not calibrated: its 4 measured points disagree (leave-one-out error " in line


def test_points_kept_for_this_model_and_machine(tiny: Path, tmp_path: Path) -> None:
    """Without --speed-from: uncalibrated until `moetune calibrate` keeps points measured on
    this CPU; points of another CPU are not this machine's."""
    code, out, _ = _plan(tiny, "--json")
    assert code == 0
    assert json.loads(out)["forecast"]["calibration"]["points"] == 0
    other = tmp_path / "other.jsonl"
    other.write_text(RIG.read_text().replace('"Intel(R) Xeon(R) Processor"', '"Some Other CPU"'))
    assert cli("calibrate", str(other))[0] == 0
    code, out, _ = _plan(tiny, "--json")
    assert json.loads(out)["forecast"]["calibration"]["points"] == 0
    here = tmp_path / "here.jsonl"
    text = RIG.read_text().replace('"Intel(R) Xeon(R) Processor"', json.dumps(cpu_model()))
    here.write_text(text)
    assert cli("calibrate", str(here))[0] == 0
    code, out, err = _plan(tiny, "--json")
    # the rig's points disagree: found, and not used (test_speed_from_a_jsonl_file)
    assert json.loads(out)["forecast"]["calibration"]["refused_points"] == 16
    assert (
        "the points kept for this machine disagree (leave-one-out error 38 %, bound 25 %): the "
        f"forecast is uncalibrated; run `moetune calibrate --measure {tiny}` again on a quiet "
        "machine (other programs closed), or remove the points in "
    ) in " ".join(err.split())


def test_a_file_of_another_model_not_here(tiny: Path, tmp_path: Path) -> None:
    """The file's points are of a model whose file (/tmp/fit-rig/tiny-moe.gguf) is not
    here: none can be laid out, one error."""
    other = write_model(tmp_path / "other-model.gguf", "qwen3moe", n_layers=4)
    code, _, err = _plan(other, "--speed-from", str(RIG))
    assert code == ExitCode.BAD_VALUE
    assert (
        "has no measurements of other-model.gguf, nor of a model whose file is readable here"
        " (it has tiny-moe.gguf)" in err
    )
    assert len(err.strip().splitlines()) == 1


def _rig_of(model: Path, cpu: str | None, path: Path) -> Path:
    """The rig's points as if measured with ``model`` on the CPU ``cpu``."""
    text = RIG.read_text().replace('"/tmp/fit-rig/tiny-moe.gguf"', json.dumps(str(model)))
    path.write_text(text.replace('"Intel(R) Xeon(R) Processor"', json.dumps(cpu)))
    return path


def test_a_file_of_another_model_here_calibrates(tiny: Path, tmp_path: Path) -> None:
    """Measured with tiny-moe.gguf, whose file is here: its 16 points, laid out with its own
    facts, calibrate the forecast of another model (the factors are the machine's)."""
    other = write_model(tmp_path / "other-model.gguf", "qwen3moe", n_layers=4)
    measured = _rig_of(tiny, "Intel(R) Xeon(R) Processor", tmp_path / "rig.jsonl")
    code, out, err = _plan(other, "--speed-from", str(measured), "--json")
    assert code == 0, err
    found = json.loads(out)["forecast"]
    assert found["calibration"]["refused_points"] == 16  # they disagree: not used
    assert found["calibration"]["own_points"] == 0
    assert found["calibration"]["other_models"] == ["tiny-moe.gguf"]
    assert found["decode_tok_s"] is not None and found["prefill_tok_s"] is not None
    code, out, _ = _plan(other, "--speed-from", str(measured))
    assert "speed (not calibrated: its 16 measured points disagree (leave-one-out " in " ".join(
        out.split()
    )


def test_points_of_another_model_on_this_machine(tiny: Path, tmp_path: Path) -> None:
    """Kept points of tiny-moe.gguf measured on this CPU calibrate another model's plan;
    those of another CPU do not; a kept model whose file is gone is left out, counted."""
    other = write_model(tmp_path / "other-model.gguf", "qwen3moe", n_layers=4)
    elsewhere = _rig_of(tiny, "Some Other CPU", tmp_path / "elsewhere.jsonl")
    assert cli("calibrate", str(elsewhere))[0] == 0
    code, out, _ = _plan(other, "--json")
    assert json.loads(out)["forecast"]["calibration"]["points"] == 0
    here = _rig_of(tiny, cpu_model(), tmp_path / "here.jsonl")
    assert cli("calibrate", str(here))[0] == 0
    code, out, err = _plan(other, "--json")
    assert code == 0, err
    calibration = json.loads(out)["forecast"]["calibration"]
    assert calibration["refused_points"] == 16 and calibration["own_points"] == 0
    assert calibration["other_models"] == ["tiny-moe.gguf"]
    gone = tmp_path / "gone" / "tiny-moe.gguf"
    assert cli("calibrate", str(_rig_of(gone, cpu_model(), tmp_path / "gone.jsonl")))[0] == 0
    code, out, err = _plan(other, "--json")
    assert json.loads(out)["forecast"]["calibration"]["refused_points"] == 16
    assert (
        "16 speed points of this machine left out of the calibration: the model file is not"
        " readable here (tiny-moe.gguf)" in " ".join(err.split())
    )


def test_one_measurement_is_no_calibration(tiny: Path, tmp_path: Path) -> None:
    one = tmp_path / "one.jsonl"
    one.write_text(RIG.read_text().splitlines()[1] + "\n")  # tg16 at N 0
    code, out, err = _plan(tiny, "--speed-from", str(one), "--json")
    assert code == 0
    assert json.loads(out)["forecast"]["calibration"]["points"] == 0
    assert "has 1 prompt or generation measurement of tiny-moe.gguf: a calibration needs 2" in err


def test_an_import_names_the_tests_whose_samples_disagree() -> None:
    """`calibrate FILE` keeps the rig's points (someone's measurements) and names each test
    whose samples spread beyond core/noise.py's 20 %: pp64 at N 0, -ub 64 measured 3896.64
    and 1241.4 tok/s."""
    code, out, err = cli("calibrate", str(RIG), "--json")
    assert code == 0, err
    (found,) = json.loads(out)["files"]
    assert len(found["points"]) == 16 and found["saved_path"] is not None
    assert (
        "pp64 at --n-cpu-moe 0, -ub 64, -t 1: 2 samples 1241.4-3896.6 tok/s, spread 103 % "
        "(bound 20 %)" in found["disagreeing"]
    )
    assert all("spread" in text for text in found["disagreeing"])
    code, out, _ = cli("calibrate", str(RIG))
    assert "kept, its samples disagreeing: pp64 at --n-cpu-moe 0, -ub 64" in " ".join(out.split())
