"""Sizes are parsed and formatted in one place."""

from __future__ import annotations

import pytest

from moetune.errors import BadValueError
from moetune.units import (
    GIB,
    MIB,
    format_bytes,
    format_mib,
    parse_size,
    parse_tokens,
    size_arg,
    tokens_arg,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24G", 24 * GIB),
        ("24GiB", 24 * GIB),
        ("24gb", 24 * GIB),
        ("22.5G", round(22.5 * GIB)),
        ("800M", 800 * MIB),
        ("24000MiB", 24000 * MIB),
        (" 1.5 GiB ", round(1.5 * GIB)),
        ("1048576B", 1048576),
        ("512K", 512 * 1024),
        ("1T", 1024 * GIB),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "G", "24Q", "-1G", "0", "24 G B", "1e3G", "twenty", "16", "1048576"]
)
def test_bad_sizes(text: str) -> None:
    with pytest.raises(BadValueError):
        parse_size(text)


def test_format() -> None:
    assert format_bytes(17904 * MIB) == "17.48 GiB"
    assert format_bytes(384 * MIB) == "384.00 MiB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(None) == "?"
    assert format_bytes(-2 * MIB) == "-2.00 MiB"
    assert format_mib(15 * MIB + 356_516) == "15.34 MiB"


def test_zero_allowed_where_asked() -> None:
    assert parse_size("0", allow_zero=True) == 0
    assert parse_size("0G", allow_zero=True) == 0


def test_a_size_needs_a_unit() -> None:
    with pytest.raises(BadValueError) as info:
        parse_size("16")
    assert info.value.hint == "did you mean 16G?"


@pytest.mark.parametrize("n", [24 * GIB, 1536 * MIB, 512, 3 * 1024, 0, GIB + 1])
def test_size_arg_parses_back(n: int) -> None:
    assert parse_size(size_arg(n), allow_zero=True) == n


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (22 * GIB, "22G"),
        (23040 * MIB, "22.5G"),
        (23000 * MIB, "23000M"),
        (1536 * MIB, "1.5G"),
        (parse_size("22.04G"), "22.04G"),
        (700 * MIB, "700M"),
        (GIB + 1, "1073741825B"),
    ],
)
def test_size_arg_is_written_as_typed(n: int, text: str) -> None:
    """The largest unit the size is written in with two decimals at most (``22.5G``, not
    ``23040M``, as profile names and the retune command gave it)."""
    assert size_arg(n) == text


@pytest.mark.parametrize(
    ("text", "tokens"), [("32768", 32768), ("32k", 32768), ("128K", 131072), ("1_024", 1024)]
)
def test_parse_tokens(text: str, tokens: int) -> None:
    assert parse_tokens(text) == tokens
    assert parse_tokens(tokens_arg(tokens)) == tokens


@pytest.mark.parametrize("text", ["", "32m", "1.5k", "-1", "max"])
def test_bad_tokens(text: str) -> None:
    with pytest.raises(BadValueError):
        parse_tokens(text)


def test_parse_rate_takes_gb_per_s_or_a_size_per_second() -> None:
    """One --ram-bandwidth for plan and doctor: a bare number is GB/s as doctor prints it
    (10^9 bytes), a size per second is in the sizes' binary units."""
    from moetune.units import parse_rate

    assert parse_rate("60") == 60_000_000_000
    assert parse_rate("58.5") == 58_500_000_000
    assert parse_rate("56G/s") == 56 * GIB
    for bad in ("0", "-1", "nan", "inf", "60G", "60G/h", "fast"):
        with pytest.raises(BadValueError):
            parse_rate(bad)


def test_the_bounds_of_sizes_rates_and_token_counts() -> None:
    """Finite, and far above any real use: a size below 1 PiB, a bandwidth at most 100 TB/s,
    a token count at most 16M; a long digit string is refused, not an OverflowError."""
    from moetune.units import MAX_RATE, MAX_TOKENS, PIB, parse_counts, parse_rate

    huge = "9" * 5000
    assert parse_size("1023T") == 1023 * 1024 * GIB
    assert parse_rate("100000") == MAX_RATE and parse_rate(f"{1024 * 90}G/s") == 90 * 1024 * GIB
    assert parse_tokens("16384k") == MAX_TOKENS == parse_tokens(f"000{MAX_TOKENS}")
    refused = [
        (parse_size, "1024T"),
        (parse_size, f"{PIB}B"),
        (parse_size, f"{huge}G"),
        (parse_rate, "100001"),
        (parse_rate, "1e300"),
        (parse_rate, f"{huge}G/s"),
        (parse_tokens, "16385k"),
        (parse_tokens, str(MAX_TOKENS + 1)),
        (parse_tokens, huge),
        (parse_counts, f"512,{huge}"),
    ]
    for parse, text in refused:
        with pytest.raises(BadValueError) as info:
            parse(text)  # type: ignore[operator]
        assert len(info.value.message) < 200, info.value.message  # the value shown cut
    with pytest.raises(BadValueError, match="from 1 to 2048"):
        parse_counts("512,4096", 2048)
