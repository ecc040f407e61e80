"""The figures of a speed forecast, each with where it came from (``machine_figures``: a
device's hardware profile, else the typical figures of its class; core/figures.py), and this
machine's RAM read bandwidth, the one way plan, run and bench get it: ``--ram-bandwidth``
where given, else the figure saved for this machine (by ``moetune doctor``, or by an earlier
forecast), else measured now as doctor measures it (about a second, ``hardware/membw.py``)
and saved as doctor saves it, so only the first forecast measures. ``--no-measure``, or
``MOETUNE_NO_MEASURE=1`` in the environment (scripts and the tests, for output that does not
depend on the machine), skips the measurement: the forecast then takes the typical RAM
bandwidth, marked assumed, unless one is given or saved.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from moetune.core.figures import (
    RPC_LINK_BYTES_PER_S,
    FigureSource,
    Provenance,
    Quantity,
    cpu_flops,
    typical_gpu,
    typical_ram,
)
from moetune.core.ram import RamFigure
from moetune.core.speed import DeviceFigures, MachineFigures
from moetune.core.threads import single_share_of
from moetune.errors import MoetuneError

if TYPE_CHECKING:
    from moetune.core.devices import DeviceSpec
    from moetune.hardware.base import HostInfo, RamBandwidth, RamBandwidthProbe
    from moetune.store.hardware import HardwareProfile
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
    made or saved: a warning, never an error (the forecast then assumes the typical one)."""
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
        warn(
            f"RAM read bandwidth {probe.why or 'not measured'}: the forecast assumes a typical one"
        )
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


# --- every figure of a forecast, with where it came from (core/figures.py) ----------------------


def _profile_sources(index: int, name: str, profile: HardwareProfile) -> list[FigureSource]:
    """A device's figures from its hardware profile: published (a shipped profile's), derived
    (listed in its ``derived``), or given (a profile file of the user's); a figure the profile
    lacks is left out (the class fills it)."""
    where = f"hardware profile {profile.id}" + ("" if profile.shipped else f" ({profile.source})")

    def provenance(field: str) -> Provenance:
        if not profile.shipped:
            return "given"
        return "derived" if field in profile.derived else "published"

    found = [
        FigureSource(
            figure=f"{name} memory bandwidth",
            value=profile.memory_bandwidth_bytes_per_s,
            provenance=provenance("memory_bandwidth_gb_s"),
            basis=f"{where}: {profile.memory_bandwidth_gb_s:g} GB/s",
            device=index,
            quantity="memory",
        ),
        FigureSource(
            figure=f"{name} host link bandwidth",
            value=profile.pcie_bytes_per_s,
            provenance=provenance("pcie_lanes" if "pcie_lanes" in profile.derived else "pcie_gen"),
            basis=f"{where}: PCIe {profile.pcie_gen}.0 x{profile.pcie_lanes}",
            device=index,
            quantity="link",
        ),
    ]
    if profile.flops_per_s is not None:
        found.append(
            FigureSource(
                figure=f"{name} FLOP/s",
                value=profile.flops_per_s,
                provenance=provenance("fp16_tflops"),
                basis=f"{where}: {profile.fp16_tflops:g} dense FP16 TFLOPS",
                device=index,
                quantity="flops",
            )
        )
    return found


def _class_sources(
    index: int, device: DeviceSpec, have: dict[Quantity, float]
) -> list[FigureSource]:
    """The typical figures of the device's class for those it lacks (``have``: those it has):
    memory bandwidth and host link the class's medians (an RPC device's link: 1 Gbit/s
    Ethernet), FLOP/s its memory bandwidth x the class's FLOP per byte/s."""
    table = typical_gpu(device.total_bytes)
    found = []
    typical = f"typical of {table.label}"
    if "memory" not in have:
        found.append(
            FigureSource(
                figure=f"{device.name} memory bandwidth",
                value=table.memory.value,
                provenance="assumed",
                basis=f"{typical}: {table.memory.basis('memory bandwidth')}",
                device=index,
                quantity="memory",
            )
        )
    if "link" not in have:
        value, basis = table.link.value, f"{typical}: {table.link.basis('host link')}"
        if device.kind == "rpc":
            value, basis = RPC_LINK_BYTES_PER_S, "typical RPC network: 1 Gbit/s Ethernet"
        found.append(
            FigureSource(
                figure=f"{device.name} host link bandwidth",
                value=value,
                provenance="assumed",
                basis=basis,
                device=index,
                quantity="link",
            )
        )
    if "flops" not in have:
        memory = have.get("memory", table.memory.value)
        ratio = table.flop_per_byte
        found.append(
            FigureSource(
                figure=f"{device.name} FLOP/s",
                value=memory * ratio.value,
                provenance="assumed",
                basis=f"memory bandwidth {memory / 1e9:.4g} GB/s x {ratio.value:.4g} FP16 FLOP "
                f"per byte/s, {typical}: {ratio.basis('FLOP per byte/s')}",
                device=index,
                quantity="flops",
            )
        )
    return found


def machine_figures(
    devices: Sequence[DeviceSpec],
    profiles: Sequence[HardwareProfile | None],
    ram: RamFigure | None,
    *,
    cores: int | None,
    stated: Sequence[Sequence[FigureSource]] = (),
) -> MachineFigures:
    """Every figure a forecast needs, each with where it came from: a device's from its
    hardware profile (``profiles``, one per device, None: it has none) and ``stated`` (per
    device, figures another source gives, which stand over the profile's), the rest the
    typical figures of its class; the RAM's ``ram`` (given, saved or measured), else the
    typical one;
    the CPU's from ``cores`` (core/figures.py). Nothing is left unknown."""
    sources: list[FigureSource] = []
    for index, (device, profile) in enumerate(zip(devices, profiles, strict=True)):
        own = _profile_sources(index, device.name, profile) if profile is not None else []
        own += stated[index] if index < len(stated) else []
        have = {s.quantity: s.value for s in own}
        sources += own + _class_sources(index, device, have)
    if ram is not None:
        how = {"given": "--ram-bandwidth", "saved": "measured on this machine, saved"}
        basis = how.get(ram.source, "measured on this machine now")
        if ram.ram:
            basis += f" ({ram.ram} peak)"
        if ram.measured_at:
            basis += f" at {ram.measured_at}"
        sources.append(
            FigureSource(
                figure="RAM bandwidth",
                value=ram.bytes_per_s,
                provenance=ram.source,
                basis=basis,
                quantity="ram",
            )
        )
    else:
        sources.append(typical_ram())
    sources.append(cpu_flops(cores))
    return replace(
        figures_of(len(devices), sources),
        physical_cores=cores,  # the thread term's (core/threads.py)
        ram_single_thread_share=ram.single_thread_share if ram is not None else None,
    )


def figures_of(n_devices: int, sources: Sequence[FigureSource]) -> MachineFigures:
    """The machine's figures as ``sources`` give them (the last one of each figure counts)."""
    devices = [DeviceFigures() for _ in range(n_devices)]
    ram = cpu = None
    names = {"memory": "memory_bytes_per_s", "link": "link_bytes_per_s", "flops": "flops_per_s"}
    for source in sources:
        if source.quantity == "ram":
            ram = source.value
        elif source.quantity == "cpu":
            cpu = source.value
        elif source.device is not None:
            devices[source.device] = replace(
                devices[source.device], **{names[source.quantity]: source.value}
            )
    return MachineFigures(
        devices=tuple(devices), ram_bytes_per_s=ram, cpu_flops_per_s=cpu, sources=tuple(sources)
    )


def device_profiles(
    devices: Sequence[DeviceSpec], known: Sequence[HardwareProfile | None] = ()
) -> list[HardwareProfile | None]:
    """Each device's hardware profile: ``known`` (one per device, where the caller found it),
    else the one of its name (``description``) and memory; None where none matches."""
    found: list[HardwareProfile | None] = [
        known[index] if index < len(known) else None for index in range(len(devices))
    ]
    if all(p is not None or not d.description for p, d in zip(found, devices, strict=True)):
        return found  # nothing to look up (a plain --vram loads no profile)
    from moetune.store.hardware import match_detected, scan_hardware_profiles

    profiles, _ = scan_hardware_profiles()
    for index, device in enumerate(devices):
        if found[index] is None and device.description:
            found[index] = match_detected(device.description, device.total_bytes, profiles)
    return found
