"""This machine's RAM read bandwidth: measured now (in about a second) and saved for plan
and calibrate, or, with ``--no-measure``, the figure saved for this machine before."""

from __future__ import annotations

from moetune.errors import MoetuneError
from moetune.hardware.base import HostInfo
from moetune.jobs.doctor.findings import DoctorInputs, Finding, RamRead, gbps
from moetune.jobs.figures import machine_identity, saved_entry
from moetune.store.machine import SavedRamBandwidth, save_ram_bandwidth, saved_ram_bandwidth
from moetune.units import format_bytes


def _describe(figure: SavedRamBandwidth) -> str:
    """What a figure is: how it was measured."""
    threads = "1 thread" if figure.threads == 1 else f"{figure.threads} threads"
    passes = "1 pass" if figure.passes == 1 else f"the median of {figure.passes} passes"
    text = (
        f"RAM read {gbps(figure.bytes_per_s)} (a read-only streaming figure: {threads} "
        f"over a {format_bytes(figure.buffer_bytes)} buffer, {passes}"
    )
    single = figure.by_threads.get(1)
    if figure.threads > 1 and single:
        text += f"; 1 thread: {gbps(single)}"
    return text + ")"


def ram_read_bandwidth(
    inputs: DoctorInputs, host: HostInfo
) -> tuple[RamRead | None, Finding | None]:
    """Measure the RAM read bandwidth and keep it (``inputs.machine_file``), or, with
    ``--no-measure``, read the one kept for this machine; the figure and its finding (none
    when there is neither a probe nor a file)."""
    file = inputs.machine_file
    if inputs.ram_probe is None:
        if file is None:
            return None, None
        try:
            saved = saved_ram_bandwidth(machine_identity(host), file)
        except MoetuneError as exc:
            return None, Finding(
                check="ram-bandwidth",
                status="warn",
                message=f"no saved RAM read bandwidth: {exc.message}",
                fix="run `moetune doctor` without --no-measure to measure it again",
            )
        if saved is None:
            return None, Finding(
                check="ram-bandwidth",
                status="ok",
                message="RAM read bandwidth not measured (--no-measure) and none saved for "
                "this machine",
            )
        message = f"{_describe(saved)}, measured {saved.measured_at} and saved in {file}"
        found = RamRead(figure=saved, source="saved", file=str(file))
        return found, Finding(check="ram-bandwidth", status="ok", message=message)
    cores = host.physical_cores or host.logical_cores
    measured = inputs.ram_probe.measure(cores, min(host.ram_available_bytes, host.ram_total_bytes))
    if measured is None:
        return None, Finding(
            check="ram-bandwidth",
            status="warn",
            message=f"RAM read bandwidth {inputs.ram_probe.why or 'not measured'}",
            fix="free RAM and run doctor again, or pass --ram-bandwidth GB/s",
        )
    figure = saved_entry(measured, host)
    message = f"{_describe(figure)} in {measured.seconds:.1f} s"
    if file is None:
        return RamRead(figure=figure, source="measured", file=None), Finding(
            check="ram-bandwidth", status="ok", message=message
        )
    try:
        save_ram_bandwidth(figure, file)
    except MoetuneError as exc:
        return RamRead(figure=figure, source="measured", file=None), Finding(
            check="ram-bandwidth",
            status="warn",
            message=f"{message}; not saved: {exc.message}",
            fix="make $MOETUNE_HOME writable, so that plan and calibrate can use the figure",
        )
    found = RamRead(figure=figure, source="measured", file=str(file))
    return found, Finding(check="ram-bandwidth", status="ok", message=f"{message}; saved in {file}")
