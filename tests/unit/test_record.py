"""record.py: the records (dataclasses with shared methods, the same values as a dataclass's
own) and their one JSON form (what pydantic's ``model_dump(mode="json")`` wrote for them
before, byte for byte in the golden files)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, cast

import pytest
from pydantic import BaseModel

from moetune.core.memory import DeviceMemory
from moetune.core.search import Attempt
from moetune.core.settings import Settings
from moetune.core.speed import Efficiency, TermTime
from moetune.errors import BadValueError
from moetune.gguf.roles import Role
from moetune.record import HIDDEN, OMIT_EMPTY, jsonable, record
from moetune.records.results import ObjectiveLaunch, RunResult

if TYPE_CHECKING:
    from moetune.core.facts import ModelFacts


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


@dataclass(kw_only=True)
class _Checked:
    facts: ModelFacts | None  # a name the type checker alone imports
    amounts: list[float] | None  # a union of a list and None: written as it is
    counts: dict[str, int]


def test_a_name_only_the_type_checker_imports_declares_no_number() -> None:
    value = _Checked(facts=None, amounts=[1, 2.5], counts={"a": cast(int, 2.0)})
    assert jsonable(value) == {"facts": None, "amounts": [1, 2.5], "counts": {"a": 2}}
    assert isinstance(jsonable(value)["amounts"][0], int)


def _attempt() -> Attempt:
    return Attempt(
        n_cpu_moe=3,
        predicted_bytes=10,
        measured_bytes=12,
        status="ok",
        decode_tps=40,
        decode_tps_min=20.0,
        decode_tps_max=45.0,
        repeats=3,
        tensor_split=[1, 2],
    )


def test_an_attempt_nested_in_the_records_is_written_and_read_back() -> None:
    """A run's attempt (a record of the core) in the results' pydantic models: its fields in
    order, then ``noisy``, as the records wrote it when it was a model; a saved ``noisy`` is
    derived again, not read."""
    attempt = _attempt()
    result = RunResult(
        model="m",
        device="CUDA0",
        probe="nvml",
        target_bytes=20,
        settings=Settings(n_ctx=4096),
        planned_n_cpu_moe=3,
        attempts=[attempt],
        best=attempt,
        command=["llama-server"],
    )
    written = result.model_dump(mode="json")
    assert list(written["best"])[:4] == ["n_cpu_moe", "predicted_bytes", "measured_bytes", "status"]
    assert written["best"] == jsonable(attempt) and written["best"]["noisy"] is True
    assert written["best"]["decode_tps"] == 40.0 and written["best"]["tensor_split"] == [1.0, 2.0]
    again = RunResult.model_validate_json(result.model_dump_json())
    assert again.best == attempt and again.model_dump(mode="json") == written
    launch = {
        "n_cpu_moe": 2,
        "n_ubatch": 1024,
        "forecast_decode_tps": None,
        "forecast_prefill_tps": None,
        "forecast_score": 1.0,
        "expected_score": 1.0,
        "measured_score": None,
        "attempt": {**jsonable(attempt), "noisy": False},
    }
    assert ObjectiveLaunch.model_validate(launch).attempt == attempt


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


# --- record: a dataclass's methods, shared ------------------------------------------------------


def _pair(frozen: bool, eq: bool = True) -> tuple[type, type]:
    """The same class declared by ``record`` and by ``dataclass``."""

    def body() -> dict[str, object]:
        return {
            "__annotations__": {"a": "int", "b": "str", "c": "float", "d": "list[int]"},
            "b": "x",
            "c": field(default=0.5, compare=False),
            "d": field(default_factory=list, repr=False, hash=False),
        }

    ours = record(frozen=frozen, kw_only=True, eq=eq)(type("Point", (), body()))
    theirs: type = dataclass(frozen=frozen, kw_only=True, eq=eq)(type("Point", (), body()))
    return ours, theirs


@pytest.mark.parametrize("frozen", [True, False])
def test_a_record_shows_compares_and_hashes_as_its_dataclass(frozen: bool) -> None:
    ours, theirs = _pair(frozen)
    for kwargs in ({"a": 1}, {"a": 2, "b": "y", "c": 3.0, "d": [4]}):
        assert repr(ours(**kwargs)) == repr(theirs(**kwargs))
    assert ours(a=1) == ours(a=1, c=9.0)  # c is not compared
    assert ours(a=1) != ours(a=1, b="y") and ours(a=1) != ours(a=2)
    assert (ours(a=1) == theirs(a=1)) is False  # another class: not equal, as a dataclass
    assert ours(a=1).__eq__(1) is NotImplemented
    if frozen:
        assert hash(ours(a=1, d=[1])) == hash(ours(a=1, d=[2]))  # d is not hashed
        assert len({ours(a=1), ours(a=1), ours(a=3)}) == 2
        with pytest.raises(AttributeError):
            ours(a=1).a = 2
    else:
        with pytest.raises(TypeError):
            hash(ours(a=1))  # a mutable record is not hashable, as a dataclass
        assert theirs.__hash__ is None and ours.__hash__ is None


def test_a_record_without_equality_is_itself_alone() -> None:
    ours, theirs = _pair(frozen=True, eq=False)
    one = ours(a=1)
    assert one != ours(a=1) and theirs(a=1) != theirs(a=1)  # identity, as a dataclass
    assert {one, one} == {one} and len({one, ours(a=1)}) == 2


def test_a_records_own_methods_stay() -> None:
    @record(frozen=True)
    class Named:
        name: str

        def __repr__(self) -> str:
            return f"<{self.name}>"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Named) and other.name.lower() == self.name.lower()

        def __hash__(self) -> int:
            return hash(self.name.lower())

    assert repr(Named("A")) == "<A>" and Named("A") == Named("a")
    assert len({Named("A"), Named("a")}) == 1
