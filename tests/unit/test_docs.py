"""The README is a user's page and docs/ the reference: the README is short, its example is
what moetune prints (scripts/readme-example.py), docs/options.md is the CLI's own
(scripts/cli-reference.py), and every link between the pages resolves, anchors included."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.helpers import ROOT

PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "profiles" / "README.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
CODE = re.compile(r"`[^`\n]*`")


def script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = CODE.sub(lambda m: m[0].strip("`"), heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def links(page: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", page.read_text()))
    return [m[1] for m in LINK.finditer(text)]


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 150, f"README.md has {len(lines)} lines: move reference text to docs/"


def test_readme_example_is_what_moetune_prints() -> None:
    done = script("readme-example.py", "--check")
    assert done.returncode == 0, done.stderr
    printed = script("readme-example.py")
    assert printed.returncode == 0, printed.stderr
    lead = "\n\n<!-- readme-example:"
    main, *others = printed.stdout.strip().split(lead)
    serving, parallel = (lead.lstrip() + other for other in others)
    assert main in (ROOT / "README.md").read_text()
    assert "--n-cpu-moe" in main and "llama-server -m examples/models/" in main
    reference = (ROOT / "docs" / "reference.md").read_text()
    assert serving in reference and parallel in reference
    assert "2 models planned together" in serving and "--models-max 2" in serving
    said = " ".join(parallel.split())
    assert "tok/s per stream" in said and "for 4 streams together" in said


def test_options_page_is_the_cli() -> None:
    done = script("cli-reference.py", "--check")
    assert done.returncode == 0, done.stderr


def test_readme_links_into_docs() -> None:
    targets = {link.split("#")[0] for link in links(ROOT / "README.md")}
    for page in ("reference", "options", "exit-codes", "memory", "speed", "devices"):
        assert f"docs/{page}.md" in targets, page
    assert "docs/verified-architectures.md" in targets and "CONTRIBUTING.md" in targets


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page: Path) -> None:
    assert page.exists(), page
    broken = []
    for link in links(page):
        if re.match(r"[a-z]+:", link):  # https:, mailto:: not this repository's
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no {target.relative_to(ROOT)}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, broken


def test_slug_is_githubs() -> None:
    assert slug("The daily loop: plan → run → alias / export") == (
        "the-daily-loop-plan--run--alias--export"
    )
    assert slug("`moetune plan`") == "moetune-plan"
    assert slug("Tuned profiles: `moetune profiles` and `moetune alias`") == (
        "tuned-profiles-moetune-profiles-and-moetune-alias"
    )


def test_devices_page_counts_the_shipped_profiles() -> None:
    """docs/devices.md says how many cards moetune ships a profile of: the count is the files'."""
    shipped = len(list((ROOT / "src" / "moetune" / "profiles_data").glob("*.toml")))
    text = " ".join((ROOT / "docs" / "devices.md").read_text().split())
    assert f"`--json` with VRAM, bandwidth and PCIe): {shipped} cards," in text


def test_make_tiny_help_says_its_whole_first_paragraph() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "models" / "make_tiny.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    description = run.stdout.split("\n\n")[1]
    assert description.rstrip().endswith('(README, "Try it without a GPU").'), run.stdout
