"""This machine's RAM read bandwidth for a speed forecast, the one way plan, run and bench get
it: ``--ram-bandwidth`` where given, else the figure saved for this machine (by ``moetune
doctor``, or by an earlier forecast), else measured now as doctor measures it (about a
second, ``hardware/membw.py``) and saved as doctor saves it, so only the first forecast
measures. ``--no-measure``, or ``MOETUNE_NO_MEASURE=1`` in the environment (scripts and the
tests, for output that does not depend on the machine), skips the measurement: the figure is
then missing unless given or saved.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from moetune.core.ram import RamFigure
from moetune.core.threads import single_share_of
from moetune.errors import MoetuneError

if TYPE_CHECKING:
    from moetune.hardware.base import HostInfo, RamBandwidth, RamBandwidthProbe
    from moetune.store.machine import MachineIdentity, SavedRamBandwidth
    from moetune.units import RamRate

NO_MEASURE_ENV = "MOETUNE_NO_MEASURE"  # "1": as --no-measure, for every command


def machine_identity(host: HostInfo) -> MachineIdentity:
    """What tells this machine from another for its saved figures."""
    from moetune.store.machine import MachineIdentity

    return MachineIdentity(
        cpu_model=host.cpu_model or "unknown CPU", ram_total_bytes=host.ram_total_bytes
    )


def saved_entry(figure: RamBandwidth, host: HostInfo) -> SavedRamBandwidth:
    """A measurement as the store keeps it, stamped now."""
    from moetune.store.machine import SavedRamBandwidth

    return SavedRamBandwidth(
        machine=machine_identity(host),
        bytes_per_s=figure.bytes_per_s,
        threads=figure.threads,
        buffer_bytes=figure.buffer_bytes,
        passes=figure.passes,
        by_threads=figure.by_threads,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def measure_disabled() -> bool:
    """``MOETUNE_NO_MEASURE=1``: no command measures the RAM for a forecast."""
    return os.environ.get(NO_MEASURE_ENV, "") not in ("", "0")


def streaming_probe() -> RamBandwidthProbe:
    """The probe doctor measures with (numpy's streaming read; tests replace it)."""
    from moetune.hardware.membw import StreamingReadProbe

    return StreamingReadProbe()


def ram_figure(
    given: RamRate | None,
    *,
    measure: bool = True,
    warn: Callable[[str], None] = lambda text: None,
) -> RamFigure | None:
    """This machine's RAM read bandwidth for a forecast: ``given``, else the one saved for it,
    else (unless ``measure`` is off or ``MOETUNE_NO_MEASURE`` is set) measured now and saved;
    None where there is none. A saved file that cannot be read, a measurement that cannot be
    made or saved: a warning, never an error (the forecast then names the figure missing)."""
    if given is not None:
        return RamFigure(bytes_per_s=given.bytes_per_s, source="given", ram=given.ram)
    from moetune.hardware.host import LiveHostProbe
    from moetune.store.paths import machine_file

    file = machine_file()
    host: HostInfo | None = None  # read once: for the saved figure's machine, for measuring
    if file.exists():  # else nothing of the store is loaded (plan starts fast)
        from moetune.store.machine import saved_ram_bandwidth

        host = LiveHostProbe().host()
        try:
            saved = saved_ram_bandwidth(machine_identity(host), file)
        except MoetuneError as exc:
            warn(f"no saved RAM read bandwidth: {exc.message}")
            saved = None
        except ValueError:  # the host's RAM size unknown: no figure is this machine's
            saved = None
        if saved is not None:
            return RamFigure(
                bytes_per_s=saved.bytes_per_s,
                source="saved",
                measured_at=saved.measured_at,
                file=str(file),
                single_thread_share=single_share_of(saved.by_threads),
            )
    if not measure or measure_disabled():
        return None
    from moetune.store.machine import save_ram_bandwidth

    host = host or LiveHostProbe().host()
    probe = streaming_probe()
    cores = host.physical_cores or host.logical_cores
    measured = probe.measure(cores, min(host.ram_available_bytes, host.ram_total_bytes))
    if measured is None:
        warn(f"RAM read bandwidth {probe.why or 'not measured'}: the forecast lacks it")
        return None
    entry = saved_entry(measured, host)
    kept: str | None = str(file)
    try:
        save_ram_bandwidth(entry, file)
    except MoetuneError as exc:
        warn(f"the RAM read bandwidth measured now is not saved: {exc.message}")
        kept = None
    return RamFigure(
        bytes_per_s=entry.bytes_per_s,
        source="measured",
        measured_at=entry.measured_at,
        file=kept,
        single_thread_share=single_share_of(entry.by_threads),
    )
