#!/usr/bin/env python3
"""Print the architectures the fixture matrix verifies (tests/support/archfix.py: every fixture
registered in a tests/support/archfix_*.py module, and tests/support/factory.py's MOE_ARCHS),
one per line.

    .venv/bin/python scripts/verified-archs.py            # the list
    .venv/bin/python scripts/verified-archs.py --write    # rewrite the list in docs/
    .venv/bin/python scripts/verified-archs.py --check    # exit 1 when the page differs

tests/unit/test_verified_archs.py runs the check; docs/verified-architectures.md's list is
written by ``--write``, never by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.archfix import ARCHS_DOC, matrix_archs, readme_archs, readme_section, rewrite_readme


def main(argv: list[str]) -> int:
    archs = matrix_archs()
    if "--write" in argv:
        ARCHS_DOC.write_text(rewrite_readme(ARCHS_DOC.read_text(), archs))
        return 0
    if "--check" in argv:
        same = readme_archs(ARCHS_DOC.read_text()) == readme_section(archs)
        if not same:
            print(
                "docs/verified-architectures.md differs: run scripts/verified-archs.py --write",
                file=sys.stderr,
            )
        return 0 if same else 1
    print("\n".join(archs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
