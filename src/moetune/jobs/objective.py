"""`run --objective` / `--workload`: after memory converged, launch the frontier's best
candidates by the forecast (calibrated on this run's points and those kept on this machine,
of every model), keep the fastest measured within memory (core/objective.py decides)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from moetune.core.calibrate import SpeedFit
from moetune.core.facts import ModelFacts
from moetune.core.flags import pairs, words
from moetune.core.frontier import Frontier, FrontierEntry, frontier
from moetune.core.goal import Goal
from moetune.core.objective import Candidate, measure_candidates
from moetune.core.plan import PlanRequest, make_plan, speed_basis
from moetune.core.ram import RamFigure
from moetune.core.speed import DeviceFigures, MachineFigures
from moetune.jobs.figures import ram_figure
from moetune.jobs.launch import DeviceSetup, LaunchSpec
from moetune.jobs.speed import measured_of, model_of
from moetune.records.results import ObjectiveLaunch, ObjectiveRun, RunResult
from moetune.records.speed import SpeedPoint
from moetune.store.speed import point_digest

# one launch at ``--n-cpu-moe n`` of a spec, as run measures: a one-attempt result, and the
# speed points it kept
MeasureAt = Callable[[LaunchSpec, int], tuple[RunResult, list[SpeedPoint]]]


def with_ubatch(spec: LaunchSpec, n_ubatch: int) -> LaunchSpec:
    """``spec`` at ``-ub n_ubatch`` (``-b`` raised to it where it is smaller: llama.cpp clamps
    the ubatch to the batch); the pass-through's own -ub/-b give way."""
    n_batch = max(spec.settings.n_batch, n_ubatch)
    kept = [p for p in pairs(spec.pass_through) if not p.is_("--ubatch-size", "--batch-size")]
    settings = replace(spec.settings, n_ubatch=n_ubatch, n_batch=n_batch)
    flags = ("-ub", str(n_ubatch), "-b", str(n_batch))
    return replace(spec, settings=settings, pass_through=(*words(kept), *flags))


def merged(points: Sequence[SpeedPoint], more: Sequence[SpeedPoint]) -> list[SpeedPoint]:
    """Both, each point once."""
    found: dict[str, SpeedPoint] = {}
    for point in (*points, *more):
        found.setdefault(point_digest([point]), point)
    return list(found.values())


def run_request(
    spec: LaunchSpec,
    setup: DeviceSetup,
    facts: ModelFacts,
    n_cpu_moe: int,
    points: list[SpeedPoint],
    *,
    figures: MachineFigures | None = None,
) -> PlanRequest:
    """The plan request of the run's devices and budgets at its converged N, calibrated on
    ``points``; ``figures``: the machine's (jobs/figures.py; None: none known)."""
    return PlanRequest(
        model_path=spec.model,
        devices=setup.devices,
        target_vram=setup.budgets,
        headrooms=(0,),
        settings=spec.settings,
        n_cpu_moe=n_cpu_moe,
        physical_cores=spec.threads,
        device_args=setup.device_args,
        pass_through=spec.pass_through,
        extras=spec.extras,
        figures=figures or MachineFigures(devices=tuple(DeviceFigures() for _ in setup.devices)),
        measured=tuple(
            measured_of(points, facts, spec.settings, setup.devices, model=model_of(spec.model))
        ),
    )


def _candidates(found: Frontier, least_n: int, n_prompt: int) -> list[Candidate]:
    """The ``--n-cpu-moe`` candidates on every device run can launch, one per (N, -ub, -t):
    none below the converged N (it was measured over), no -ub above the smallest that holds
    the prompt in one ubatch (a larger one forecasts the same and costs memory)."""
    ubatches = sorted({e.n_ubatch for e in found.entries})
    cap = next((u for u in ubatches if u >= n_prompt), ubatches[-1] if ubatches else 0)
    seen: dict[tuple[int, int, int | None], Candidate] = {}
    base = _base(found)
    own = base.op_offload_min_batch if base is not None else None
    for entry in found.entries:
        n = entry.n_cpu_moe
        if entry.form != "n_cpu_moe" or not entry.all_devices or n is None or n < least_n:
            continue
        if entry.op_offload_min_batch != own:  # another op-offload threshold: not launched
            continue
        if entry.n_ubatch > cap:
            continue
        threads = _threads(entry)
        seen.setdefault(
            (n, entry.n_ubatch, threads), Candidate(n, entry.n_ubatch, entry.score, threads)
        )
    return list(seen.values())


def _threads(entry: FrontierEntry) -> int | None:
    """A ``-t`` candidate's threads (None: the converged launch's)."""
    return entry.threads if entry.thread_variant else None


def with_threads(spec: LaunchSpec, threads: int | None) -> LaunchSpec:
    """``spec`` at ``-t threads`` (None: as it is)."""
    return spec if threads is None else replace(spec, threads=threads)


def _forecast(
    facts: ModelFacts,
    spec: LaunchSpec,
    setup: DeviceSetup,
    n_cpu_moe: int,
    *,
    points: list[SpeedPoint],
    goal: Goal,
    ram: RamFigure | None,
) -> tuple[Frontier | None, SpeedFit | None]:
    """The frontier beside the converged N, forecast on ``points``, and their fit."""
    from moetune.jobs.devices import physical_cores
    from moetune.jobs.figures import device_profiles, machine_figures

    profiles = device_profiles(setup.devices)
    figures = machine_figures(setup.devices, profiles, ram, cores=physical_cores())
    req = run_request(spec, setup, facts, n_cpu_moe, points, figures=figures)
    return frontier(facts, req, make_plan(facts, req), goal), speed_basis(req)[1]


def _base(found: Frontier | None) -> FrontierEntry | None:
    return next((e for e in found.entries if e.base), None) if found else None


def tune_for_goal(
    facts: ModelFacts,
    spec: LaunchSpec,
    setup: DeviceSetup,
    result: RunResult,
    goal: Goal,
    *,
    points: list[SpeedPoint],
    n_prompt: int,
    measure_at: MeasureAt,
) -> RunResult:
    """``result`` (the converged run) with its extra launches for ``goal`` and the winner;
    ``n_prompt``: the prompt each launch's prefill is measured on (the fill)."""
    best = result.best
    if best is None:
        return result
    goal = replace(goal, prompt=n_prompt)
    ram = ram_figure(None)  # no server is up: measured now if none is saved
    found, fit = _forecast(facts, spec, setup, best.n_cpu_moe, points=points, goal=goal, ram=ram)
    calibration = fit.calibration.label if fit else "uncalibrated"
    base_ub = spec.settings.n_ubatch
    base_score = goal.score_of(best.decode_tps, best.prompt_tps)
    base_entry = _base(found)
    if found is None or base_entry is None:
        why = "kept the converged placement: the forecast cannot place it (it does not fit)"
        return result.model_copy(
            update={
                "objective": ObjectiveRun(
                    goal=goal.name,
                    n_prompt=n_prompt,
                    calibration=calibration,
                    base_n_cpu_moe=best.n_cpu_moe,
                    base_n_ubatch=base_ub,
                    base_forecast_score=None,
                    base_measured_score=base_score,
                    stopped="nothing to compare with",
                    why=why,
                )
            }
        )
    forecasts = {(e.n_cpu_moe, e.n_ubatch, _threads(e)): e.forecast for e in found.entries}
    launches: list[ObjectiveLaunch] = []
    added: list[SpeedPoint] = []
    results: list[RunResult] = []

    def measure(candidate: Candidate) -> float | None:
        at = with_threads(with_ubatch(spec, candidate.n_ubatch), candidate.threads)
        one, kept = measure_at(at, candidate.n_cpu_moe)
        added.extend(kept)
        results.append(one)
        attempt = replace(one.attempts[0], n_ubatch=candidate.n_ubatch)
        score = goal.score_of(attempt.decode_tps, attempt.prompt_tps) if attempt.fits else None
        forecast = forecasts[(candidate.n_cpu_moe, candidate.n_ubatch, candidate.threads)]
        launches.append(
            ObjectiveLaunch(
                n_cpu_moe=candidate.n_cpu_moe,
                n_ubatch=candidate.n_ubatch,
                n_threads=candidate.threads,
                forecast_decode_tps=forecast.decode_tok_s,
                forecast_prefill_tps=forecast.prefill_tok_s,
                forecast_score=candidate.forecast or 0.0,
                expected_score=0.0,
                measured_score=score,
                attempt=attempt,
            )
        )
        return score

    def reforecast() -> tuple[list[Candidate], Candidate, float | None]:
        """The forecasts calibrated on the points the launches added too."""
        nonlocal calibration
        again, refit = _forecast(
            facts, spec, setup, n, points=merged(points, added), goal=goal, ram=ram
        )
        calibration = refit.calibration.label if refit else "uncalibrated"
        entry = _base(again)
        if again is None or entry is None:
            return [], Candidate(n, base_ub, None), None
        forecasts.update(
            {(e.n_cpu_moe, e.n_ubatch, _threads(e)): e.forecast for e in again.entries}
        )
        found_n = _candidates(again, n, n_prompt)
        return (
            found_n,
            Candidate(n, base_ub, entry.score),
            refit.forecast_error if refit else None,
        )

    n = best.n_cpu_moe
    choice = measure_candidates(
        _candidates(found, n, n_prompt),
        Candidate(n, base_ub, base_entry.score),
        base_score,
        measure,
        error=fit.forecast_error if fit else None,
        goal=goal.name,
        reforecast=reforecast,
    )
    for launched, tried in zip(launches, choice.tried, strict=True):
        launched.expected_score = tried.expected_score
    run = ObjectiveRun(
        goal=goal.name,
        n_prompt=n_prompt,
        calibration=calibration,
        base_n_cpu_moe=best.n_cpu_moe,
        base_n_ubatch=base_ub,
        base_forecast_score=base_entry.score,
        base_forecast_decode_tps=base_entry.forecast.decode_tok_s,
        base_forecast_prefill_tps=base_entry.forecast.prefill_tok_s,
        base_measured_score=base_score,
        launches=launches,
        winner=choice.winner,
        stopped=choice.stopped,
        why=choice.why,
        points_added=len(added),
    )
    update: dict[str, object] = {"objective": run}
    if choice.winner is not None:
        won = results[choice.winner]
        update |= {"best": launches[choice.winner].attempt, "command": won.command}
    return result.model_copy(update=update)
