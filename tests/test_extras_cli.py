"""``--mmproj`` and ``--draft`` through the commands: the plan's rows and JSON, the command it
prints, the budget it keeps, and one-line errors for bad companions.  The projector's memory
through estimate() is also checked against llama-server's own log lines (clip's weights and
compute on the device clip picks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from moetune.core.extras import load_extras, parse_extras_flags, with_mmproj
from moetune.core.facts import load_model_facts
from moetune.core.memory import Settings, estimate
from moetune.core.placement import Placement
from moetune.errors import ExitCode
from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from factory import write_header_only, write_model
from helpers import moetune
from llama import running_server
from projector_factory import write_projector
from test_cli_errors import assert_one_line_error

BUDGET = ("--vram", "2G", "--target-vram", "37M", "--overhead", "0", "--ctx", "4096", "--no-verify")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("extras")
    return {
        "model": write_model(root / "target.gguf", "qwen3moe", n_layers=6),
        "draft": write_model(root / "draft.gguf", "qwen3moe", n_layers=2, n_embd=128, seed=1),
        "mmproj": write_projector(root / "mmproj.gguf", image_size=448),
        "wide": write_projector(root / "wide.gguf", n_embd_out=512),
        "other_vocab": write_header_only(
            root / "other.gguf", n_vocab=4096, n_merges=10, n_layers=2
        ),
    }


def _plan(files: dict[str, Path], *args: str) -> dict[str, Any]:
    done = moetune("plan", str(files["model"]), *BUDGET, "--json", *args)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_without_companions_the_plan_has_none_of_their_keys(files: dict[str, Path]) -> None:
    plan = _plan(files)
    text = json.dumps(plan)
    assert "mmproj" not in text and "draft" not in text and "mtp_" not in text


def test_the_projector_is_planned_in(files: dict[str, Path]) -> None:
    plain, with_it = _plan(files), _plan(files, "--mmproj", str(files["mmproj"]))
    assert with_it["mmproj_device"] == "CUDA0" and with_it["mmproj_type"] == "gemma3"
    weights, compute = with_it["mmproj_weights_bytes"], with_it["mmproj_compute_bytes"]
    assert isinstance(weights, int) and isinstance(compute, int) and weights > 0 < compute
    device = with_it["devices"][0]
    assert device["mmproj_weights_bytes"] == weights
    assert device["total_bytes"] <= device["budget_bytes"]
    # the room it takes moves experts off the device: at least one more block on the CPU
    assert with_it["n_cpu_moe"] > plain["n_cpu_moe"]
    assert with_it["command"][-2:] == ["--mmproj", str(files["mmproj"])]


def test_no_mmproj_offload_keeps_it_in_ram(files: dict[str, Path]) -> None:
    plan = _plan(files, "--mmproj", str(files["mmproj"]), "--", "--no-mmproj-offload")
    assert plan["mmproj_device"] == "CPU"
    assert "mmproj_weights_bytes" not in plan["devices"][0]
    assert "--no-mmproj-offload" in plan["command"]


def test_the_draft_and_its_flags(files: dict[str, Path]) -> None:
    plan = _plan(files, "--draft", str(files["draft"]), "--", "-ctkd", "q8_0", "-ngld", "99")
    device = plan["devices"][0]
    assert device["draft_weights_bytes"] == plan["draft_weights_bytes"] > 0
    assert device["draft_kv_bytes"] == plan["draft_kv_bytes"] > 0
    command = plan["command"]
    assert isinstance(command, list)
    assert command[command.index("-md") + 1] == str(files["draft"])
    assert "draft-simple" in command and "-ctkd" in command and "-ngld" in command


def test_the_memory_table_shows_the_companions(files: dict[str, Path]) -> None:
    done = moetune(
        "plan",
        str(files["model"]),
        *BUDGET,
        "--mmproj",
        str(files["mmproj"]),
        "--draft",
        str(files["draft"]),
    )
    assert done.returncode == 0, done.stderr
    for row in (
        "projector weights (gemma3)",
        "projector compute (448x448 image",
        "draft weights",
        "draft KV cache",
        "draft compute buffer",
    ):
        assert row in done.stdout


@pytest.mark.parametrize(
    ("flag", "name", "words"),
    [
        ("--mmproj", "model", "not a projector"),
        ("--mmproj", "wide", "512-wide embeddings"),
        ("--draft", "other_vocab", "cannot draft for target.gguf"),
    ],
)
def test_bad_companions_end_in_one_line(
    files: dict[str, Path], flag: str, name: str, words: str
) -> None:
    done = moetune("plan", str(files["model"]), *BUDGET, flag, str(files[name]))
    assert words in assert_one_line_error(done, ExitCode.BAD_MODEL)


def test_owned_flags_after_dashes_are_still_refused(files: dict[str, Path]) -> None:
    done = moetune("plan", str(files["model"]), *BUDGET, "--", "-ngl", "10")
    assert "conflicts" in assert_one_line_error(done, ExitCode.BAD_VALUE)


@pytest.mark.server
@pytest.mark.parametrize("offload", [True, False], ids=["on-the-rpc-device", "on-the-cpu"])
def test_projector_memory_matches_llama_server(
    files: dict[str, Path], rpc: str, offload: bool
) -> None:
    """The estimate's projector parts against clip's lines, parsed as ``run`` parses them."""
    extra = with_mmproj(() if offload else ("--no-mmproj-offload",), str(files["mmproj"]))
    facts = load_model_facts(files["model"])
    settings = Settings(n_ctx=4096, gpu_overhead_bytes=0, device_kind="rpc")
    settings = settings.model_copy(update={"extras": load_extras(parse_extras_flags(extra), facts)})
    memory = estimate(facts, Placement(), settings)
    with running_server(
        files["model"],
        "--rpc",
        rpc,
        "-ngl",
        "99",
        "-c",
        "4096",
        "-fa",
        "on",
        "--fit",
        "off",
        *extra,
    ) as server:
        lines = parse_buffers(server.log_text())
    mm = memory.mmproj
    assert mm is not None and mm.exact
    device = memory.devices[0]
    printed = total_mib(lines, "model", "RPC0") + total_mib(lines, "compute", "RPC0")
    main = memory.gpu_weights_bytes + memory.gpu_compute_bytes
    if offload:
        assert device.mmproj_weights_bytes == mm.mmproj_weights_bytes > 0
        assert abs((main + device.extras_bytes) / MIB - printed) <= 0.02
        assert mm.mmproj_compute_bytes > 0
    else:
        assert mm.device == "CPU" and device.extras_bytes == 0
        assert abs(main / MIB - printed) <= 0.01
        host = total_mib(lines, "compute", "CPU")
        assert abs((memory.host_compute_bytes + mm.mmproj_compute_bytes) / MIB - host) <= 0.01


@pytest.mark.server
def test_the_planned_command_stays_within_budget_per_llama_cpp(
    files: dict[str, Path], rpc: str
) -> None:
    """plan --mmproj --draft on the RPC device, then the planned command itself: the device's
    logged buffers (the model's, clip's and the draft's) stay within the budget, and the
    same command without the companions would have kept more experts on the device."""
    budget_mib = 52
    args = (
        "--rpc",
        rpc,
        "--vram",
        f"{budget_mib}M",
        "--headroom",
        "0",
        "--ctx",
        "4096",
        "--json",
        "--no-verify",
    )
    done = moetune(
        "plan",
        str(files["model"]),
        *args,
        "--mmproj",
        str(files["mmproj"]),
        "--draft",
        str(files["draft"]),
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    alone = json.loads(moetune("plan", str(files["model"]), *args).stdout)
    assert plan["n_cpu_moe"] > alone["n_cpu_moe"]
    command = plan["command"]
    with running_server(Path(command[2]), *command[3:]) as server:
        lines = parse_buffers(server.log_text())
    logged = sum(total_mib(lines, kind, "RPC0") for kind in ("model", "KV", "RS", "compute"))
    assert logged <= budget_mib
    assert abs(logged * MIB - plan["gpu_bytes"]) <= 0.05 * MIB
