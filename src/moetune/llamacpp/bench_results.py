"""llama-bench's results, ``-o json`` (one array) or ``-o jsonl`` (one object a line), as
speed points.

The fields and their types are llama-bench's (tools/llama-bench/llama-bench.cpp of build
11434, ``test::get_fields``/``get_field_type``): integers for counts and ``flash_attn``
(-1 auto, 0 off, 1 on; older builds wrote a bool), floats for ``avg_ts``/``stddev_ts``,
strings for the rest; ``samples_ts`` is an array. A field older builds did not write
(``n_cpu_moe``, ``n_depth``, ``devices``, ``tensor_buft_overrides``) takes the meaning its
absence had there. ``tensor_buft_overrides`` lists ``-ot`` only: ``--n-cpu-moe`` is its
own field. A file that is not llama-bench's is one BadValueError naming it; a row that is
wrong, or past what a real measurement can be (records/speed.py's bounds, the same a stored
point is read back through), is refused naming the file, the row, the field and its value,
and the rest of the file is kept (a file of refused rows only: its first refusal's error).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from moetune.errors import BadValueError
from moetune.record import record
from moetune.records.speed import (
    FlashAttn,
    PointRefused,
    SpeedMachine,
    SpeedModel,
    SpeedPlacement,
    SpeedPoint,
    SpeedSource,
    checked,
    kind_of,
)
from moetune.store.files import parse_json

# what a point cannot do without
REQUIRED_INTS = ("n_prompt", "n_gen", "n_ubatch", "n_batch", "n_threads", "n_gpu_layers")
OPTIONAL_INTS = (
    "n_cpu_moe",
    "n_depth",
    "build_number",
    "model_size",
    "model_n_params",
    "fit_target",
    "main_gpu",
)
OPTIONAL_STRINGS = (
    "cpu_info",
    "gpu_info",
    "backends",
    "model_type",
    "type_k",
    "type_v",
    "devices",
    "tensor_split",
    "tensor_buft_overrides",
    "split_mode",
    "build_commit",
    "test_time",
)
# any of these makes an object a llama-bench row (then the rest must be right)
_MARKS = ("avg_ts", "samples_ts", "n_prompt", "n_gen", "model_filename", "build_commit")
_FLASH: dict[int, FlashAttn] = {-1: "auto", 0: "off", 1: "on"}
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


REFUSALS_NAMED = 3  # a file's refused rows named one by one; the rest are counted


@record(frozen=True)
class BenchRows:
    """A llama-bench file's points, and the rows it refused: how many, the first few why."""

    points: list[SpeedPoint]
    refused: int = 0
    refusals: tuple[str, ...] = ()


def parse_bench_rows(text: str, source: str) -> BenchRows:
    """The points of a llama-bench results file's ``text`` (``source``: its name, for the
    errors and the points), each row that is wrong refused; BadValueError when the file is not
    llama-bench's or every row is refused."""
    if not text.strip():
        raise BadValueError(f"{source} is empty", hint="pass llama-bench -o json or -o jsonl")
    points: list[SpeedPoint] = []
    first: BadValueError | None = None
    refusals: list[str] = []
    refused = 0
    for index, row in enumerate(_rows(text, source), 1):  # one row's objects at a time
        try:
            points.append(point_of_row(row, source, index))
        except BadValueError as exc:
            first = first or exc
            refused += 1
            if len(refusals) < REFUSALS_NAMED:
                refusals.append(exc.message)
    if not points and not refused:
        raise BadValueError(f"{source} holds no llama-bench results")
    if not points:
        assert first is not None
        if refused > 1:
            raise BadValueError(f"{first.message} (and every other row: {refused} refused)")
        raise first
    return BenchRows(points, refused, tuple(refusals))


def parse_bench_text(text: str, source: str) -> list[SpeedPoint]:
    """The points of ``parse_bench_rows``, the refused rows left out."""
    return parse_bench_rows(text, source).points


def _skip_space(text: str, pos: int) -> int:
    """Where JSON's white space from ``pos`` ends."""
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def array_items(text: str) -> Iterator[object]:
    """The items of the JSON array ``text``, one at a time (a file of 10,000 rows is never
    all objects at once); ValueError where it is not one, as ``json.loads`` would raise."""
    decoder = json.JSONDecoder()
    pos = _skip_space(text, 0)
    if not text.startswith("[", pos):
        raise ValueError(f"expecting '[' at char {pos}")
    pos = _skip_space(text, pos + 1)
    if text.startswith("]", pos):
        pos += 1
    else:
        while True:
            try:
                item, pos = decoder.raw_decode(text, pos)
            except RecursionError:
                raise ValueError("nested too deeply") from None
            yield item
            pos = _skip_space(text, pos)
            if text.startswith(",", pos):
                pos = _skip_space(text, pos + 1)
            elif text.startswith("]", pos):
                pos += 1
                break
            else:
                raise ValueError(f"expected ',' or ']' at char {pos}")
    if _skip_space(text, pos) != len(text):
        raise ValueError(f"extra data at char {pos}")


def _rows(text: str, source: str) -> Iterator[dict[str, Any]]:
    """The objects of ``-o json`` (an array, read an item at a time) or ``-o jsonl`` (one a
    line)."""
    if text.lstrip().startswith("["):
        try:
            for index, item in enumerate(array_items(text), 1):
                yield _row(item, source, f"row {index}")
        except ValueError as exc:  # an array cut short or broken
            raise BadValueError(f"{source} is not valid JSON: {exc}") from None
        return
    try:
        data = parse_json(text)
    except ValueError:
        lines = ((n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip())
        for number, line in lines:
            try:
                yield _row(parse_json(line), source, f"line {number}")
            except ValueError as exc:
                raise BadValueError(
                    f"{source} line {number} is not JSON: {exc}",
                    hint="pass llama-bench -o json or -o jsonl",
                ) from None
        return
    if isinstance(data, list):
        for index, item in enumerate(data, 1):
            yield _row(item, source, f"row {index}")
        return
    yield _row(data, source, "line 1")


def _row(item: object, source: str, where: str) -> dict[str, Any]:
    if not isinstance(item, dict) or not any(mark in item for mark in _MARKS):
        raise BadValueError(
            f"{source} is not a llama-bench result ({where} is not one of its tests)",
            hint="pass llama-bench -o json or -o jsonl, or a `moetune bench` result",
        )
    return item


class _CheckedRow:
    """One row's fields, each checked for its type (the error names the row and field)."""

    def __init__(self, row: dict[str, Any], source: str, index: int) -> None:
        self.row, self.where = row, f"{source} row {index}"

    def bad(self, field: str, wanted: str) -> BadValueError:
        return BadValueError(f"{self.where}: {field} should be {wanted}, got {self.row[field]!r}")

    def int_(self, field: str, required: bool = False) -> int | None:
        if field not in self.row:
            if required:
                raise BadValueError(f"{self.where}: missing field {field}")
            return None
        value = self.row[field]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(field, "an integer")
        return value

    def count(self, field: str, required: bool = False) -> int | None:
        value = self.int_(field, required)
        if value is not None and value < 0:
            raise self.bad(field, "0 or more")
        return value

    def float_(self, field: str, required: bool = False) -> float | None:
        if field not in self.row:
            if required:
                raise BadValueError(f"{self.where}: missing field {field}")
            return None
        value = self.row[field]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.bad(field, "a number")
        number = _float(value)
        if number is None or not math.isfinite(number) or number < 0:
            raise self.bad(field, "a finite number, 0 or more")
        return number

    def str_(self, field: str, required: bool = False) -> str | None:
        if field not in self.row:
            if required:
                raise BadValueError(f"{self.where}: missing field {field}")
            return None
        value = self.row[field]
        if not isinstance(value, str):
            raise self.bad(field, "a string")
        return value.strip() or None

    def samples(self) -> list[float]:
        value = self.row.get("samples_ts", [])
        if not isinstance(value, list):
            raise self.bad("samples_ts", "an array of numbers")
        samples = []
        for sample in value:
            if isinstance(sample, bool) or not isinstance(sample, int | float):
                raise self.bad("samples_ts", "an array of numbers")
            number = _float(sample)
            if number is None or not math.isfinite(number):
                raise self.bad("samples_ts", "an array of finite numbers")
            samples.append(number)
        return samples

    def flag(self, field: str) -> bool:
        """A 0/1 integer or a bool (older builds)."""
        value = self.row.get(field, 0)
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise self.bad(field, "0, 1 or a bool")

    def flash(self) -> FlashAttn | None:
        if "flash_attn" not in self.row:
            return None
        value = self.row["flash_attn"]
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, int) and value in _FLASH:
            return _FLASH[value]
        raise self.bad("flash_attn", "-1, 0, 1 or a bool")


def _float(value: int | float) -> float | None:
    """``value`` as a float; None for an integer too large for one (400 digits)."""
    try:
        return float(value)
    except OverflowError:
        return None


# the fields of a point that a llama-bench field of another name becomes
_BENCH_NAMES = {"tps": "avg_ts", "tps_stddev": "stddev_ts", "samples_tps": "samples_ts"}


def _refusal(exc: PointRefused, where: str) -> BadValueError:
    """A point past records/speed.py's bounds: the row, llama-bench's field and its value."""
    return BadValueError(f"{where}: {exc.describe(_BENCH_NAMES.get(exc.field, exc.field))}")


def _overrides(text: str | None) -> list[str]:
    """``PATTERN=BUFT;PATTERN=BUFT`` (``none``: no rule)."""
    if text is None or text == "none":
        return []
    return [rule for rule in text.split(";") if rule and rule != "none"]


def _split(text: str | None, row: _CheckedRow) -> list[float]:
    """``0.00`` (none) or ``3.00/1.00``."""
    if text is None:
        return []
    try:
        values = [float(part) for part in text.split("/")]
    except ValueError:
        raise row.bad("tensor_split", "numbers joined by /") from None
    return values if any(values) else []


def _devices(text: str | None) -> list[str] | None:
    """``auto`` (None: every device), ``none`` (no device), ``CUDA0/CUDA1``."""
    if text is None or text == "auto":
        return None
    if text == "none":
        return []
    return [name for name in text.split("/") if name]


def point_of_row(row: dict[str, Any], source: str, index: int) -> SpeedPoint:
    """One llama-bench test as a point; BadValueError naming the field that is wrong."""
    r = _CheckedRow(row, source, index)
    n_prompt, n_gen = (r.count(f, required=True) or 0 for f in ("n_prompt", "n_gen"))
    kind = kind_of(n_prompt, n_gen)
    if kind is None:
        raise BadValueError(f"{r.where}: a test of no tokens (n_prompt and n_gen are 0)")
    name = r.str_("model_filename", required=True)
    if name is None:
        raise r.bad("model_filename", "a file name")
    ubatch, batch, threads = (
        r.count(f, required=True) for f in ("n_ubatch", "n_batch", "n_threads")
    )
    ngl = r.int_("n_gpu_layers", required=True)
    for field in OPTIONAL_INTS:
        r.int_(field)
    for field in OPTIONAL_STRINGS:
        r.str_(field)
    backends = r.str_("backends")
    try:
        return checked(
            lambda: SpeedPoint(
                kind=kind,
                model=SpeedModel(
                    file_name=name.replace("\\", "/").rsplit("/", 1)[-1],
                    path=name,
                    model_bytes=r.count("model_size"),
                    n_params=r.count("model_n_params"),
                    model_type=r.str_("model_type"),
                ),
                placement=SpeedPlacement(
                    n_cpu_moe=r.count("n_cpu_moe") or 0,
                    override_tensor=_overrides(r.str_("tensor_buft_overrides")),
                    n_gpu_layers=ngl,
                    tensor_split=_split(r.str_("tensor_split"), r),
                    split_mode=r.str_("split_mode"),
                    no_op_offload=r.flag("no_op_offload"),
                    fit=(r.count("fit_target") or 0) > 0,
                ),
                n_ubatch=_positive(ubatch, r, "n_ubatch"),
                n_batch=_positive(batch, r, "n_batch"),
                n_threads=_positive(threads, r, "n_threads"),
                type_k=r.str_("type_k"),
                type_v=r.str_("type_v"),
                flash_attn=r.flash(),
                n_depth=r.count("n_depth") or 0,
                n_prompt=n_prompt,
                n_gen=n_gen,
                tps=r.float_("avg_ts", required=True) or 0.0,
                tps_stddev=r.float_("stddev_ts"),
                samples_tps=r.samples(),
                machine=SpeedMachine(
                    cpu_info=r.str_("cpu_info"),
                    gpu_info=r.str_("gpu_info"),
                    backends=[b for b in (backends or "").split(",") if b],
                    devices=_devices(r.str_("devices")),
                ),
                source=SpeedSource(
                    tool="llama-bench",
                    file=source,
                    build_number=r.int_("build_number") or None,  # 0: the build did not record it
                    build_commit=_commit(r.str_("build_commit")),
                    measured_at=r.str_("test_time"),
                ),
            )
        )
    except PointRefused as exc:
        raise _refusal(exc, r.where) from None


def _positive(value: int | None, row: _CheckedRow, field: str) -> int:
    if value is None or value < 1:
        raise row.bad(field, "1 or more")
    return value


def _commit(text: str | None) -> str | None:
    return None if text in (None, "unknown") else text
