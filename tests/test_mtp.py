"""MTP / NextN speculative decoding (``--spec-type draft-mtp``): the NextN blocks' weights, the
MTP context's KV cache and compute buffer, and what the main context gains, against
llama-server's own buffer lines (the MTP context's come after "creating MTP draft context").

The server tests (marked ``server``) run glm4moe and qwen35moe fixtures with one NextN block,
CPU-only and with the blocks on a ggml-rpc-server device.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from moetune.core.extras import Extras
from moetune.core.facts import ModelFacts
from moetune.core.kvcache import estimate_cache, nextn_cache
from moetune.core.memory import Settings, estimate
from moetune.core.mtp import MtpEstimate, mtp_layer_homes, mtp_memory
from moetune.core.placement import ALL_LAYERS, SKIPPED, Placement, homes_for, split_weights
from moetune.jobs.loader import load_model_facts, with_extras
from moetune.llamacpp.log import BufferLine, parse_buffers, total_mib
from moetune.units import MIB

from factory import write_model
from llama import CPU_PLAIN, running_server

N_LAYERS = 4
N_CTX = 4096
MTP_ARCHS = ("glm4moe", "qwen35moe")
_MTP_START = "creating MTP draft context"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mtp")
    return {a: write_model(root / f"{a}.gguf", a, n_layers=N_LAYERS, n_nextn=1) for a in MTP_ARCHS}


@pytest.fixture(scope="module")
def facts(models: dict[str, Path]) -> dict[str, ModelFacts]:
    return {a: load_model_facts(p) for a, p in models.items()}


def _settings(kind: str = "rpc") -> Settings:
    return Settings(
        n_ctx=N_CTX, type_k="q8_0", type_v="q8_0", gpu_overhead_bytes=0, device_kind=kind
    )


def _mtp(f: ModelFacts, placement: Placement, n_devices: int) -> MtpEstimate:
    split = split_weights(f, placement, n_devices)
    return mtp_memory(
        f,
        _settings(),
        homes=split.homes,
        moves=split.moves,
        kinds=("rpc",) * n_devices,
        placement=placement,
    )


# --- pure ------------------------------------------------------------------------------------


def test_nextn_blocks_are_skipped_without_mtp(facts: dict[str, ModelFacts]) -> None:
    for f in facts.values():
        split = split_weights(f, Placement(), 1)
        assert split.homes[N_LAYERS] == SKIPPED
        assert mtp_layer_homes(f, split.homes)[N_LAYERS] == 0


@pytest.mark.parametrize("ngl", [ALL_LAYERS, 6, 3, 2, 1, 0])
def test_derived_homes_match_the_layer_split(facts: dict[str, ModelFacts], ngl: int) -> None:
    f = facts["glm4moe"]
    placement = Placement(n_gpu_layers=ngl)
    split = split_weights(f, placement, 1)
    exact = homes_for(f.n_layers, placement, 1)
    assert mtp_layer_homes(f, split.homes, placement, n_devices=1) == exact
    if ngl != 2:  # -ngl 2: the output layer and the NextN block only (ambiguous from homes)
        assert mtp_layer_homes(f, split.homes) == exact


def test_two_devices_by_tensor_split(facts: dict[str, ModelFacts]) -> None:
    f = facts["qwen35moe"]
    placement = Placement(tensor_split=(3.0, 1.0))
    split = split_weights(f, placement, 2)
    homes = mtp_layer_homes(f, split.homes, placement, n_devices=2)
    # points 0.75, 1.0: block 4 is at 4/6 < 0.75, the output layer at 5/6
    assert (homes[N_LAYERS], homes[-1]) == (0, 1)
    est = _mtp(f, placement, 2)
    assert est.weights_bytes[1] == 0 < est.weights_bytes[0]
    assert est.kv_bytes == (2 * MIB, 0)


def test_overrides_reach_the_nextn_experts(facts: dict[str, ModelFacts]) -> None:
    f = facts["glm4moe"]
    on_device = _mtp(f, Placement(), 1)
    moved = _mtp(f, Placement.with_n_cpu_moe(N_LAYERS + 1), 1)
    assert moved.host_expert_bytes == on_device.expert_bytes[0] > 0
    assert moved.weights_bytes[0] + moved.host_weights_bytes == on_device.weights_bytes[0]
    # the trunk's rule count (--n-cpu-moe 4) does not reach block 4
    assert _mtp(f, Placement.with_n_cpu_moe(N_LAYERS), 1).host_weights_bytes == 0


def test_mtp_cache_holds_the_nextn_layers_only(facts: dict[str, ModelFacts]) -> None:
    for f in facts.values():
        cache = nextn_cache(f, n_ctx=N_CTX)
        assert [layer.layer for layer in cache.layers] == [N_LAYERS]
        assert cache.kv_bytes == 2 * MIB  # f16: 2 x 4096 cells x 128 x 2 B
        q8 = nextn_cache(f, n_ctx=N_CTX, type_k="q8_0", type_v="q8_0")
        assert q8.kv_bytes == 2 * MIB * 17 // 32
        assert nextn_cache(f, n_ctx=N_CTX, n_seq=2, kv_unified=False).kv_bytes == 2 * MIB


def test_rollback_rows_grow_only_the_hybrid_state(facts: dict[str, ModelFacts]) -> None:
    q35, glm = facts["qwen35moe"], facts["glm4moe"]
    base = estimate_cache(q35, n_ctx=N_CTX)
    assert estimate_cache(q35, n_ctx=N_CTX, n_rs_seq=3).rs_bytes == 4 * base.rs_bytes
    assert estimate_cache(q35, n_ctx=N_CTX, n_rs_seq=3).kv_bytes == base.kv_bytes
    assert estimate_cache(glm, n_ctx=N_CTX, n_rs_seq=3) == estimate_cache(glm, n_ctx=N_CTX)
    assert _mtp(glm, Placement(), 1).main_rs_bytes == (0,)
    assert _mtp(q35, Placement(), 1).main_rs_bytes == (3 * base.rs_bytes,)


def test_a_model_without_nextn_adds_no_mtp_buffers(tmp_path: Path) -> None:
    f = load_model_facts(write_model(tmp_path / "glm.gguf", "glm4moe", n_layers=N_LAYERS))
    est = _mtp(f, Placement(), 1)
    assert est.device_bytes == (0,) and est.host_bytes == 0


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


@pytest.mark.server
@pytest.mark.parametrize("arch", MTP_ARCHS)
def test_cpu_only(models: dict[str, Path], facts: dict[str, ModelFacts], arch: str) -> None:
    f = facts[arch]
    off, on = _serve(models[arch]), _serve(models[arch], "--spec-type", "draft-mtp")
    assert not off.mtp
    split = split_weights(f, Placement(n_gpu_layers=0), 0)
    est = mtp_memory(f, _settings(), homes=split.homes, moves=split.moves, kinds=())
    assert est.weights_bytes == () and est.host_weights_bytes > 0
    grown = on.mib("main", "model", "CPU") - off.mib("main", "model", "CPU")
    assert _same(est.host_weights_bytes, grown, 2)
    assert _same(est.host_kv_bytes, on.mib("mtp", "KV", "CPU"))
    rs = on.mib("main", "RS", "CPU") - off.mib("main", "RS", "CPU")
    assert _same(est.host_main_rs_bytes, rs, 2)
    assert _close(est.host_compute_bytes, on.mib("mtp", "compute", "CPU"))
    assert on.mib("main", "KV", "CPU") == off.mib("main", "KV", "CPU")
    assert on.mib("main", "compute", "CPU") == off.mib("main", "compute", "CPU")


@pytest.mark.server
@pytest.mark.parametrize("arch", MTP_ARCHS)
@pytest.mark.parametrize("n_cpu_moe", [0, N_LAYERS + 1])
def test_rpc_device(
    models: dict[str, Path], facts: dict[str, ModelFacts], rpc: str, arch: str, n_cpu_moe: int
) -> None:
    f = facts[arch]
    placement = Placement.with_n_cpu_moe(n_cpu_moe)
    args = ("--rpc", rpc, "-ngl", "99", "--n-cpu-moe", str(n_cpu_moe))
    on = _serve(models[arch], *args, "--spec-type", "draft-mtp")
    today = estimate(f, placement, _settings())
    est = _mtp(f, placement, 1)
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
        off = _serve(models[arch], *args)
        assert not off.mtp
        assert _same(today.gpu_weights_bytes, off.mib("main", "model", "RPC0"))
        kv = off.mib("main", "KV", "RPC0") + off.mib("main", "RS", "RPC0")
        assert _same(today.gpu_kv_bytes, kv, 2)
        assert _same(today.gpu_compute_bytes, off.mib("main", "compute", "RPC0"))
        assert _same(today.host_compute_bytes, off.mib("main", "compute", "CPU"))


@pytest.mark.server
@pytest.mark.parametrize("arch", MTP_ARCHS)
def test_own_head_on_the_device(tmp_path: Path, rpc: str, arch: str) -> None:
    """``nextn.embed_tokens``/``shared_head_head`` are the block's own: on its device, and the
    token rows are gathered there (the host buffer shrinks)."""
    model = write_model(
        tmp_path / f"{arch}.gguf", arch, n_layers=N_LAYERS, n_nextn=1, nextn_own_head=True
    )
    f = load_model_facts(model)
    on = _serve(model, "--rpc", rpc, "-ngl", "99", "--spec-type", "draft-mtp")
    today, est = estimate(f, Placement(), _settings()), _mtp(f, Placement(), 1)
    assert _same(today.gpu_weights_bytes + est.weights_bytes[0], on.mib("main", "model", "RPC0"))
    assert _same(est.kv_bytes[0], on.mib("mtp", "KV", "RPC0"))
    assert _close(est.compute_bytes[0], on.mib("mtp", "compute", "RPC0"))
    assert _close(est.host_compute_bytes, on.mib("mtp", "compute", "CPU"))


@pytest.mark.server
@pytest.mark.parametrize("arch", MTP_ARCHS)
def test_compute_without_flash_attention(
    models: dict[str, Path], facts: dict[str, ModelFacts], rpc: str, arch: str
) -> None:
    """Without FA the MTP block's KQ over the whole cache dominates (43-85 MiB here)."""
    f = facts[arch]
    args = ("--rpc", rpc, "-ngl", "99", "-fa", "off", "-ctk", "f16", "-ctv", "f16", "-ub", "1024")
    on = _serve(models[arch], *args, "--spec-type", "draft-mtp")
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


def _with_mtp(f: ModelFacts, *args: str) -> tuple[Settings, Extras | None]:
    return with_extras(_settings(), f, ("--spec-type", "draft-mtp", *args))


@pytest.mark.server
@pytest.mark.parametrize("n_cpu_moe", [0, N_LAYERS + 1])
def test_estimate_counts_mtp_on_its_device(
    models: dict[str, Path], facts: dict[str, ModelFacts], rpc: str, n_cpu_moe: int
) -> None:
    """estimate() with ``--spec-type draft-mtp`` among the arguments: the NextN blocks where
    the split puts them (an --n-cpu-moe rule reaching their experts), the MTP cache in the
    draft cache types, the MTP compute; each compared on its own."""
    arch = "qwen35moe"
    f = facts[arch]
    settings, extras = _with_mtp(f, "-ctkd", "q4_0", "-ctvd", "q4_0")
    memory = estimate(f, Placement.with_n_cpu_moe(n_cpu_moe), settings, extras=extras)
    today = estimate(f, Placement.with_n_cpu_moe(n_cpu_moe), _settings())
    on = _serve(
        models[arch],
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


def test_draft_mtp_needs_nextn_layers(tmp_path: Path) -> None:
    from moetune.errors import BadValueError

    plain = load_model_facts(write_model(tmp_path / "plain.gguf", "qwen3moe", n_layers=2))
    with pytest.raises(BadValueError, match="no NextN/MTP layers"):
        _with_mtp(plain)
