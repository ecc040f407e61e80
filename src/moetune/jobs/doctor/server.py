"""llama-server and the devices it offloads to: its build and device list, the devices NVML
does not see (other backends, RPC servers: their link is the network), and each ``--rpc``
server, which must answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from moetune.errors import MoetuneError, ServerNotFoundError
from moetune.jobs.doctor.findings import DeviceLink, Finding, Status
from moetune.llamacpp.info import INSTALL_HINT
from moetune.records.server import ServerInfo
from moetune.units import format_bytes


def server_finding(lookup: Callable[[], ServerInfo]) -> tuple[Finding, ServerInfo | None]:
    try:
        info = lookup()
    except MoetuneError as exc:
        status: Status = "fail" if isinstance(exc, ServerNotFoundError) else "warn"
        first = exc.message.splitlines()[0]
        return Finding(
            check="llama-server", status=status, message=first, fix=exc.hint or INSTALL_HINT
        ), None
    build = f"build {info.build_number}" if info.build_number else "build not recorded"
    about = f"llama-server {info.version or '?'} ({build}) at {info.path}"
    if not info.devices:
        no_gpu = Finding(
            check="llama-server",
            status="warn",
            message=f"{about} sees no GPU (a CPU-only build?)",
            fix="install a CUDA build of llama.cpp",
        )
        return no_gpu, info
    devices = ", ".join(
        f"{d.name} {d.description} ({format_bytes(d.total_bytes)})" for d in info.devices
    )
    return Finding(check="llama-server", status="ok", message=f"{about}; devices: {devices}"), info


def device_links(info: ServerInfo | None) -> list[DeviceLink]:
    """The link of each CUDA and RPC device llama-server lists."""
    kinds: dict[str, Literal["pcie", "network"]] = {"CUDA": "pcie", "RPC": "network"}
    found = []
    for d in info.devices if info else ():
        kind = next((k for prefix, k in kinds.items() if d.name.startswith(prefix)), None)
        if kind is not None:
            found.append(DeviceLink(name=d.name, description=d.description, link=kind))
    return found


def device_findings(info: ServerInfo | None) -> list[Finding]:
    """Every device llama-server offloads to that NVML does not report (RPC servers, other
    backends), one finding each; an RPC device's link is the network."""
    if info is None:
        return []
    found = []
    for d in info.devices:
        if d.name.startswith("CUDA"):
            continue
        message = (
            f"{d.name} {d.description}: {format_bytes(d.total_bytes)}, "
            f"{format_bytes(d.free_bytes)} free"
        )
        if d.name.startswith("RPC"):
            message += "; no PCIe link here: its link is the network (weights, copies, results)"
        found.append(Finding(check="device", status="ok", message=message))
    return found


def rpc_findings(
    endpoints: Sequence[str], info: ServerInfo | None, reachable: Callable[[str], bool] | None
) -> list[Finding]:
    """Each ``--rpc`` server that llama-server does not list as a device: a failure when it
    does not answer, else a warning (it answers, but no device of it is known); the listed
    ones have their ``device`` finding already (``device_findings``)."""
    listed = {d.description for d in info.devices if d.name.startswith("RPC")} if info else set()
    found = []
    for endpoint in endpoints:
        if endpoint in listed:
            continue
        host, _, port = endpoint.rpartition(":")
        if reachable is not None and reachable(endpoint):
            if info is None:
                message = f"RPC server {endpoint} answers; its devices are not known"
                fix = "llama-server could not list them: see its finding above"
            else:
                message = f"RPC server {endpoint} answers, but llama-server lists no device of it"
                fix = "serve it with ggml-rpc-server of the same llama.cpp build"
            found.append(Finding(check="device", status="warn", message=message, fix=fix))
            continue
        found.append(
            Finding(
                check="device",
                status="fail",
                message=f"RPC server {endpoint} does not answer",
                fix=f"start it on that host: ggml-rpc-server -H {host or 'HOST'} "
                f"-p {port or 'PORT'}, or leave it out of --rpc",
            )
        )
    return found
