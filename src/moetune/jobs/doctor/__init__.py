"""`moetune doctor`: what on this machine helps or hurts expert offload, each with its fix.

Findings are ok / warn / fail. Without a model: GPUs and their memory, each GPU's PCIe link
(current and maximum generation and width, the card's own, its bandwidth per direction), the
driver, CPU cores, RAM and its read bandwidth (measured in about a second and saved for
plan and calibrate, unless ``--no-measure``), swap, WSL2, llama-server and the devices it
lists (an RPC device's link is the network; each ``--rpc`` server must answer, and then no
NVIDIA GPU is needed). With a model: the RAM its CPU-resident experts need against the RAM
available, and a decode-speed ceiling from bandwidths: every token reads the dense weights
and the active experts' share of the experts on each side, so

    seconds per token >= GPU bytes per token / GPU bandwidth + CPU bytes per token / RAM bandwidth

and the larger term names the bottleneck. Prompt processing has a third limit: with experts
on the CPU, llama.cpp copies them to the GPU for every micro-batch of 32 tokens or more
(``offload_op`` in ggml-cuda.cu, ``GGML_OP_OFFLOAD_MIN_BATCH``), so the PCIe link caps it.

Pure apart from the probes and the machine file (the saved RAM figure) it is given; returns
data (report/doctor.py renders it).

One module per kind of check: ``gpus`` (each GPU's memory and PCIe link, the driver),
``host`` (CPU cores, RAM, swap, WSL2), ``server`` (llama-server, the devices it lists, the
``--rpc`` servers), ``ram_read`` (the RAM read bandwidth, measured or saved), ``model`` (a
model's fit, its RAM and its speed ceilings); ``findings`` holds what they return and read,
``diagnosis`` runs them all (``diagnose``) and builds the live probes (``doctor_report``).
"""

from __future__ import annotations

from moetune.jobs.doctor.diagnosis import diagnose, doctor_report
from moetune.jobs.doctor.findings import (
    DeviceLink,
    DoctorInputs,
    DoctorReport,
    Finding,
    PcieLink,
    RamBandwidthSource,
    RamRead,
    SpeedCeiling,
    Status,
)
from moetune.jobs.doctor.gpus import (
    MIN_DRIVER,
    NARROW_LANES,
    driver_finding,
    gpu_findings,
    link_bytes_per_s,
    pcie_finding,
    pcie_link,
)
from moetune.jobs.doctor.host import (
    WSLCONFIG_FIX,
    cpu_finding,
    ram_finding,
    swap_finding,
    wsl_finding,
)
from moetune.jobs.doctor.model import (
    DEFAULT_RAM_BANDWIDTH_BYTES_PER_S,
    SLOW_DECODE_TPS,
    GpuTarget,
    bytes_per_token,
    decode_finding,
    gpu_target,
    model_findings,
    prefill_finding,
    ram_bandwidth,
    ram_model_finding,
    speed_ceiling,
)
from moetune.jobs.doctor.ram_read import ram_read_bandwidth
from moetune.jobs.doctor.server import device_findings, device_links, rpc_findings, server_finding

__all__ = [
    "DEFAULT_RAM_BANDWIDTH_BYTES_PER_S",
    "MIN_DRIVER",
    "NARROW_LANES",
    "SLOW_DECODE_TPS",
    "WSLCONFIG_FIX",
    "DeviceLink",
    "DoctorInputs",
    "DoctorReport",
    "Finding",
    "GpuTarget",
    "PcieLink",
    "RamBandwidthSource",
    "RamRead",
    "SpeedCeiling",
    "Status",
    "bytes_per_token",
    "cpu_finding",
    "decode_finding",
    "device_findings",
    "device_links",
    "diagnose",
    "doctor_report",
    "driver_finding",
    "gpu_findings",
    "gpu_target",
    "link_bytes_per_s",
    "model_findings",
    "pcie_finding",
    "pcie_link",
    "prefill_finding",
    "ram_bandwidth",
    "ram_finding",
    "ram_model_finding",
    "ram_read_bandwidth",
    "rpc_findings",
    "server_finding",
    "speed_ceiling",
    "swap_finding",
    "wsl_finding",
]
