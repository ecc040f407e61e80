"""MTP / NextN speculative decoding (``--spec-type draft-mtp``) in moetune's estimate: the
NextN blocks' homes and overrides, the MTP context's cache, the hybrid state's rollback rows
(server/test_mtp.py holds them to llama-server's own buffer lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moetune.core.facts import ModelFacts
from moetune.core.kvcache import estimate_cache, nextn_cache
from moetune.core.mtp import mtp_layer_homes
from moetune.core.placement import ALL_LAYERS, SKIPPED, Placement, homes_for, split_weights
from moetune.jobs.loader import load_model_facts
from moetune.units import MIB

from support.factory import ModelFactory, write_model
from support.mtp import MTP_ARCHS, N_CTX, N_LAYERS, mtp_estimate, mtp_model, with_mtp


@pytest.fixture(scope="module")
def facts(model_factory: ModelFactory) -> dict[str, ModelFacts]:
    return {a: load_model_facts(mtp_model(model_factory, a)) for a in MTP_ARCHS}


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
    est = mtp_estimate(f, placement, 2)
    assert est.weights_bytes[1] == 0 < est.weights_bytes[0]
    assert est.kv_bytes == (2 * MIB, 0)


def test_overrides_reach_the_nextn_experts(facts: dict[str, ModelFacts]) -> None:
    f = facts["glm4moe"]
    on_device = mtp_estimate(f, Placement(), 1)
    moved = mtp_estimate(f, Placement.with_n_cpu_moe(N_LAYERS + 1), 1)
    assert moved.host_expert_bytes == on_device.expert_bytes[0] > 0
    assert moved.weights_bytes[0] + moved.host_weights_bytes == on_device.weights_bytes[0]
    # the trunk's rule count (--n-cpu-moe 4) does not reach block 4
    assert mtp_estimate(f, Placement.with_n_cpu_moe(N_LAYERS), 1).host_weights_bytes == 0


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
    assert mtp_estimate(glm, Placement(), 1).main_rs_bytes == (0,)
    assert mtp_estimate(q35, Placement(), 1).main_rs_bytes == (3 * base.rs_bytes,)


def test_a_model_without_nextn_adds_no_mtp_buffers(tmp_path: Path) -> None:
    f = load_model_facts(write_model(tmp_path / "glm.gguf", "glm4moe", n_layers=N_LAYERS))
    est = mtp_estimate(f, Placement(), 1)
    assert est.device_bytes == (0,) and est.host_bytes == 0


# --- through the memory model: the Extras beside the Settings, from llama-server's own flags --


def test_draft_mtp_needs_nextn_layers(tmp_path: Path) -> None:
    from moetune.errors import BadValueError

    plain = load_model_facts(write_model(tmp_path / "plain.gguf", "qwen3moe", n_layers=2))
    with pytest.raises(BadValueError, match="no NextN/MTP layers"):
        with_mtp(plain)
