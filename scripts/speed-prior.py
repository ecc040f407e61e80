"""Fit core/prior.py's typical factors on the public llama-bench sweeps and print them as the
``PUBLIC_PRIOR`` literal to paste there (``--check``: exit 1 when core/prior.py differs).

The points are those of benchmarks/data/public_sweeps/ whose machine's figures are all public
(tests/support/public_sweeps.py: the GPU's memory bandwidth, PCIe link and FLOP/s, the RAM's
peak); the fit is core/calibrate.py's ``fit_pooled``.

    python scripts/speed-prior.py            # print the literal
    python scripts/speed-prior.py --check    # compare with core/prior.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from moetune.core.prior import PUBLIC_PRIOR, SpeedPrior

from support.public_sweeps import fit_prior


def literal(prior: SpeedPrior) -> str:
    eff = prior.efficiency
    factors = ", ".join(
        f"{k}={getattr(eff, k)!r}"
        for k in ("device_memory", "ram", "link", "device_compute", "cpu_compute")
    )
    return (
        "PUBLIC_PRIOR = SpeedPrior(\n"
        f"    efficiency=Efficiency({factors}, points={eff.points}),\n"
        f"    block_token_s={prior.block_token_s!r},\n"
        f"    points={prior.points},\n"
        f"    machines={prior.machines},\n"
        ")"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with core/prior.py")
    args = parser.parse_args()
    fitted = fit_prior()
    if args.check:
        if fitted == PUBLIC_PRIOR:
            print("core/prior.py is what the public sweeps fit")
            return 0
        print("core/prior.py differs from the fit; replace PUBLIC_PRIOR with:")
        print(literal(fitted))
        return 1
    print(literal(fitted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
