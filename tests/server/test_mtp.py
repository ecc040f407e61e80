"""MTP / NextN speculative decoding (``--spec-type draft-mtp``): the NextN blocks' weights, the
MTP context's KV cache and compute buffer, and what the main context gains, against
llama-server's own buffer lines (the MTP context's come after "creating MTP draft context").

glm4moe and qwen35moe fixtures with one NextN block, CPU-only and with the blocks on a
ggml-rpc-server device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from moetune.core.facts import ModelFacts
from moetune.core.memory import Settings, estimate
from moetune.core.mtp import mtp_memory
from moetune.core.placement import Placement, split_weights
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import BufferLine, parse_buffers, total_mib
from moetune.units import MIB

from support.factory import ModelFactory, write_model
from support.llama import CPU_PLAIN, running_server
from support.mtp import MTP_ARCHS, N_CTX, N_LAYERS, mtp_estimate, mtp_model, mtp_settings, with_mtp

_MTP_START = "creating MTP draft context"


@pytest.fixture(scope="module")
def facts(model_factory: ModelFactory) -> dict[str, ModelFacts]:
    return {a: load_model_facts(mtp_model(model_factory, a)) for a in MTP_ARCHS}


# --- against llama-server ----------------------------------------------------------------------


@dataclass(frozen=True)
class Printed:
    """One server's buffer lines, the main context's and the MTP context's apart."""

    main: list[BufferLine]
    mtp: list[BufferLine]

    def mib(self, part: str, kind: str, device: str) -> float:
        lines = self.main if part == "main" else self.mtp
        if kind == "compute":  # the MTP context reserves twice; the buffer keeps the largest
            return max(
                (b.mib for b in lines if b.kind == kind and b.device.startswith(device)),
                default=0.0,
            )
        return total_mib(lines, kind, device)


def _serve(model: Path, *args: str) -> Printed:
    with running_server(
        model,
        "-c",
        str(N_CTX),
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-fa",
        "on",
        "--fit",
        "off",
        *CPU_PLAIN,
        *args,
    ) as server:
        text = server.log_text()
    main, _, mtp = text.partition(_MTP_START)
    return Printed(parse_buffers(main), parse_buffers(mtp))


def _same(predicted_bytes: int, printed_mib: float, n_lines: int = 1) -> bool:
    """Exact to the printed 0.01 MiB (each of ``n_lines`` summed lines rounds by 0.005)."""
    return abs(predicted_bytes / MIB - printed_mib) <= 0.005 * n_lines + 1e-9


def _close(predicted_bytes: int, printed_mib: float) -> bool:
    return abs(predicted_bytes / MIB - printed_mib) <= max(0.1 * printed_mib, 0.005)


@pytest.mark.parametrize("arch", MTP_ARCHS)
def test_cpu_only(model_factory: ModelFactory, facts: dict[str, ModelFacts], arch: str) -> None:
    f = facts[arch]
    off, on = (
        _serve(mtp_model(model_factory, arch)),
        _serve(mtp_model(model_factory, arch), "--spec-type", "draft-mtp"),
    )
    assert not off.mtp
    split = split_weights(f, Placement(n_gpu_layers=0), 0)
    est = mtp_memory(f, mtp_settings(), homes=split.homes, moves=split.moves, kinds=())
    assert est.weights_bytes == () and est.host_weights_bytes > 0
    grown = on.mib("main", "model", "CPU") - off.mib("main", "model", "CPU")
    assert _same(est.host_weights_bytes, grown, 2)
    assert _same(est.host_kv_bytes, on.mib("mtp", "KV", "CPU"))
    rs = on.mib("main", "RS", "CPU") - off.mib("main", "RS", "CPU")
    assert _same(est.host_main_rs_bytes, rs, 2)
    assert _close(est.host_compute_bytes, on.mib("mtp", "compute", "CPU"))
    assert on.mib("main", "KV", "CPU") == off.mib("main", "KV", "CPU")
    assert on.mib("main", "compute", "CPU") == off.mib("main", "compute", "CPU")


@pytest.mark.parametrize("arch", MTP_ARCHS)
@pytest.mark.parametrize("n_cpu_moe", [0, N_LAYERS + 1])
def test_rpc_device(
    model_factory: ModelFactory, facts: dict[str, ModelFacts], rpc: str, arch: str, n_cpu_moe: int
) -> None:
    f = facts[arch]
    placement = Placement.with_n_cpu_moe(n_cpu_moe)
    args = ("--rpc", rpc, "-ngl", "99", "--n-cpu-moe", str(n_cpu_moe))
    on = _serve(mtp_model(model_factory, arch), *args, "--spec-type", "draft-mtp")
    today = estimate(f, placement, mtp_settings())
    est = mtp_estimate(f, placement, 1)
    # the main context: today's estimate plus the NextN weights and the rollback rows
    assert _same(today.gpu_weights_bytes + est.weights_bytes[0], on.mib("main", "model", "RPC0"))
    kv = on.mib("main", "KV", "RPC0") + on.mib("main", "RS", "RPC0")
    assert _same(today.gpu_kv_bytes + est.main_rs_bytes[0], kv, 2)
    assert _same(today.gpu_compute_bytes, on.mib("main", "compute", "RPC0"))
    assert _same(today.host_compute_bytes, on.mib("main", "compute", "CPU"))
    # the MTP context
    assert _same(est.kv_bytes[0], on.mib("mtp", "KV", "RPC0"))
    assert est.host_kv_bytes == 0 == on.mib("mtp", "KV", "CPU")
    assert _close(est.compute_bytes[0], on.mib("mtp", "compute", "RPC0"))
    assert _close(est.host_compute_bytes, on.mib("mtp", "compute", "CPU"))
    if n_cpu_moe:
        assert est.host_weights_bytes > 0
    else:
        off = _serve(mtp_model(model_factory, arch), *args)
        assert not off.mtp
        assert _same(today.gpu_weights_bytes, off.mib("main", "model", "RPC0"))
        kv = off.mib("main", "KV", "RPC0") + off.mib("main", "RS", "RPC0")
        assert _same(today.gpu_kv_bytes, kv, 2)
        assert _same(today.gpu_compute_bytes, off.mib("main", "compute", "RPC0"))
        assert _same(today.host_compute_bytes, off.mib("main", "compute", "CPU"))


@pytest.mark.parametrize("arch", MTP_ARCHS)
def test_own_head_on_the_device(tmp_path: Path, rpc: str, arch: str) -> None:
    """``nextn.embed_tokens``/``shared_head_head`` are the block's own: on its device, and the
    token rows are gathered there (the host buffer shrinks)."""
    model = write_model(
        tmp_path / f"{arch}.gguf", arch, n_layers=N_LAYERS, n_nextn=1, nextn_own_head=True
    )
    f = load_model_facts(model)
    on = _serve(model, "--rpc", rpc, "-ngl", "99", "--spec-type", "draft-mtp")
    today, est = estimate(f, Placement(), mtp_settings()), mtp_estimate(f, Placement(), 1)
    assert _same(today.gpu_weights_bytes + est.weights_bytes[0], on.mib("main", "model", "RPC0"))
    assert _same(est.kv_bytes[0], on.mib("mtp", "KV", "RPC0"))
    assert _close(est.compute_bytes[0], on.mib("mtp", "compute", "RPC0"))
    assert _close(est.host_compute_bytes, on.mib("mtp", "compute", "CPU"))


@pytest.mark.parametrize("arch", MTP_ARCHS)
def test_compute_without_flash_attention(
    model_factory: ModelFactory, facts: dict[str, ModelFacts], rpc: str, arch: str
) -> None:
    """Without FA the MTP block's KQ over the whole cache dominates (43-85 MiB here)."""
    f = facts[arch]
    args = ("--rpc", rpc, "-ngl", "99", "-fa", "off", "-ctk", "f16", "-ctv", "f16", "-ub", "1024")
    on = _serve(mtp_model(model_factory, arch), *args, "--spec-type", "draft-mtp")
    settings = Settings(
        n_ctx=N_CTX, flash_attn=False, n_ubatch=1024, gpu_overhead_bytes=0, device_kind="rpc"
    )
    split = split_weights(f, Placement(), 1)
    est = mtp_memory(f, settings, homes=split.homes, moves=split.moves, kinds=("rpc",))
    assert on.mib("mtp", "compute", "RPC0") > 40
    assert _same(est.kv_bytes[0], on.mib("mtp", "KV", "RPC0"))
    assert _close(est.compute_bytes[0], on.mib("mtp", "compute", "RPC0"))
    assert _close(est.host_compute_bytes, on.mib("mtp", "compute", "CPU"))


# --- through the memory model: the Extras beside the Settings, from llama-server's own flags --


@pytest.mark.parametrize("n_cpu_moe", [0, N_LAYERS + 1])
def test_estimate_counts_mtp_on_its_device(
    model_factory: ModelFactory, facts: dict[str, ModelFacts], rpc: str, n_cpu_moe: int
) -> None:
    """estimate() with ``--spec-type draft-mtp`` among the arguments: the NextN blocks where
    the split puts them (an --n-cpu-moe rule reaching their experts), the MTP cache in the
    draft cache types, the MTP compute; each compared on its own."""
    arch = "qwen35moe"
    f = facts[arch]
    settings, extras = with_mtp(f, "-ctkd", "q4_0", "-ctvd", "q4_0")
    memory = estimate(f, Placement.with_n_cpu_moe(n_cpu_moe), settings, extras=extras)
    today = estimate(f, Placement.with_n_cpu_moe(n_cpu_moe), mtp_settings())
    on = _serve(
        mtp_model(model_factory, arch),
        "--rpc",
        rpc,
        "-ngl",
        "99",
        "--n-cpu-moe",
        str(n_cpu_moe),
        "--spec-type",
        "draft-mtp",
        "-ctkd",
        "q4_0",
        "-ctvd",
        "q4_0",
    )
    assert memory.mtp is not None and today.mtp is None
    device = memory.devices[0]
    loaded = on.mib("main", "model", "RPC0") - today.gpu_weights_bytes / MIB
    assert _same(device.mtp_weights_bytes, loaded)
    rs = on.mib("main", "RS", "RPC0") - today.gpu_kv_bytes / MIB + on.mib("main", "KV", "RPC0")
    assert _same(device.mtp_kv_bytes, on.mib("mtp", "KV", "RPC0") + rs, 3)
    assert _close(device.mtp_compute_bytes, on.mib("mtp", "compute", "RPC0"))
    assert _close(memory.mtp.host_compute_bytes, on.mib("mtp", "compute", "CPU"))
    assert (memory.mtp.host_weights_bytes > 0) == bool(n_cpu_moe)
    # the main compute grows a little too (16 logits rows instead of 4)
    assert device.total_bytes - today.devices[0].total_bytes >= device.extras_bytes > 0
