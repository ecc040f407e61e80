"""llama-batched-bench's results, ``--output-format jsonl`` (one object a line).

Fields as build 11434 writes them (tools/batched-bench/batched-bench.cpp): ``pp`` prompt
tokens of each sequence, ``tg`` tokens each generates, ``pl`` sequences at once (``-npl``),
``is_pp_shared`` (``-pps``: one prompt shared by all), ``n_ubatch``, ``n_batch``,
``n_threads``, ``n_gpu_layers``, ``flash_attn``, the times ``t_pp``/``t_tg``/``t`` in seconds
and the speeds: ``speed_pp`` the prompts' tokens over ``t_pp`` (``pl * pp``, one ``pp`` when
shared), ``speed_tg`` all the sequences' generated tokens over ``t_tg`` (``pl * tg``: the
aggregate decode of ``pl`` streams, one token of each per step). A row names neither the
model nor the placement: whoever ran it knows them (`calibrate --measure --parallel`).
"""

from __future__ import annotations

import json
import math

from moetune.errors import BadValueError
from moetune.record import record

_INTS = ("pp", "tg", "pl", "is_pp_shared", "n_ubatch", "n_batch", "n_threads", "n_gpu_layers")
_FLOATS = ("t_pp", "speed_pp", "t_tg", "speed_tg")


@record(frozen=True)
class BatchedRow:
    """One test of llama-batched-bench: ``n_streams`` sequences, each a prompt of
    ``n_prompt`` tokens then ``n_gen`` generated."""

    n_prompt: int  # pp
    n_gen: int  # tg
    n_streams: int  # pl
    prompt_shared: bool  # -pps
    n_ubatch: int
    n_batch: int
    n_threads: int
    n_gpu_layers: int
    prompt_tps: float  # speed_pp: every prompt token processed, per second
    decode_tps: float  # speed_tg: every stream's generated tokens together, per second


def parse_batched_rows(text: str, source: str) -> list[BatchedRow]:
    """The rows of llama-batched-bench's ``--output-format jsonl`` output ``text``
    (``source``: its name, for the errors); BadValueError naming the line of one that is not
    such a row, or when there is none."""
    rows: list[BatchedRow] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        rows.append(_row(line, f"{source} line {number}"))
    if not rows:
        raise BadValueError(
            f"{source} holds no llama-batched-bench rows",
            hint="run llama-batched-bench with --output-format jsonl",
        )
    return rows


def _row(line: str, where: str) -> BatchedRow:
    try:
        data = json.loads(line)
    except ValueError:
        raise BadValueError(f"{where} is not JSON") from None
    if not isinstance(data, dict):
        raise BadValueError(f"{where} is not a llama-batched-bench row")
    ints: dict[str, int] = {}
    for key in _INTS:
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BadValueError(f"{where}: {key} is {value!r}, not a count")
        ints[key] = value
    floats: dict[str, float] = {}
    for key in _FLOATS:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadValueError(f"{where}: {key} is {value!r}, not a number")
        if not math.isfinite(value) or value < 0:
            raise BadValueError(f"{where}: {key} is {value!r}")
        floats[key] = float(value)
    if ints["pl"] < 1:
        raise BadValueError(f"{where}: pl is {ints['pl']}, not a number of sequences")
    return BatchedRow(
        n_prompt=ints["pp"],
        n_gen=ints["tg"],
        n_streams=ints["pl"],
        prompt_shared=bool(ints["is_pp_shared"]),
        n_ubatch=ints["n_ubatch"],
        n_batch=ints["n_batch"],
        n_threads=ints["n_threads"],
        n_gpu_layers=ints["n_gpu_layers"],
        prompt_tps=floats["speed_pp"],
        decode_tps=floats["speed_tg"],
    )
