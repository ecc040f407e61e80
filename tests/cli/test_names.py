"""Models by Hugging Face name through the commands, over the local fake hub (tests/fakehub.py):
``plan user/model`` lists the quants and names the picks, each quant's plan equals the plan
of the same file on disk, ``:q4_k_m`` matches as llama.cpp matches, the command says ``-hf``,
a warm cache makes no request, and run/bench/alias need the weights. No internet."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from moetune.errors import ExitCode

from support.factory import ModelFactory
from support.fakehub import FakeHub, fake_hub
from support.helpers import assert_one_line_error, moetune
from support.projector_factory import write_projector

REPO = "acme/Qwen3-30B-A3B-GGUF"
TINY = "acme/Tiny-MoE-GGUF"
GPU = ("--vram", "16G", "--ram", "32G", "--ctx", "16384", "--no-verify")


@pytest.fixture(scope="module")
def files(model_factory: ModelFactory) -> dict[str, Path]:
    header = model_factory.header_only
    return {
        "Qwen3-30B-A3B-Q4_K_M.gguf": header("q4.gguf", sparse=True),
        "Qwen3-30B-A3B-Q2_K.gguf": header("q2.gguf", n_layers=20, sparse=True),
        "Qwen3-30B-A3B-F16.gguf": header("f16.gguf", quant="F16", sparse=True),
    }


@pytest.fixture(scope="module")
def tiny(model_factory: ModelFactory) -> dict[str, Path]:
    return {
        "Tiny-MoE-Q8_0.gguf": model_factory("qwen3moe", "tiny.gguf", n_layers=4),
        "mmproj-Tiny-MoE-F16.gguf": model_factory.written("mmproj", write_projector),
    }


@pytest.fixture(scope="module")
def served(files: dict[str, Path], tiny: dict[str, Path]) -> Iterator[FakeHub]:
    with fake_hub() as hub:
        hub.add_repo(REPO, files)
        hub.add_repo(TINY, tiny)
        hub.add_repo(
            "acme/gated-GGUF",
            {"gated-Q4_K_M.gguf": files["Qwen3-30B-A3B-Q2_K.gguf"]},
            token="hf_" + "Abc123" * 6,
        )
        yield hub


@pytest.fixture
def env(served: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """moetune's environment: the fake hub as the endpoint, an empty Hugging Face cache (its
    HF_HOME is returned)."""
    served.reset()
    for var in ("HF_ENDPOINT", "HF_TOKEN", "HF_HUB_CACHE", "LLAMA_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODEL_ENDPOINT", served.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf"


def _json(*args: str) -> dict[str, Any]:
    at = args.index("--") if "--" in args else len(args)
    done = moetune(*args[:at], "--json", *args[at:])
    assert done.returncode in (0, ExitCode.DOES_NOT_FIT), done.stderr
    return dict(json.loads(done.stdout))


def test_plan_lists_the_quants_and_names_the_picks(env: Path, files: dict[str, Path]) -> None:
    listed = _json("plan", REPO, *GPU)
    rows = {row["tag"]: row for row in listed["quants"]}
    assert set(rows) == {"Q4_K_M", "Q2_K", "F16"}
    for tag, row in rows.items():
        on_disk = _json("plan", str(files[f"Qwen3-30B-A3B-{tag}.gguf"]), *GPU)
        assert row["size_bytes"] == files[f"Qwen3-30B-A3B-{tag}.gguf"].stat().st_size
        if row["gpu_bytes"] is not None:  # planned: the same plan as the file on disk
            assert row["n_cpu_moe"] == on_disk["n_cpu_moe"]
            assert row["gpu_bytes"] == on_disk["gpu_bytes"]
            assert row["fits"] == on_disk["fits"]
            assert row["command"][1:3] == ["-hf", f"{REPO}:{tag}"]
            assert row["reason"] == on_disk["reason"]
        # the largest context: the --ctx max plan's, where that fits
        at_max = _json("plan", str(files[f"Qwen3-30B-A3B-{tag}.gguf"]), *GPU, "--ctx", "max")
        assert row["max_ctx"] == (at_max["n_ctx"] if at_max["fits"] else None), tag
    # F16 (61 GB) needs more than 32 GB of RAM beside 16 GB of VRAM at this context
    assert rows["F16"]["fits"] is False
    # the seeds' trade-off: the bigger quant with experts in RAM, the smaller all on the GPU
    assert listed["best"] == "Q4_K_M" and rows["Q4_K_M"]["n_cpu_moe"] > 0
    assert listed["best_gpu_only"] == "Q2_K" and rows["Q2_K"]["all_on_gpu"]
    assert rows["Q2_K"]["max_ctx"] >= 16384 and rows["F16"]["max_ctx"] is None


def test_a_quant_by_name_matches_case_insensitively(env: Path, files: dict[str, Path]) -> None:
    by_name = _json("plan", f"{REPO}:q4_k_m", *GPU)
    on_disk = _json("plan", str(files["Qwen3-30B-A3B-Q4_K_M.gguf"]), *GPU)
    assert by_name["command"][1:3] == ["-hf", f"{REPO}:Q4_K_M"]
    assert by_name["command"][3:] == on_disk["command"][3:]
    assert by_name["n_cpu_moe"] == on_disk["n_cpu_moe"]
    assert by_name["gpu_bytes"] == on_disk["gpu_bytes"]


def test_a_warm_cache_makes_no_request(env: Path, served: FakeHub) -> None:
    first = _json("plan", f"{REPO}:Q4_K_M", *GPU)
    assert served.requests()
    served.reset()
    again = _json("plan", f"{REPO}:Q4_K_M", *GPU)
    assert served.requests() == []
    assert again["command"] == first["command"]
    inspected = moetune("inspect", f"{REPO}:Q4_K_M", "--json")
    assert inspected.returncode == 0 and served.requests() == []


def test_nothing_beyond_headers_is_fetched(
    env: Path, served: FakeHub, files: dict[str, Path]
) -> None:
    _json("plan", REPO, *GPU)
    for name, path in files.items():
        fetched = sum(n for p, n in served.bytes_served.items() if p.endswith(name))
        assert fetched <= 8 << 20 and fetched < path.stat().st_size


def test_the_mmproj_sibling_is_counted(env: Path) -> None:
    plan = _json(
        "plan",
        TINY,
        "--vram",
        "2G",
        "--target-vram",
        "60M",
        "--overhead",
        "0",
        "--ctx",
        "4096",
        "--no-verify",
    )
    row = plan["quants"][0]
    assert row["command"][1:3] == ["-hf", f"{TINY}:Q8_0"] and "--mmproj" not in row["command"]
    one = _json(
        "plan",
        f"{TINY}:Q8_0",
        "--vram",
        "2G",
        "--target-vram",
        "60M",
        "--overhead",
        "0",
        "--ctx",
        "4096",
        "--no-verify",
    )
    assert one["mmproj_type"] == "gemma3" and one["mmproj_weights_bytes"] > 0
    plain = _json(
        "plan",
        f"{TINY}:Q8_0",
        "--vram",
        "2G",
        "--target-vram",
        "60M",
        "--overhead",
        "0",
        "--ctx",
        "4096",
        "--no-verify",
        "--",
        "--no-mmproj",
    )
    assert "mmproj_type" not in plain


def test_run_and_bench_need_the_weights(env: Path) -> None:
    for command in ("run", "bench"):
        done = moetune(command, f"{TINY}:Q8_0", "--target-vram", "60M")
        line = assert_one_line_error(done, ExitCode.FILE_NOT_FOUND)
        assert "is not downloaded" in line and f"llama-server -hf {TINY}:Q8_0" in line


def test_a_downloaded_name_is_read_from_the_hf_cache(
    env: Path, served: FakeHub, tiny: dict[str, Path]
) -> None:
    """The Hugging Face cache layout llama-server -hf and huggingface_hub write: the header is
    read from the snapshot, and alias finds the file on disk."""
    commit = served.repos[TINY].commit
    repo_dir = env / "hub" / f"models--{TINY.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    for name, path in tiny.items():
        shutil.copy(path, snapshot / name)
    done = moetune("alias", "tiny", f"{TINY}:Q8_0")
    # on disk, so the name resolves; no profile is tuned for it yet, and no GPU to plan for
    assert "no tuned profile for Tiny-MoE-Q8_0.gguf" in assert_one_line_error(done, ExitCode.NO_GPU)


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("acme/gated-GGUF", ExitCode.HUB_AUTH, "HF_TOKEN"),
        (f"{REPO}:Q5_K_S", ExitCode.FILE_NOT_FOUND, "Q4_K_M"),
        ("acme/no-such-repo", ExitCode.FILE_NOT_FOUND, "acme/no-such-repo"),
    ],
)
def test_hub_errors_end_in_one_line(env: Path, name: str, code: ExitCode, words: str) -> None:
    done = moetune("plan", name, *GPU)
    assert words in assert_one_line_error(done, code)
