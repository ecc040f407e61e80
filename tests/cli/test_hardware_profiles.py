"""`moetune profiles list --json` carries the shipped profiles' figures."""

from __future__ import annotations

import json

from support.helpers import cli


def test_profiles_list_json_carries_the_figures() -> None:
    code, out, err = cli("profiles", "list", "--json")
    assert code == 0, err
    rows = {row["id"]: row for row in json.loads(out)["hardware"]}
    assert len(rows) >= 25
    for row in rows.values():
        for field in (
            "name",
            "vram",
            "vram_bytes",
            "memory_bandwidth_gb_s",
            "pcie_gen",
            "pcie_lanes",
        ):
            assert row[field], (row["id"], field)
    assert rows["h200"]["vram_bytes"] == 143771 * 2**20
    assert (rows["h100-sxm"]["pcie_gen"], rows["rtx5060ti-16g"]["pcie_lanes"]) == (5, 8)
