"""Fuzz: numeric option values at the edges through `moetune plan` (issue 38), in-process.

Every numeric option of `plan` (and the llama-server flags after ``--`` that moetune reads)
given 0, -1, 1e309, NaN, Infinity, a 5,000-digit integer, 2^63, an empty string, digits of
other scripts, hexadecimal, with and without its unit: each ends in a plan or in one line
with a named code, under ``--json`` in one document, and none hangs. A value that is no
finite number is never taken without a word.
"""

from __future__ import annotations

import random
import re

from support.fuzz import Case, Fuzz
from support.helpers import EXAMPLE_QWEN

SEED = 38
VRAM = ("--vram", "24G")

# (option, how a value is written: {} is the edge value), those of plan and after --
OPTIONS: tuple[tuple[str, str], ...] = (
    ("--n-cpu-moe", "{}"),
    ("--parallel", "{}"),
    ("--ubatch", "{}"),
    ("--gpu-index", "{}"),
    ("--vram", "{}G"),
    ("--vram", "{}"),
    ("--vram", "24G,{}G"),
    ("--ram", "{}G"),
    ("--target-vram", "{}G"),
    ("--headroom", "{}M"),
    ("--overhead", "{}M"),
    ("--ctx", "{}"),
    ("--ctx", "{}k"),
    ("--ram-bandwidth", "{}"),
    ("--ram-bandwidth", "{}GB/s"),
    ("--workload", "{}:128"),
    ("--workload", "512:{}"),
    ("--timeout", "{}"),
    ("-- -c", "{}"),
    ("-- -ub", "{}"),
    ("-- -b", "{}"),
    ("-- -np", "{}"),
    ("-- -ngl", "{}"),
    ("-- --n-cpu-moe", "{}"),
    ("-- -ts", "{}"),
    ("-- -ts", "1,{}"),
    ("-- -t", "{}"),
)
# the edge values; True: no finite number, never taken without a word
VALUES: tuple[tuple[str, bool], ...] = (
    ("0", False),
    ("-1", False),
    ("-0", False),
    ("1", False),
    ("0.5", False),
    ("1e3", False),
    ("+5", False),
    ("1e309", True),
    ("-1e309", True),
    ("nan", True),
    ("NaN", True),
    ("inf", True),
    ("-inf", True),
    ("Infinity", True),
    ("9" * 5000, True),
    ("9223372036854775808", False),
    ("18446744073709551617", False),
    ("", True),
    (" ", True),
    ("١٢", False),  # Arabic-Indic 12
    ("\uff11\uff12", False),  # fullwidth 12
    ("²", True),
    ("0x10", False),
    ("1_000", False),
    ("12 ", False),
)
PER_OPTION = 7  # seeded values of each option: 189 of the 675 pairs
# the start of an integer as llama-server's std::stoi reads it (``-ub 1e309`` is -ub 1 there)
STOI = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]")


def args_of(option: str, form: str, value: str, json_out: bool) -> tuple[str, ...]:
    """`plan EXAMPLE [--vram 24G] OPTION VALUE [--json]`, the llama-server flags after --."""
    written = form.format(value)
    plan = ("plan", str(EXAMPLE_QWEN))
    vram = () if option == "--vram" else VRAM
    out = ("--json",) if json_out else ()
    if option.startswith("-- "):
        return (*plan, *vram, *out, "--", option[3:], written)
    return (*plan, *vram, option, written, *out)


def must_refuse(option: str, value: str, bad: bool) -> bool:
    """No finite number, and after -- none that llama-server reads as one either."""
    return bad and not (option.startswith("-- ") and STOI.match(value) is not None)


def test_option_values_at_the_edges() -> None:
    """Seven seeded edge values of every option, every other case with --json."""
    rng = random.Random(SEED)
    fuzz = Fuzz(limit_s=10.0)
    for option, form in OPTIONS:
        for i, (value, bad) in enumerate(rng.sample(VALUES, PER_OPTION)):
            args = args_of(option, form, value, json_out=(i + len(option)) % 2 == 0)
            what = f"{option} {form.format(value)[:40]!r}"
            fuzz.run(Case(args, what, len(value), refuse=must_refuse(option, value, bad)))
    fuzz.check(min_runs=len(OPTIONS) * PER_OPTION)
