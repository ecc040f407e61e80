"""`moetune profiles list --json` carries the shipped profiles' figures."""

from __future__ import annotations

import json

from moetune.store.paths import user_hardware_dir

from support.helpers import cli
from support.profiles import GOOD


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


def test_the_fp16_figure_in_the_json_the_table_and_show() -> None:
    """A profile's FP16 TFLOPS and its FLOP/s in the JSON; in the table a number (``*`` after
    a derived one) or "-"; in `profiles show` the figure, or that the profile has none. Every
    shipped profile has the figure: the one without is the user's own."""
    user_hardware_dir().mkdir(parents=True)
    (user_hardware_dir() / "mine.toml").write_text(GOOD)
    code, out, err = cli("profiles", "list", "--json")
    assert code == 0, err
    rows = {row["id"]: row for row in json.loads(out)["hardware"]}
    with_figure = [r for r in rows.values() if r["fp16_tflops"] is not None]
    without = [r for r in rows.values() if r["fp16_tflops"] is None]
    assert with_figure and without
    for row in with_figure:
        assert row["flops_per_s"] == row["fp16_tflops"] * 1e12
    assert all(row["flops_per_s"] is None for row in without)
    code, table, _ = cli("profiles", "list")
    assert code == 0
    line = next(line for line in table.splitlines() if line.startswith(with_figure[0]["id"] + " "))
    assert line.rstrip().endswith(f"{with_figure[0]['fp16_tflops']:g}")
    line = next(line for line in table.splitlines() if line.startswith(without[0]["id"] + " "))
    assert line.rstrip().endswith("-")
    code, shown, _ = cli("profiles", "show", with_figure[0]["id"])
    assert code == 0 and f"{with_figure[0]['fp16_tflops']:g} TFLOPS (dense matrix" in shown
    code, shown, _ = cli("profiles", "show", without[0]["id"])
    assert code == 0 and "unknown (the profile gives no fp16_tflops)" in shown
    assert [row["id"] for row in without] == ["mine"]
    derived = next(r for r in with_figure if r["derived"] == ["fp16_tflops"])
    line = next(line for line in table.splitlines() if line.startswith(derived["id"] + " "))
    assert line.rstrip().endswith(f"{derived['fp16_tflops']:g}*")
    code, shown, _ = cli("profiles", "show", derived["id"])
    assert code == 0 and "derived from published specifications" in " ".join(shown.split())
