"""``plan A B --together``: the two example headers on one 24 GiB card, as text and as one
JSON document (each model's plan, the shared sums within the budget); an RPC device plans
them one at a time; a second model without --together is refused."""

from __future__ import annotations

import json

import pytest

from moetune.errors import ExitCode

from support.helpers import EXAMPLE_QWEN, EXAMPLES, cli

GPT_OSS_20B = str(EXAMPLES / "gpt-oss-20b-MXFP4.header.gguf")
BOTH = (str(EXAMPLE_QWEN), GPT_OSS_20B)
OPTIONS = ("--vram", "24G", "--ram", "128G", "--no-measure")


def test_json_holds_each_plan_and_the_shared_sums() -> None:
    code, out, err = cli("plan", *BOTH, "--together", *OPTIONS, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["together"] is True and doc["models_max"] == 2
    assert len(doc["models"]) == 2
    peaks = [m["device_bytes"][0] for m in doc["models"]]
    assert doc["device_sums"] == [sum(peaks)]
    assert doc["device_sums"][0] <= doc["device_budgets"][0]
    assert all(m["plan"]["fails"] is None for m in doc["models"])


def test_text_and_weights() -> None:
    code, out, err = cli("plan", *BOTH, "--together", "--weights", "4,1", *OPTIONS)
    assert code == 0, err
    assert "2 models planned together" in out and "devices (together): CUDA0" in out
    code, _, err = cli("plan", *BOTH, "--together", "--weights", "1,2,3", *OPTIONS)
    assert code == 5 and "3 weights for 2 models" in err


def test_an_rpc_device_plans_them_one_at_a_time() -> None:
    code, out, err = cli(
        "plan",
        *BOTH,
        "--together",
        "--rpc",
        "127.0.0.1:1",
        "--vram",
        "24G",
        "--ram",
        "128G",
        "--no-measure",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["together"] is False and doc["models_max"] == 1
    assert "serves one process at a time" in err


def test_two_models_need_together() -> None:
    code, _, err = cli("plan", *BOTH, *OPTIONS)
    assert code == 5 and "--together" in err


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (("--parallel", "2"), "--parallel"),
        (("--n-cpu-moe", "3"), "--n-cpu-moe"),
        (("--ubatch", "2048"), "--ubatch"),
        (("--", "-ub", "2048"), "arguments after --"),
    ],
)
def test_options_of_one_placement_are_refused(extra: tuple[str, ...], named: str) -> None:
    """--together plans each model at the plan's defaults: an option it would not apply is
    refused in one line, not ignored."""
    code, out, err = cli("plan", *BOTH, "--together", *OPTIONS, *extra)
    assert code == ExitCode.BAD_VALUE, out + err
    assert f"--together does not take {named}" in " ".join(err.split())
