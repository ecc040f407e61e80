"""A hostile hub through the commands (tests/support/fakehub.py's ``misbehave``): a drip, a
body cut short, a ``Link`` loop, bad JSON, 5xx and a 10,000-file tree each end in their own
exit code and one stderr line, within ``--timeout`` (plus the start of a Python process);
``plan user/model`` without a quant keeps a quant's own error. No internet."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from moetune.errors import ExitCode

from support.factory import ModelFactory
from support.fakehub import FakeHub, Misbehave, fake_hub
from support.helpers import assert_one_line_error, cli, moetune

TINY = "acme/Tiny-GGUF"
PAGED = "acme/Paged-GGUF"
BARE = "acme/Bare"
BIG = "acme/Big-GGUF"
BIG_LAYERS = (6, 12, 24, 36, 48)  # five sizes, 2,000 quants of each
MACHINE = ("--vram", "8G", "--ram", "12G", "--no-verify")
START_S = 10.0  # a moetune child's start on a busy machine, beyond its --timeout


@pytest.fixture(scope="module")
def files(model_factory: ModelFactory) -> dict[str, Path]:
    tiny = model_factory("qwen3moe", "tiny.gguf", n_layers=4)
    big = {
        n: model_factory.header_only(
            f"big-{n}.gguf", n_layers=n, n_vocab=300, n_merges=10, sparse=True
        )
        for n in BIG_LAYERS
    }
    readme = tiny.parent / "README.md"
    readme.write_text("# a model card\n")
    return {"tiny": tiny, "readme": readme, **{f"big-{n}": p for n, p in big.items()}}


@pytest.fixture(scope="module")
def served(files: dict[str, Path]) -> Iterator[FakeHub]:
    with fake_hub() as hub:
        hub.add_repo(TINY, {"Tiny-Q8_0.gguf": files["tiny"]})
        paged = {"Tiny-Q8_0.gguf": files["tiny"], "README.md": files["readme"]}
        hub.add_repo(PAGED, {**paged, "docs/a.md": files["readme"]}, page_size=1)
        hub.add_repo(BARE, {"README.md": files["readme"], "model.safetensors": files["readme"]})
        big = {
            f"Big-Q{i:05d}.gguf": files[f"big-{BIG_LAYERS[i % len(BIG_LAYERS)]}"]
            for i in range(10_000)
        }
        hub.add_repo(BIG, big, page_size=1000)
        yield hub


@pytest.fixture
def hub(served: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    """The fake hub as the endpoint, well behaved until a test says otherwise."""
    served.reset()
    for var in ("HF_ENDPOINT", "HF_TOKEN", "HF_HUB_CACHE", "LLAMA_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODEL_ENDPOINT", served.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return served


def file_url(hub: FakeHub, repo: str = TINY, name: str = "Tiny-Q8_0.gguf") -> str:
    return f"{hub.endpoint}/{repo}/resolve/main/{name}"


def fails_in_time(
    args: tuple[str, ...], code: ExitCode, timeout: float, phases: int = 1
) -> tuple[str, float]:
    """``moetune ARGS --timeout T`` fails with ``code`` and one line, within ``phases``
    network steps of ``T`` each (and a process start); the line and the time it took."""
    start = time.monotonic()
    done = moetune(*args, "--timeout", f"{timeout:g}", timeout=60)
    took = time.monotonic() - start
    line = assert_one_line_error(done, code)
    assert took < phases * timeout + START_S, (took, line)
    return line, took


# --- slow servers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "bad", "command"),
    [
        ("file", Misbehave(drip=100), "inspect-url"),  # the CDN: 100 bytes, then 1 byte a tick
        ("refs", Misbehave(drip=10), "plan"),  # the refs answer dripped (was 90 s, "None")
        ("tree", Misbehave(drip_head=True), "inspect"),  # even the status line and headers
        ("resolve", Misbehave(drip_head=True), "inspect"),  # the hub's redirect
    ],
)
def test_a_slow_server_ends_in_network_within_the_timeout(
    hub: FakeHub, kind: str, bad: Misbehave, command: str
) -> None:
    hub.misbehave[kind] = bad
    hub.drip_s = 0.3  # each byte in far less than any read timeout: only a deadline stops it
    args = {
        "inspect-url": ("inspect", file_url(hub)),
        "plan": ("plan", TINY, *MACHINE),
        "inspect": ("inspect", TINY),
    }[command]
    line, _ = fails_in_time(args, ExitCode.NETWORK, 1.5)
    assert "did not answer in time" in line and "--timeout" in line and "127.0.0.1" in line


def test_the_timeout_is_the_commands_alone(hub: FakeHub) -> None:
    """--timeout holds for its command only: the next one (in the same process) waits the
    default again."""
    from moetune.hub.env import DEFAULT_TIMEOUT_S, hub_timeout

    hub.misbehave["file"] = Misbehave(drip=100)
    hub.drip_s = 0.2
    code, _, err = cli("inspect", file_url(hub), "--timeout", "0.6")
    assert code == ExitCode.NETWORK and "0.6 s, --timeout" in err, err
    assert hub_timeout() == DEFAULT_TIMEOUT_S


# --- broken answers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "bad", "command", "words"),
    [
        ("file", Misbehave(cut=1000), "inspect-url", "cannot reach"),  # RemoteProtocolError
        ("tree", Misbehave(cut=20), "plan", "cannot reach"),
        ("refs", Misbehave(body=b'{"branches": [{"na'), "plan", "not JSON"),
        ("tree", Misbehave(body=b"[" * 100_000), "plan", "not JSON"),  # RecursionError
        ("tree", Misbehave(body=b'{"files": []}'), "plan", "non-list"),
        ("refs", Misbehave(status=500), "plan", "answered 500"),
        ("tree", Misbehave(status=503), "inspect", "answered 503"),
        ("file", Misbehave(status=502), "inspect-url", "answered 502"),
        ("resolve", Misbehave(status=302, headers={"Location": "http://[::1"}), "plan", "URL"),
        ("resolve", Misbehave(status=302, headers={"Location": "ftp://x/y"}), "plan", "http(s)"),
    ],
)
def test_a_broken_answer_is_one_network_line(
    hub: FakeHub, kind: str, bad: Misbehave, command: str, words: str
) -> None:
    hub.misbehave[kind] = bad
    args = {
        "inspect-url": ("inspect", file_url(hub)),
        "plan": ("plan", TINY, *MACHINE),
        "inspect": ("inspect", TINY),
    }[command]
    line, _ = fails_in_time(args, ExitCode.NETWORK, 10, phases=2)
    assert words in line


@pytest.mark.parametrize("link", ["self", "cycle"])
def test_a_link_loop_is_named_at_once(hub: FakeHub, link: str) -> None:
    hub.misbehave["tree"] = Misbehave(link=link)
    line, _ = fails_in_time(("plan", PAGED, *MACHINE), ExitCode.NETWORK, 10)
    assert "in a loop" in line and "links back to" in line
    pages = [s for s in hub.requests("hub") if "/tree/" in s.path]
    assert len(pages) <= 5  # the four pages there are (and the first again), not 100


def test_a_paged_tree_is_read_whole(hub: FakeHub) -> None:
    done = moetune("plan", PAGED, *MACHINE, "--json")
    assert done.returncode == 0, done.stderr
    assert [q["tag"] for q in json.loads(done.stdout)["quants"]] == ["Q8_0"]
    assert len([s for s in hub.requests("hub") if "/tree/" in s.path]) == 4  # one entry each


# --- plan user/model: the error of the quant, not DOES_NOT_FIT --------------------------------


@pytest.mark.parametrize(
    ("option", "code", "words"),
    [
        ("not_gguf", ExitCode.BAD_MODEL, "is not a GGUF file"),
        ("redirect_loop", ExitCode.NETWORK, "redirect loop"),
        ("ignore_range", ExitCode.NETWORK, "ignores Range requests"),
    ],
)
def test_no_quant_given_keeps_the_quants_error(
    hub: FakeHub, option: str, code: ExitCode, words: str
) -> None:
    setattr(hub, option, True)
    line, _ = fails_in_time(("plan", TINY, *MACHINE), code, 10, phases=2)
    assert words in line and "no quant" not in line


def test_a_server_error_on_a_file_with_no_quant_given(hub: FakeHub) -> None:
    hub.misbehave["file"] = Misbehave(status=500)
    line, _ = fails_in_time(("plan", TINY, *MACHINE), ExitCode.NETWORK, 10, phases=2)
    assert "answered 500" in line and "DOES_NOT_FIT" not in line


def test_a_repository_without_gguf_files_says_so(hub: FakeHub) -> None:
    for args in (("plan", BARE, *MACHINE), ("plan", f"{BARE}:Q4_K_M", *MACHINE)):
        line, _ = fails_in_time(args, ExitCode.FILE_NOT_FOUND, 10)
        assert f"{BARE} has no GGUF model files" in line and "None" not in line


# --- a 10,000-file tree ---------------------------------------------------------------------


def test_a_huge_tree_is_planned_in_seconds(hub: FakeHub, files: dict[str, Path]) -> None:
    """10,000 quants (five sizes): the picks found by bisection over the sizes, a few dozen
    headers read; each pick is the biggest size that fits (all on the GPU) when planned from
    its file on disk."""
    start = time.monotonic()
    done = moetune("plan", BIG, *MACHINE, "--json", timeout=120)
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    rows = {row["tag"]: row for row in listed["quants"]}
    assert len(rows) == 10_000
    ranged = [s for s in hub.requests("cdn") if s.range]
    assert len(ranged) <= 80, len(ranged)
    on_disk = {}
    for n in BIG_LAYERS:
        path = files[f"big-{n}"]
        plan = json.loads(moetune("plan", str(path), *MACHINE, "--json").stdout)
        on_disk[path.stat().st_size] = plan
    fitting = [size for size, plan in on_disk.items() if plan["fits"]]
    gpu_only = [size for size, plan in on_disk.items() if plan["fits"] and not plan["n_cpu_moe"]]
    assert rows[listed["best"]]["size_bytes"] == max(fitting) < max(on_disk)
    assert rows[listed["best_gpu_only"]]["size_bytes"] == max(gpu_only) < max(fitting)
    assert took < 60, took
    text = rendered(listed)  # the text's notes: one per reason, not one per quant
    notes = next(line for line in text.splitlines() if line.startswith("not fitting: "))
    assert "and 9" in notes and len(notes) < 2000, notes[:300]


def rendered(listed: dict[str, object]) -> str:
    from rich.console import Console

    from moetune.jobs.quants import QuantsResult
    from moetune.report.quants import render_quants

    console = Console(width=10_000, record=True, file=io.StringIO())
    console.print(render_quants(QuantsResult.model_validate(listed), "given"))
    return console.export_text()


def test_a_network_error_stops_the_listing_at_once(hub: FakeHub) -> None:
    """Every quant would wait for the same broken CDN: the first error ends the command."""
    hub.misbehave["file"] = Misbehave(status=500)
    line, _ = fails_in_time(("plan", BIG, *MACHINE), ExitCode.NETWORK, 10, phases=2)
    assert "answered 500" in line
    assert len(hub.requests("cdn")) == 1
