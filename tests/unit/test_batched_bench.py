"""llama-batched-bench's ``--output-format jsonl`` rows (llamacpp/batched_bench.py) and the
speed points `calibrate --measure --parallel` makes of them (jobs/speed.py ``batched_points``),
on the rig's real output (tests/data/batched_bench/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moetune.errors import BadValueError
from moetune.jobs.speed import batched_points
from moetune.llamacpp.batched_bench import parse_batched_rows
from moetune.records.speed import SpeedMachine, SpeedModel, SpeedSource

RIG = Path(__file__).parents[1] / "data" / "batched_bench" / "rig_tiny_rpc.jsonl"
# the placement flags of the command in the README
ARGS = ["-ngl", "99", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-ub", "512", "-b", "2048"]
ARGS += ["--n-cpu-moe", "2", "-t", "1", "--rpc", "127.0.0.1:50778"]


def test_the_rigs_rows() -> None:
    rows = parse_batched_rows(RIG.read_text(), RIG.name)
    assert [(r.n_prompt, r.n_gen, r.n_streams) for r in rows] == [
        (64, 64, 1),
        (64, 64, 2),
        (64, 64, 4),
    ]
    one, two, four = rows
    assert not any(r.prompt_shared for r in rows)
    assert (one.n_ubatch, one.n_batch, one.n_threads, one.n_gpu_layers) == (512, 2048, 1, 99)
    assert one.decode_tps == pytest.approx(364.441864)
    assert four.decode_tps == pytest.approx(637.809082)  # all four streams together
    assert two.prompt_tps == pytest.approx(2072.975098)


def test_points_of_each_test_at_the_commands_placement() -> None:
    rows = parse_batched_rows(RIG.read_text(), RIG.name)
    points = batched_points(
        [rows, rows],  # the same tests twice: each test's samples
        ARGS,
        model=SpeedModel(file_name="tiny-moe.gguf"),
        machine=SpeedMachine(cpu_info="rig"),
        source=SpeedSource(tool="llama-batched-bench", file=str(RIG)),
    )
    found = {(p.kind, p.n_streams): p for p in points}
    # one stream's prompt, and a generation point for each N (several streams' prompts are
    # one batch of several sequences: no prompt point)
    assert sorted(found) == [("generation", 1), ("generation", 2), ("generation", 4), ("prompt", 1)]
    four = found["generation", 4]
    assert (four.n_depth, four.n_prompt, four.n_gen) == (64, 0, 64)
    assert four.tps == pytest.approx(637.809082) and len(four.samples_tps) == 2
    assert four.placement.n_cpu_moe == 2 and four.n_threads == 1 and four.n_ubatch == 512
    assert (four.type_k, four.flash_attn) == ("q8_0", "on")
    prompt = found["prompt", 1]
    assert (prompt.n_prompt, prompt.n_gen) == (64, 0)
    assert prompt.tps == pytest.approx(2222.299561)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "holds no llama-batched-bench rows"),
        ("| PP | TG |\n", "line 1 is not JSON"),
        ('{"pp": 64}\n', "tg is None, not a count"),
        ("[1, 2]\n", "is not a llama-batched-bench row"),
    ],
)
def test_what_is_not_its_output_is_one_error(text: str, said: str) -> None:
    with pytest.raises(BadValueError, match=said):
        parse_batched_rows(text, "out.jsonl")


def test_a_speed_that_is_not_a_number_is_refused() -> None:
    line = RIG.read_text().splitlines()[0].replace('"speed_tg": 364.441864', '"speed_tg": "fast"')
    with pytest.raises(BadValueError, match="line 1: speed_tg is 'fast', not a number"):
        parse_batched_rows(line, "out.jsonl")
