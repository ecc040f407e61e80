"""``run A B --together`` without llama-server (jobs/together.py): the cheapest model stepped
where the devices measured with all loaded are over, convergence within the budget and the
bound on launches; the tuned profiles of a set chosen as a set, never as one model's alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from moetune.core.devices import DeviceSpec
from moetune.core.goal import Goal
from moetune.core.placement import Placement
from moetune.core.together import TogetherModel, TogetherPlan
from moetune.jobs import together
from moetune.jobs.launch import DeviceSetup
from moetune.jobs.together import MAX_LAUNCHES, TogetherRun, _cheapest, _Model, _tune
from moetune.store.tuned import (
    ProfileStore,
    TogetherSet,
    model_profile,
    together_profiles,
    together_set,
)
from moetune.units import MIB

from support.helpers import EXAMPLE_QWEN, cli
from support.profiles import make_profile

LAYERS = (8, 6)  # the two models' blocks


class _Facts:
    def __init__(self, n_layers: int) -> None:
        self.n_layers = n_layers


def _runs() -> list[_Model]:
    return [
        _Model(name, cast(Any, _Facts(n)), cast(Any, SimpleNamespace(model=name)), cast(Any, None))
        for name, n in zip(("a", "b"), LAYERS, strict=True)
    ]


def _planned(weights: Sequence[float] = (1.0, 1.0)) -> TogetherPlan:
    return TogetherPlan(
        goal="decode",
        together=True,
        models=[
            TogetherModel(
                name=name,
                weight=w,
                share=8,
                plan=cast(Any, None),
                device_bytes=[0],
                host_bytes=0,
                score=100.0,
                alone_score=100.0,
            )
            for name, w in zip(("a", "b"), weights, strict=True)
        ],
        device_names=["Vulkan0"],
        device_budgets=[0],
        device_sums=[0],
        host_bytes=0,
        ram_available_bytes=None,
    )


def _score(i: int, n: int) -> float:
    """a loses 1 per block moved, b 10: a is the cheaper to step."""
    return 100.0 - n * (1.0 if i == 0 else 10.0)


def test_the_cheapest_step_is_the_smallest_weighted_loss() -> None:
    runs = _runs()
    assert _cheapest(runs, [2, 2], [1.0, 1.0], [100.0, 100.0], _score) == 0
    # b weighs so little that its loss counts less
    assert _cheapest(runs, [2, 2], [1.0, 0.05], [100.0, 100.0], _score) == 1
    # a has every block on the CPU: only b can step
    assert _cheapest(runs, [8, 2], [1.0, 1.0], [100.0, 100.0], _score) == 1
    assert _cheapest(runs, [8, 6], [1.0, 1.0], [100.0, 100.0], _score) is None
    # without a forecast: a block's share of its layers (b's blocks are the larger share)
    assert _cheapest(runs, [2, 2], [1.0, 1.0], [None, None], _score) == 0


def _setup(budget: int) -> DeviceSetup:
    device = DeviceSpec(name="Vulkan0", buft="Vulkan0", kind="vulkan", overhead_bytes=0)
    return DeviceSetup(
        info=cast(Any, None),
        devices=(device,),
        listed=(),
        probes=(),
        budgets=(budget,),
        fit_targets_mib=None,
    )


def _use(i: int, n: int) -> int:
    """What model i holds on the device at --n-cpu-moe n: a MiB per block on it."""
    return (LAYERS[i] - n) * MIB


def _fake(monkeypatch: pytest.MonkeyPatch, launched: list[list[int]]) -> None:
    def launch_all(
        models: Sequence[_Model], placements: Sequence[Placement], *_: object
    ) -> tuple[str, None, list[list[int | None]], list[tuple[float | None, ...]], list[str]]:
        ns = [p.n_cpu_moe or 0 for p in placements]
        launched.append(ns)
        each: list[list[int | None]] = [[_use(i, n)] for i, n in enumerate(ns)]
        return "measured", None, each, [(5.0, 50.0, 0.1)] * len(ns), ["a.log", "b.log"]

    def predicted(self: _Model, placement: Placement, setup: DeviceSetup) -> list[int]:
        return [_use(LAYERS.index(self.facts.n_layers), placement.n_cpu_moe or 0)]

    monkeypatch.setattr(together, "_launch_all", launch_all)
    monkeypatch.setattr(together, "_score", lambda model, n, goal: _score(_runs_index(model), n))
    monkeypatch.setattr(_Model, "predicted", predicted)
    monkeypatch.setattr("moetune.jobs.run.command_for", lambda spec, placement: ["llama-server"])


def _runs_index(model: _Model) -> int:
    return LAYERS.index(model.facts.n_layers)


def _run(budget: int, start: Sequence[int]) -> TogetherRun:
    notes: list[str] = []
    return _tune(
        _runs(),
        _planned(),
        start=start,
        splits=[[], []],
        setup=_setup(budget),
        goal=Goal("decode"),
        fill=cast(Any, None),
        on_event=lambda text: None,
        on_note=notes.append,
    )


def test_over_steps_the_cheapest_until_within(monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[list[int]] = []
    _fake(monkeypatch, launched)
    budget = (6 + 4 - 3) * MIB  # at N=2,2: 10 MiB, 3 over
    result = _run(budget, [2, 2])
    assert launched == [[2, 2], [3, 2], [4, 2], [5, 2]]  # a, the cheaper, three times
    assert [launch.status for launch in result.launches] == ["over", "over", "over", "ok"]
    assert [launch.stepped for launch in result.launches] == ["a", "a", "a", None]
    assert result.converged
    assert result.device_measured == [budget]
    assert [m.n_cpu_moe for m in result.models] == [5, 2]
    assert [m.planned_n_cpu_moe for m in result.models] == [2, 2]
    assert [m.device_measured for m in result.models] == [[3 * MIB], [4 * MIB]]


def test_within_at_once_is_one_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[list[int]] = []
    _fake(monkeypatch, launched)
    result = _run(20 * MIB, [2, 2])
    assert launched == [[2, 2]] and result.converged
    assert result.launches[0].status == "ok" and result.launches[0].stepped is None


def test_never_within_stops_at_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[list[int]] = []
    _fake(monkeypatch, launched)
    result = _run(MIB // 2, [0, 0])  # within only after 8 + 6 steps: beyond the bound
    assert not result.converged and len(launched) == MAX_LAUNCHES
    assert result.device_measured == [] and result.notes
    assert all(m.profile_name is None for m in result.models)


def _member(file_name: str, tset: TogetherSet | None, n_ctx: int = 32768) -> Any:
    profile = make_profile(["llama-server", "-m", f"/models/{file_name}"], file_name, n_ctx=n_ctx)
    settings = profile.settings.model_copy(update={"together": tset})
    name = profile.name + (f"-together-{tset.id}" if tset else "")
    return profile.model_copy(update={"settings": settings, "name": name})


def test_a_set_is_chosen_as_a_set(tmp_path: Path) -> None:
    a, b = _member("a.gguf", None), _member("b.gguf", None)
    ids = [a.model, b.model]
    tset = together_set(ids, (1.0, 1.0), (40 * MIB,))
    assert tset.members == ["a.gguf", "b.gguf"] and tset.weights == []
    assert together_set(ids, (2.0, 1.0), (40 * MIB,)).id != tset.id
    members = [_member("a.gguf", tset), _member("b.gguf", tset)]
    assert together_profiles([a, b, *members], ids) == members
    assert together_profiles([a, b, members[0]], ids) is None  # b's member missing
    assert together_profiles([*members], ids, n_ctx=4096) is None
    assert together_profiles([*members], ids[::-1]) is None  # another set's order
    # a model's own profile is never its together profile, whichever is newer
    store = ProfileStore(tmp_path)
    store.save(replace_time(members[0], "2030-01-01T00:00:00+00:00"))
    store.save(a)
    chosen = model_profile(store, a.model, warn=lambda line: None)
    assert chosen.name == a.name
    store.remove(a.name)
    with pytest.raises(Exception, match="no tuned profile"):
        model_profile(store, a.model, warn=lambda line: None)


def replace_time(profile: Any, stamp: str) -> Any:
    return profile.model_copy(update={"tuned_at": stamp})


def test_run_together_refuses_an_rpc_device_before_any_launch() -> None:
    code, _, err = cli(
        "run", str(EXAMPLE_QWEN), str(EXAMPLE_QWEN), "--together", "--rpc", "127.0.0.1:1"
    )
    assert code == 5, err
    assert "an RPC device serves one process at a time" in err
    assert len(err.strip().splitlines()) <= 2  # the line and its hint


def test_run_with_two_models_needs_together() -> None:
    code, _, err = cli("run", str(EXAMPLE_QWEN), str(EXAMPLE_QWEN))
    assert code == 5 and "--together" in err
