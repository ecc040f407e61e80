"""moetune's memory model against CUDA figures posted in public (tests/data/public_cuda/): each
post replayed on a header-only file of its model's shapes with the placement and settings it
gives; weights within 1 MiB, KV within 1 %, compute within 10 % or 64 MiB, or an outlier the data
file explains (support/public_cuda.py)."""

from __future__ import annotations

import pytest

from support.factory import ModelFactory
from support.public_cuda import Check, checks, files, load, predict, replayed


@pytest.fixture(scope="module")
def every_check(model_factory: ModelFactory) -> dict[str, list[Check]]:
    return {name: checks(name, predict(name, model_factory)) for name in replayed()}


@pytest.mark.parametrize("name", [p.name for p in files()])
def test_each_post_is_replayed_or_says_why(name: str) -> None:
    data = load(name)
    assert ("replay" in data) != ("not_replayed" in data), name
    if "replay" in data:
        replay = data["replay"]
        assert replay["assumed"], "say what the post leaves out and what was taken for it"
        assert set(replay["compare"]) == {"weights", "kv", "compute"}
        assert replay["same_file"] or replay["compare"]["weights"] is None, (
            "weights are compared only on the post's own tensors"
        )
    else:
        assert len(data["not_replayed"]) > 20


@pytest.mark.parametrize("name", replayed())
def test_posted_figures(every_check: dict[str, list[Check]], name: str) -> None:
    """Every compared figure within its tolerance, or an outlier that the data file explains
    and that is in fact outside it (an explanation that no longer applies fails too)."""
    found = every_check[name]
    print(f"\n{name}")
    for c in found:
        mark = "ok" if c.within else "OUTLIER"
        figures = f"posted {c.posted:10.2f} moetune {c.predicted:10.2f}"
        print(f"  {c.device:6} {c.part:8} {figures} {mark}")
    unexplained = [c for c in found if not c.within and c.outlier is None]
    assert not unexplained, unexplained
    stale = [c for c in found if c.within and c.outlier is not None]
    assert not stale, stale
    listed = {(o["device"], o["part"]) for o in load(name)["replay"]["outliers"]}
    assert listed <= {(c.device, c.part) for c in found}, "an outlier names no compared figure"


def test_enough_public_points(every_check: dict[str, list[Check]]) -> None:
    """At least 9 posted device figures (one device of one run) checked, of at least 4 models,
    beyond a few outliers."""
    points = {(c.file, c.device) for found in every_check.values() for c in found if c.within}
    models = {load(name)["model"]["name"] for name in every_check}
    assert len(points) >= 9, points
    assert len(models) >= 4, models
    figures = [c for found in every_check.values() for c in found]
    assert sum(c.within for c in figures) >= 3 * sum(not c.within for c in figures)


def test_weights_are_compared_to_the_mib_where_the_file_is_known(
    every_check: dict[str, list[Check]],
) -> None:
    weights = [c for found in every_check.values() for c in found if c.part == "weights"]
    assert len(weights) >= 5
    assert all(abs(c.error) <= 1 for c in weights)
