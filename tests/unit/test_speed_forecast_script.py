"""benchmarks/speed_forecast.py runs: on the public sweeps (no llama.cpp needed) it prints,
for each, the calibrated and uncalibrated error of the points it did not calibrate on, with
the share of the rows that got a forecast, and the overall figures."""

from __future__ import annotations

import re

from support.public_sweeps import ALL_ON_GPU, PUBLIC
from support.speed_fit import speed_forecast_lines


def test_public_sweeps() -> None:
    lines = speed_forecast_lines()
    heads = [line for line in lines if re.match(r"^\S+\.json: \d+ points, calibrated on", line)]
    assert len(heads) == len(PUBLIC)
    alone = [line for line in lines if line.endswith("of one configuration (uncalibrated only)")]
    assert len(alone) == len(ALL_ON_GPU)
    calibrated = [line for line in lines if line.startswith("  calibrated:   median ")]
    assert len(calibrated) == len(PUBLIC)
    for line in calibrated:
        assert re.search(r"median \d+\.\d%, max \d+\.\d% over \d+", line)
    assert sum(line.startswith("  uncalibrated: ") for line in lines) == len(PUBLIC) + len(
        ALL_ON_GPU
    )
    assert all("source: http" in line for line in lines if line.startswith("  ("))
    # each error beside its coverage, and the overall figures: every row gets a forecast
    for line in lines:
        if line.startswith(("  calibrated:", "  uncalibrated:")):
            assert re.search(r", coverage \d+/\d+ rows \(\d+%\)", line), line
    overall = {line.split(":")[0]: line for line in lines if line.startswith("overall ")}
    assert set(overall) == {"overall calibrated", "overall uncalibrated"}
    assert "(100%)" in overall["overall uncalibrated"]
    # the -t sweeps: each count forecast, and the forecast's best count judged
    sweeps = [line for line in lines if line.startswith("-t sweep ")]
    judged = [line for line in lines if line.startswith("  forecast's best -t ")]
    assert len(sweeps) == len(judged) >= 2
    assert all(re.search(r"within its error \d+\.\d%$", line) for line in judged)


def test_threshold_section() -> None:
    """The op-offload threshold section: each of PR 520's 18 rows (6 ubatches x 3
    thresholds) forecast by a fit of the others, its error, and at each ubatch the
    threshold the forecast picks beside the fastest measured."""
    lines = speed_forecast_lines()
    start = next(i for i, line in enumerate(lines) if line.startswith("op-offload threshold: "))
    rows = [
        line
        for line in lines[start:]
        if re.match(r"^ +\d+ +(32|342|683) +(yes|no) +\d+\.\d +\d+\.\d +\d+\.\d%$", line)
    ]
    assert len(rows) == 18
    # offloaded exactly where the ubatch reaches the threshold
    for line in rows:
        ub, threshold, offloaded = line.split()[:3]
        assert (offloaded == "yes") == (int(ub) >= int(threshold))
    picks = [line for line in lines[start:] if re.match(r"^    -ub \d+: fastest measured", line)]
    assert len(picks) == 6
    assert any(re.match(r"^  the forecast picks the measured side at \d of 6", x) for x in lines)
    assert any(
        re.match(r"^  leave-one-out: median \d+\.\d%, max \d+\.\d% over 18", x) for x in lines
    )
