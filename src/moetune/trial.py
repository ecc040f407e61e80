"""One launch of the tuning loop: start llama-server at N, wait, fill the context, measure, stop.

Out of memory at load or during the fill counts as "too big" (status ``oom``); any other
failure of llama-server ends the run with its last log lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from moetune.bench import ServerClient, fill_context
from moetune.command import args_for, server_argv
from moetune.errors import OutOfMemoryError, ServerFailedError
from moetune.memory import Settings
from moetune.memprobe import MemoryProbe
from moetune.placement import Placement
from moetune.server import RunningServer, launch
from moetune.tuner import Attempt

Event = Callable[[str], None]


@dataclass(frozen=True)
class TrialConfig:
    binary: Path
    model: str
    settings: Settings
    extra_args: tuple[str, ...] = ()
    fill_tokens: int | None = None  # default: the whole context
    n_predict: int = 32
    ready_timeout_s: float = 600.0
    port: int | None = None
    log_dir: Path | None = None
    threads: int | None = None


def trial_args(config: TrialConfig, n_cpu_moe: int) -> list[str]:
    """llama-server's arguments (without the binary) for ``--n-cpu-moe n_cpu_moe``."""
    args = args_for(
        config.model, config.settings, Placement.with_n_cpu_moe(n_cpu_moe),
        threads=config.threads, extra=config.extra_args, with_ubatch=False,
    )  # fmt: skip
    return server_argv(args)[1:]


def _measure(server: RunningServer, probe: MemoryProbe, settings: Settings) -> int | None:
    figure = probe.device_bytes(server)
    if figure is None or probe.includes_overhead:
        return figure
    return figure + settings.gpu_overhead_bytes


def _oom(n: int, predicted: int, server: RunningServer, message: str) -> Attempt:
    return Attempt(n_cpu_moe=n, predicted_bytes=predicted, measured_bytes=None, status="oom",
                   log_path=str(server.log_path), message=message)  # fmt: skip


def run_trial(config: TrialConfig, n: int, *, predicted: int, target_bytes: int,
              probe: MemoryProbe, on_event: Event) -> Attempt:  # fmt: skip
    """Launch at ``--n-cpu-moe n``, fill the context, measure the device, stop the server."""
    on_event(f"N={n}: starting llama-server")
    server = launch(config.binary, trial_args(config, n), port=config.port, log_dir=config.log_dir)
    with server:
        try:
            with ServerClient(server.url) as client:
                client.wait_ready(config.ready_timeout_s, server.check_alive,
                                  lambda s: on_event(f"N={n}: loading ({s:.0f} s)"))  # fmt: skip
                client.complete("Hello", 4, stream=False)  # warm-up: first-call costs
                on_event(f"N={n}: filling the context")
                fill = fill_context(client, config.fill_tokens or config.settings.n_ctx,
                                    config.n_predict)  # fmt: skip
        except OutOfMemoryError as exc:
            return _oom(n, predicted, server, exc.message.splitlines()[0])
        except ServerFailedError:
            if (line := server.failure()) is not None:
                return _oom(n, predicted, server, line)
            raise
        measured = _measure(server, probe, config.settings)
    status = "ok" if measured is not None and measured <= target_bytes else "over"
    return Attempt(
        n_cpu_moe=n, predicted_bytes=predicted, measured_bytes=measured, status=status,
        ttft_s=fill.ttft_s, prompt_tps=fill.prompt_per_second,
        decode_tps=fill.client_decode_tps or fill.predicted_per_second,
        log_path=str(server.log_path),
    )  # fmt: skip


def conflicting_args(extra: Sequence[str]) -> list[str]:
    """Arguments after ``--`` that would fight moetune's own placement or measurement."""
    owned = {
        "-ngl", "--gpu-layers", "--n-gpu-layers", "-ncmoe", "--n-cpu-moe", "-cmoe", "--cpu-moe",
        "-ot", "--override-tensor", "-fit", "--fit", "-c", "--ctx-size", "-ctk",
        "--cache-type-k", "-ctv", "--cache-type-v", "-fa", "--flash-attn", "-m", "--model",
        "-np", "--parallel", "-ts", "--tensor-split", "-sm", "--split-mode",
    }  # fmt: skip
    return [arg for arg in extra if arg.split("=", 1)[0] in owned]


def extra_int(extra: Sequence[str], *names: str) -> int | None:
    """The integer value of one of ``names`` among pass-through arguments (``-ub 2048``)."""
    for index, arg in enumerate(extra):
        key, _, value = arg.partition("=")
        if key in names:
            text = value or (extra[index + 1] if index + 1 < len(extra) else "")
            return int(text) if text.isdigit() else None
    return None
