"""Speed points: llama-bench's results read (and refused), moetune's bench and run
measurements as points, the store that keeps each point once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from moetune.errors import BadValueError
from moetune.jobs.speed import bench_points, settings_of_args
from moetune.llamacpp.bench_results import parse_bench_rows, parse_bench_text
from moetune.records.speed import SpeedMachine, SpeedPoint
from moetune.store.speed import SpeedStore

from support.bench import bench_result

DATA = Path(__file__).resolve().parents[1] / "data" / "llama_bench"
CUDA_JSON = DATA / "readme_rtx4080_qwen2.5_7b.json"
CUDA_JSONL = DATA / "readme_rtx4080_qwen2.5_7b.jsonl"


def cuda_row() -> dict[str, Any]:
    row: dict[str, Any] = json.loads(CUDA_JSON.read_text())[0]
    return row


def test_a_cuda_machines_json_and_jsonl() -> None:
    """The fields of an NVIDIA machine's llama-bench (llama.cpp's README): pp512, tg128."""
    pp, tg = parse_bench_text(CUDA_JSON.read_text(), "cuda.json")
    assert (pp.kind, pp.n_prompt, pp.n_gen, pp.tps) == ("prompt", 512, 0, 7100.002165)
    assert (tg.kind, tg.n_prompt, tg.n_gen, tg.tps) == ("generation", 0, 128, 118.881588)
    assert tg.samples_tps == [119.03, 120.178, 119.43, 118.307, 117.464]
    assert tg.tps_stddev == 1.041811
    assert pp.machine == SpeedMachine(
        cpu_info="AMD Ryzen 7 7800X3D 8-Core Processor",
        gpu_info="NVIDIA GeForce RTX 4080",
        backends=["CUDA"],
        devices=None,  # "auto"
    )
    assert pp.model.file_name == "Qwen2.5-7B-Instruct-Q4_K_M.gguf"
    assert (pp.model.model_bytes, pp.model.n_params) == (4677120000, 7615616512)
    assert (pp.n_ubatch, pp.n_batch, pp.n_threads, pp.flash_attn) == (512, 2048, 8, "auto")
    assert pp.placement.n_cpu_moe == 0 and pp.placement.override_tensor == []
    assert pp.placement.n_gpu_layers == -1
    assert (pp.source.tool, pp.source.build_number, pp.source.build_commit) == (
        "llama-bench",
        5163,
        "8cf427ff",
    )
    lines = parse_bench_text(CUDA_JSONL.read_text(), "cuda.jsonl")
    assert [(p.kind, p.tps) for p in lines] == [
        ("prompt", 7263.609157),
        ("generation", 119.844681),
    ]


def test_placement_fields() -> None:
    """--n-cpu-moe, -ot rules (as written), -ts, -dev, a fit target, flash_attn of an older
    build (a bool)."""
    row = cuda_row() | {
        "n_cpu_moe": 20,
        "tensor_buft_overrides": r"blk\.(3|4)\.ffn_.*_exps=CPU;blk\.5\.ffn_up_exps=CUDA1",
        "tensor_split": "3.00/1.00",
        "devices": "CUDA0/CUDA1",
        "fit_target": 1024,
        "flash_attn": True,
        "n_depth": 4096,
        "n_gen": 0,
    }
    (point,) = parse_bench_text(json.dumps([row]), "x.json")
    assert point.placement.n_cpu_moe == 20
    assert point.placement.override_tensor == [
        r"blk\.(3|4)\.ffn_.*_exps=CPU",
        r"blk\.5\.ffn_up_exps=CUDA1",
    ]
    assert point.placement.tensor_split == [3.0, 1.0] and point.placement.fit
    assert point.machine.devices == ["CUDA0", "CUDA1"]
    assert (point.flash_attn, point.n_depth) == ("on", 4096)
    older = {k: v for k, v in cuda_row().items() if k not in ("n_cpu_moe", "n_depth", "devices")}
    (old,) = parse_bench_text(json.dumps([older]), "old.json")
    assert (old.placement.n_cpu_moe, old.n_depth, old.machine.devices) == (0, 0, None)
    (both,) = parse_bench_text(json.dumps([cuda_row() | {"n_gen": 16}]), "pg.json")
    assert both.kind == "combined"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "x.json is empty"),
        ("   \n\n", "x.json is empty"),
        ("[]", "x.json holds no llama-bench results"),
        ('[{"avg_ts": 1.0,', "x.json is not valid JSON"),
        ("| model | size |\n| --- | --- |", "x.json line 1 is not JSON"),
        ('{"a": 1}', "x.json is not a llama-bench result (line 1 "),
        ("[1, 2]", "x.json is not a llama-bench result (row 1 "),
        ('{"kind": "moetune.plan"}', "x.json is not a llama-bench result"),
    ],
)
def test_what_is_not_a_llama_bench_file(text: str, message: str) -> None:
    with pytest.raises(BadValueError) as caught:
        parse_bench_text(text, "x.json")
    assert caught.value.message.startswith(message), caught.value.message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"avg_ts": None}, "row 1: missing field avg_ts"),
        ({"n_ubatch": None}, "row 1: missing field n_ubatch"),
        ({"model_filename": None}, "row 1: missing field model_filename"),
        ({"n_ubatch": "512"}, "row 1: n_ubatch should be an integer, got '512'"),
        ({"n_threads": True}, "row 1: n_threads should be an integer, got True"),
        ({"n_prompt": -1}, "row 1: n_prompt should be 0 or more, got -1"),
        ({"n_ubatch": 0}, "row 1: n_ubatch should be 1 or more, got 0"),
        ({"avg_ts": "fast"}, "row 1: avg_ts should be a number, got 'fast'"),
        ({"avg_ts": -3.0}, "row 1: avg_ts should be a finite number, 0 or more, got -3.0"),
        ({"samples_ts": "1,2"}, "row 1: samples_ts should be an array of numbers"),
        ({"samples_ts": [1.0, "x"]}, "row 1: samples_ts should be an array of numbers"),
        ({"n_cpu_moe": 2.5}, "row 1: n_cpu_moe should be an integer, got 2.5"),
        ({"gpu_info": 3}, "row 1: gpu_info should be a string, got 3"),
        ({"flash_attn": 2}, "row 1: flash_attn should be -1, 0, 1 or a bool, got 2"),
        ({"tensor_split": "a/b"}, "row 1: tensor_split should be numbers joined by /"),
        ({"n_prompt": 0, "n_gen": 0}, "row 1: a test of no tokens"),
    ],
)
def test_a_bad_row_names_its_field(change: dict[str, Any], message: str) -> None:
    """A bad row beside a good one is refused, named, the good one kept; alone, the error."""
    row = {k: v for k, v in (cuda_row() | change).items() if v is not None}
    rows = parse_bench_rows(json.dumps([cuda_row(), row]), "x.json")
    assert len(rows.points) == 1 and rows.refused == 1
    assert rows.refusals[0].startswith("x.json " + message.replace("row 1", "row 2"))
    jsonl = "\n".join(json.dumps(r) for r in (cuda_row(), row))
    assert "row 2" in parse_bench_rows(jsonl, "x.jsonl").refusals[0]
    with pytest.raises(BadValueError) as caught:
        parse_bench_text(json.dumps([row]), "x.json")
    assert caught.value.message.startswith("x.json " + message)
    with pytest.raises(BadValueError, match=r"\(and every other row: 2 refused\)"):
        parse_bench_text(json.dumps([row, row]), "x.json")


def test_a_broken_jsonl_line_is_named() -> None:
    text = json.dumps(cuda_row()) + "\n" + json.dumps(cuda_row())[:-10] + "\n"
    with pytest.raises(BadValueError, match=r"^x.jsonl line 2 is not JSON"):
        parse_bench_text(text, "x.jsonl")


# --- moetune's own measurements ---------------------------------------------------------------


def test_llama_server_args_as_placement_and_settings() -> None:
    args = [
        "-m",
        "m.gguf",
        "-ngl",
        "99",
        "--n-cpu-moe",
        "3",
        "-ts",
        "2,1",
        "-t",
        "6",
        "-ub",
        "1024",
        "-b",
        "4096",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-fa",
        "on",
        "--no-op-offload",
        "-ot",
        "a=CPU,b=CUDA1",
        "-cmoe",
    ]
    placement, settings = settings_of_args(args)
    assert placement.n_cpu_moe == 3 and placement.n_gpu_layers == 99
    assert placement.override_tensor == [
        "a=CPU",
        "b=CUDA1",
        r"\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU",
    ]
    assert placement.tensor_split == [2.0, 1.0] and placement.no_op_offload
    assert settings == {
        "n_threads": 6,
        "n_ubatch": 1024,
        "n_batch": 4096,
        "type_k": "q8_0",
        "type_v": "q8_0",
        "flash_attn": "on",
    }
    _, defaults = settings_of_args(["-m", "m.gguf", "--fit", "on"])
    assert defaults == {"n_ubatch": 512, "n_batch": 2048}  # llama-server's
    assert settings_of_args(["--fit", "on"])[0].fit


def test_each_bench_configuration_and_depth_is_two_points() -> None:
    """A prompt point (the depth's prompt from an empty cache) and a generation point after
    it, with the server's medians and every repeat; a skipped configuration has none."""
    result = bench_result(llama_cpp_build=11434, llama_cpp_commit="abc1234")
    runs = [
        c.model_copy(update={"args": ["-m", "q.gguf", "--n-cpu-moe", "2", "-t", "4"]})
        if c.name == "plan"
        else c
        for c in result.configs
    ]
    points = bench_points(result.model_copy(update={"configs": runs}), "r.json")
    assert len(points) == 2 * len(result.results)
    prompt, decode = points[0], points[1]  # plan at depth 64: decodes 40, 42
    assert (prompt.kind, prompt.n_prompt, prompt.n_gen, prompt.n_depth) == ("prompt", 64, 0, 0)
    assert (decode.kind, decode.n_prompt, decode.n_gen, decode.n_depth) == (
        "generation",
        0,
        16,
        64,
    )
    assert decode.tps == 41.0 and decode.samples_tps == [40.0, 42.0]
    assert prompt.tps == 1000.0
    assert decode.placement.n_cpu_moe == 2 and decode.n_threads == 4
    assert decode.source.config == "plan" and decode.source.file == "r.json"
    assert (decode.source.build_number, decode.source.tool) == (11434, "moetune bench")
    assert {p.source.config for p in points} == {"plan", "cpu-moe"}
    assert bench_points(result.model_copy(update={"server_url": "http://x"}), None) == []


# --- the store --------------------------------------------------------------------------------


def _points() -> list[SpeedPoint]:
    return parse_bench_text(CUDA_JSON.read_text(), str(CUDA_JSON))


def test_the_same_points_are_kept_once(tmp_path: Path) -> None:
    store = SpeedStore(tmp_path / "speed")
    path, known = store.save(_points(), "llama-bench-a")
    assert not known and path.parent == tmp_path / "speed"
    again = [
        p.model_copy(update={"source": p.source.model_copy(update={"file": "b"})})
        for p in _points()
    ]
    second, known = store.save(again, "llama-bench-b")
    assert known and second == path
    assert len(list((tmp_path / "speed").glob("*.json"))) == 1
    assert len(store.points(lambda text: None)) == 2
    other = parse_bench_text(CUDA_JSONL.read_text(), "l.jsonl")
    store.save(other, "llama-bench-c")
    assert len(store.points(lambda text: None)) == 4


def test_a_broken_file_is_a_warning(tmp_path: Path) -> None:
    store = SpeedStore(tmp_path)
    store.save(_points(), "good")
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"kind": "moetune.bench"}')
    (tmp_path / "wrong.json").write_text('{"kind": "moetune.speed", "saved": "x", "points": []}')
    warned: list[str] = []
    assert len(store.points(warned.append)) == 2
    assert len(warned) == 3
    assert all(w.startswith("skipping a broken speed file: ") for w in warned)
    assert any("broken.json: not valid JSON" in w for w in warned)
    assert any("other.json: not a moetune speed file" in w for w in warned)
    assert any("wrong.json" in w and "points" in w for w in warned)
