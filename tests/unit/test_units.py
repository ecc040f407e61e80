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


@pytest.mark.parametrize(
    ("text", "bytes_per_s", "ram"),
    [
        ("60", 60_000_000_000, None),
        ("58.5", 58_500_000_000, None),
        ("60G", 60_000_000_000, None),
        ("60gb/s", 60_000_000_000, None),
        ("60 GB/s", 60_000_000_000, None),
        ("56G/s", 56 * GIB, None),
        ("58.5GiB/s", round(58.5 * GIB), None),
        ("ddr5-6000x2", 6000 * 10**6 * 8 * 2, "DDR5-6000 x2"),
        ("DDR4-3200 x 4", 3200 * 10**6 * 8 * 4, "DDR4-3200 x4"),
        ("lpddr5x-8533x2", 8533 * 10**6 * 8 * 2, "LPDDR5X-8533 x2"),
        ("LPDDR5-6400x4", 6400 * 10**6 * 8 * 4, "LPDDR5-6400 x4"),
    ],
)
def test_parse_rate(text: str, bytes_per_s: int, ram: str | None) -> None:
    """One --ram-bandwidth for plan and doctor: GB/s (10^9 bytes) as doctor prints it and
    vendors state it, a size per second in the sizes' binary units, or the RAM's type, rate
    and channels (its peak: MT/s x 8 bytes x channels)."""
    from moetune.units import RamRate, parse_rate

    assert parse_rate(text) == RamRate(bytes_per_s, ram=ram)


@pytest.mark.parametrize(
    "bad",
    [
        "0",
        "-1",
        "nan",
        "inf",
        "60G/h",
        "60GB",
        "60M",
        "fast",
        "ddr5-6000",
        "ddr3-1600x2",
        "ddr5-0x2",
        "ddr5-6000x0",
        "ddr5-6000x2x2",
        "",
    ],
)
def test_parse_rate_refuses(bad: str) -> None:
    """A refusal is one BAD_VALUE line (with the forms' hint)."""
    from moetune.units import parse_rate

    with pytest.raises(BadValueError) as caught:
        parse_rate(bad)
    assert "\n" not in caught.value.message


def test_the_bounds_of_sizes_rates_and_token_counts() -> None:
    """Finite, and far above any real use: a size below 1 PiB, a bandwidth at most 100 TB/s,
    a token count at most 16M; a long digit string is refused, not an OverflowError."""
    from moetune.units import MAX_RATE, MAX_TOKENS, PIB, parse_counts, parse_rate

    huge = "9" * 5000
    assert parse_size("1023T") == 1023 * 1024 * GIB
    assert parse_rate("100000").bytes_per_s == MAX_RATE
    assert parse_rate(f"{1024 * 90}G/s").bytes_per_s == 90 * 1024 * GIB
    assert parse_tokens("16384k") == MAX_TOKENS == parse_tokens(f"000{MAX_TOKENS}")
    refused = [
        (parse_size, "1024T"),
        (parse_size, f"{PIB}B"),
        (parse_size, f"{huge}G"),
        (parse_rate, "100001"),
        (parse_rate, "1e300"),
        (parse_rate, f"{huge}G/s"),
        (parse_rate, huge),
        (parse_rate, f"{huge}GB/s"),
        (parse_rate, f"ddr5-{huge}x2"),
        (parse_rate, "ddr5-999999x9999"),
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
