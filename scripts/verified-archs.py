#!/usr/bin/env python3
"""Print the architectures the fixture matrix verifies (tests/support/archfix.py: every fixture
registered in a tests/support/archfix_*.py module, and tests/support/factory.py's MOE_ARCHS),
one per line.

    .venv/bin/python scripts/verified-archs.py            # the list
    .venv/bin/python scripts/verified-archs.py --write    # rewrite README.md's section
    .venv/bin/python scripts/verified-archs.py --check    # exit 1 when README.md differs

tests/unit/test_verified_archs.py runs the check; README.md's "Verified architectures" section is
written by ``--write``, never by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.archfix import README, matrix_archs, readme_archs, readme_section, rewrite_readme


def main(argv: list[str]) -> int:
    archs = matrix_archs()
    if "--write" in argv:
        README.write_text(rewrite_readme(README.read_text(), archs))
        return 0
    if "--check" in argv:
        same = readme_archs(README.read_text()) == readme_section(archs)
        if not same:
            print(
                "README.md's verified architectures differ: run scripts/verified-archs.py --write",
                file=sys.stderr,
            )
        return 0 if same else 1
    print("\n".join(archs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
