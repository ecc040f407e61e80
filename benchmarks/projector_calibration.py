"""Calibrate moetune's projector (mmproj) memory against llama-server (build 11434).

For a grid of projector types x kinds (cpu = --no-mmproj-offload, rpc = a loopback
ggml-rpc-server as the device) x flash attention on/off x image token caps, start
llama-server -lv 4 with a tiny text model and the projector, read clip's
``load_hparams: model size`` and ``reserve_compute_meta: <BUFT> compute buffer size`` lines,
and print predicted vs printed MiB.  The projectors are synthetic: the tiny test fixtures and
real-shaped towers (tests/support/projector_factory.py REAL_SHAPES) with fewer blocks.

    python benchmarks/projector_calibration.py [--quick]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from moetune.core.projector import projector_compute
from moetune.jobs.loader import load_projector
from moetune.units import MIB

from support.factory import write_model  # ty: ignore[unresolved-import]
from support.llama import rpc_server, running_server  # ty: ignore[unresolved-import]
from support.projector_factory import REAL_SHAPES, write_projector, write_real_shaped  # ty: ignore[unresolved-import]

_COMPUTE = re.compile(r"reserve_compute_meta:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
_MODEL = re.compile(r"load_hparams: model size:\s+([\d.]+) MiB")


def parse_clip_log(text: str) -> tuple[float | None, float, float]:
    """(model size, device compute, host compute) MiB from the LAST reserve of each buffer."""
    model = _MODEL.findall(text)
    found: dict[str, float] = {}
    for buft, mib in _COMPUTE.findall(text):
        found[buft] = float(mib)
    host = found.pop("CPU", 0.0)
    return (float(model[-1]) if model else None), sum(found.values()), host


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    fa: bool
    max_tokens: int | None = None
    n_ubatch: int = 512


def _cases(quick: bool) -> list[Case]:
    names = ["tiny-gemma3", "tiny-qwen3vl", *REAL_SHAPES]
    caps: dict[str, list[int | None]] = {
        "qwen3-vl-30b-a3b": [None, 1024, 256],
        "glm-4.5v": [None, 1024],
        "tiny-qwen3vl": [None, 256],
    }
    out = []
    for name in names[:3] if quick else names:
        for kind in ("cpu", "rpc"):
            for fa in (True, False):
                out += [Case(name, kind, fa, cap) for cap in caps.get(name, [None])]
    out.append(Case("gemma-3", "rpc", True, None, 256))
    return out


def _projector(root: Path, name: str) -> Path:
    path = root / f"{name}.gguf"
    if path.exists():
        return path
    if name == "tiny-gemma3":
        return write_projector(path, projector_type="gemma3", image_size=448)
    if name == "tiny-qwen3vl":
        return write_projector(
            path, projector_type="qwen3vl_merger", patch_size=16, deepstack_layers=(0,)
        )
    return write_real_shaped(path, name)


def _text_model(root: Path, width: int) -> Path:
    path = root / f"text-{width}.gguf"
    return path if path.exists() else write_model(path, "qwen3moe", n_embd=width, n_layers=2)


def run(case: Case, root: Path, rpc: str) -> tuple[float, ...]:
    mmproj = _projector(root, case.name)
    facts = load_projector(mmproj)
    assert facts.n_embd_out is not None
    args = [
        "--mmproj",
        str(mmproj),
        "-fa",
        "on" if case.fa else "off",
        "-c",
        "1024",
        "-ub",
        str(case.n_ubatch),
        "-b",
        str(max(case.n_ubatch, 512)),
    ]
    args += ["--no-mmproj-offload"] if case.kind == "cpu" else ["--rpc", rpc]
    if case.max_tokens:
        args += ["--image-max-tokens", str(case.max_tokens)]
    with running_server(_text_model(root, facts.n_embd_out), *args, timeout=300) as server:
        model, dev, host = parse_clip_log(server.log_text())
    pred = projector_compute(
        facts,
        kind=case.kind,
        flash_attn=case.fa,
        image_max_tokens=case.max_tokens,
        n_ubatch=case.n_ubatch,
    )
    return (
        facts.weights_bytes / MIB,
        model or 0.0,
        pred.device_bytes / MIB,
        dev,
        pred.host_bytes / MIB,
        host,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny fixtures only")
    quick = parser.parse_args().quick
    print(
        f"{'projector':18} {'kind':4} {'FA':3} {'cap':>5} {'ub':>4} | {'weights':>8} "
        f"{'printed':>8} | {'device':>8} {'printed':>8} {'err':>7} | {'host':>8} "
        f"{'printed':>8} {'err':>7}"
    )
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp, rpc_server() as rpc:
        for case in _cases(quick):
            w, wp, d, dp, h, hp = run(case, Path(tmp), rpc)
            worst = max(worst, abs(d - dp), abs(h - hp))
            print(
                f"{case.name:18} {case.kind:4} {'on' if case.fa else 'off':3} "
                f"{case.max_tokens or '-':>5} {case.n_ubatch:>4} | {w:8.2f} {wp:8.2f} | "
                f"{d:8.2f} {dp:8.2f} {d - dp:+7.3f} | {h:8.2f} {hp:8.2f} {h - hp:+7.3f}",
                flush=True,
            )
    print(f"max |err| = {worst:.3f} MiB (printed to 0.01 MiB: 0.005 is exact)")


if __name__ == "__main__":
    main()
