"""core/record.py: the core's dataclasses and their one JSON form (what pydantic's
``model_dump(mode="json")`` wrote for them before, byte for byte in the golden files)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
from pydantic import BaseModel

from moetune.core.memory import DeviceMemory
from moetune.core.record import HIDDEN, OMIT_EMPTY, jsonable
from moetune.core.settings import Settings
from moetune.core.speed import Efficiency, TermTime
from moetune.errors import BadValueError
from moetune.gguf.roles import Role


@dataclass(kw_only=True)
class _Inner:
    share: float
    counts: tuple[int, ...] = ()


@dataclass(kw_only=True)
class _Outer:
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("doubled",)

    amount: float
    rates: dict[str, float | None]
    by_role: dict[Role, int]
    inner: list[_Inner]
    note: str | None = field(default=None, metadata=OMIT_EMPTY)
    kept_aside: int = field(default=7, metadata=HIDDEN)

    @property
    def doubled(self) -> float:
        return self.amount * 2


class _Model(BaseModel):
    outer: _Outer


def test_fields_in_order_then_properties() -> None:
    value = _Outer(
        amount=3,
        rates={"ram": 2, "link": None},
        by_role={Role.EXPERTS: 5},
        inner=[_Inner(share=1, counts=(1, 2))],
    )
    assert jsonable(value) == {
        "amount": 3.0,
        "rates": {"ram": 2.0, "link": None},
        "by_role": {Role.EXPERTS.value: 5},
        "inner": [{"share": 1.0, "counts": [1, 2]}],
        "doubled": 6.0,
    }
    # an int in a float field is written as a float, as pydantic wrote it
    assert json.dumps(jsonable(value)).startswith('{"amount": 3.0, "rates": {"ram": 2.0')


def test_omitted_while_empty_hidden_and_excluded() -> None:
    value = _Outer(amount=1.5, rates={}, by_role={}, inner=[], note="n")
    assert jsonable(value)["note"] == "n"
    assert "note" not in jsonable(_Outer(amount=1.5, rates={}, by_role={}, inner=[]))
    assert "kept_aside" not in jsonable(value)
    assert set(jsonable(value, exclude={"inner", "doubled"})) == {
        "amount",
        "rates",
        "by_role",
        "note",
    }


def test_non_finite_is_null() -> None:
    assert jsonable(_Inner(share=float("inf")))["share"] is None


def test_a_pydantic_model_holding_records() -> None:
    """A record inside a pydantic model (the records nest the core's settings) is written by
    pydantic; jsonable hands such a model to it."""
    value = _Model(outer=_Outer(amount=1.0, rates={}, by_role={}, inner=[]))
    assert jsonable(value)["outer"]["amount"] == 1.0


def test_device_memory_leaves_out_absent_companions() -> None:
    memory = DeviceMemory(
        name="CUDA0",
        weights_bytes=1,
        expert_bytes=0,
        kv_bytes=2,
        compute_bytes=3,
        overhead_bytes=4,
        draft_kv_bytes=5,
    )
    data = jsonable(memory)
    assert "mmproj_weights_bytes" not in data and data["draft_kv_bytes"] == 5
    assert list(data)[-1] == "total_bytes" and data["total_bytes"] == 15


def test_hidden_setting_and_bounds() -> None:
    assert "n_draft" not in jsonable(Settings(n_ctx=4096, n_draft=3))
    with pytest.raises(BadValueError, match=r"Settings\.n_ctx must be positive"):
        Settings(n_ctx=0)
    with pytest.raises(BadValueError, match=r"Efficiency\.link must be in \(0, 1\]"):
        Efficiency(link=1.5)


def test_a_term_amount_is_a_float() -> None:
    term = TermTime(term="RAM", kind="ram", amount=1024, seconds=None, figure="RAM bandwidth")
    assert jsonable(term)["amount"] == 1024.0
    assert isinstance(jsonable(term)["amount"], float)
