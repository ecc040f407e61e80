"""Fit core/prior.py's typical factors on the public llama-bench sweeps and print them as the
``PUBLIC_PRIOR`` literal to paste there, and core/routing.py's ``ROUTING_EXPONENT`` fitted on
the public copy-all / copy-used pairs (``--check``: exit 1 when either file differs).

The points are those of benchmarks/data/public_sweeps/ whose machine's figures are all public
(tests/support/public_sweeps.py: the GPU's memory bandwidth, PCIe link and FLOP/s, the RAM's
peak); the fit is core/calibrate.py's ``fit_pooled``. The prior is fitted with the routing
exponents core/routing.py has: after a change there, paste the routing literal, then run again.

    python scripts/speed-prior.py            # print the literal
    python scripts/speed-prior.py --check    # compare with core/prior.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from moetune.core.prior import PUBLIC_PRIOR, SpeedPrior
from moetune.core.routing import ROUTING_EXPONENT

from support.public_sweeps import fit_prior, fit_routing


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
    parser.add_argument("--check", action="store_true", help="compare with core/")
    args = parser.parse_args()
    pairs = ", ".join(f'"{arch}": {a!r}' for arch, a in fit_routing().items())
    routing = f"ROUTING_EXPONENT = {{{pairs}}}"
    fitted = fit_prior()
    if not args.check:
        print(routing)
        print(literal(fitted))
        return 0
    differs = 0
    if fit_routing() != ROUTING_EXPONENT:
        print("core/routing.py differs from the fit; replace ROUTING_EXPONENT with:")
        print(routing)
        differs = 1
    if fitted != PUBLIC_PRIOR:
        print("core/prior.py differs from the fit; replace PUBLIC_PRIOR with:")
        print(literal(fitted))
        differs = 1
    if not differs:
        print("core/prior.py and core/routing.py are what the public sweeps fit")
    return differs


if __name__ == "__main__":
    sys.exit(main())
