"""Sizes: the only place that parses or formats byte counts.

Parsing follows the conventions people type for GPU memory: ``24G``, ``24GB`` and ``24GiB``
all mean 24 GiB (nvidia-smi and llama.cpp report binary units, and nobody means 24e9 bytes
when they say their card has 24G). An explicit decimal suffix with an ``i``-less ``B`` is
still binary; this is deliberate and documented in docs/reference.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple, NoReturn

from moetune.errors import BadValueError
from moetune.record import record

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4
PIB = 1024**5

# The bounds of what the options take: finite, and far above any real use. A size is below
# 1 PiB, a bandwidth at most 100 TB/s, a token count at most 16M (16384k, above the longest
# training context).
MAX_SIZE_BYTES = PIB
MAX_RATE = 100 * 10**12  # bytes per second
MAX_TOKENS = 16 * 1024**2

_SUFFIX = {"": 1, "K": KIB, "M": MIB, "G": GIB, "T": TIB}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)
_TOKENS_RE = re.compile(r"^\s*(\d+)\s*(k?)\s*$", re.IGNORECASE)
SIZE_HINT = "use a number with a unit, e.g. 24G, 22.5GiB, 800M or 24000MiB"
SHOWN = 24  # the characters of a refused value an error shows


def shown(text: str) -> str:
    """``text`` quoted as an error shows it: its first characters where it is long (a
    5,000-digit number is one short line)."""
    if len(text) <= SHOWN:
        return repr(text)
    return repr(text[:SHOWN]) + f"... ({len(text)} characters)"


def parse_size(text: str, allow_zero: bool = False) -> int:
    """Parse ``"22G"``, ``"1.5GiB"``, ``"800M"``, ``"24000MiB"`` or ``"512B"`` into bytes.

    A number without a unit is refused (nobody means 16 bytes by ``--vram 16``), but for 0.
    Sizes must be positive, except where ``allow_zero`` (a headroom or overhead of 0), and
    below 1 PiB (``MAX_SIZE_BYTES``)."""
    match = _SIZE_RE.match(text)
    if match is None:
        raise BadValueError(f"not a size: {shown(text)}", hint=SIZE_HINT)
    number, unit, byte = match.groups()
    value = float(number) * _SUFFIX[unit.upper()]  # a long digit string: inf, refused below
    if not unit and not byte and value != 0:
        raise BadValueError(
            f"{shown(text.strip())} has no unit", hint=f"did you mean {number[:SHOWN]}G?"
        )
    if value < 0 or (value == 0 and not allow_zero):
        raise BadValueError(f"size must be positive: {shown(text)}")
    if not value < MAX_SIZE_BYTES:
        raise BadValueError(f"a size must be below 1 PiB (1024T), got {shown(text)}")
    return round(value)


RATE_HINT = (
    "use GB/s (60, 60G or 60GB/s), a size per second (56G/s) or the RAM's type, "
    "rate and channels (ddr5-6000x2)"
)
_GBPS_RE = re.compile(r"^(\d+(?:\.\d+)?|\.\d+)\s*(?:G|GB/s)?$", re.IGNORECASE)
_RAM_RE = re.compile(r"^(ddr4|ddr5|lpddr4x?|lpddr5x?)-(\d+)(?:\s*x\s*(\d+))?$", re.IGNORECASE)
BUS_BYTES = 8  # a channel of the RAM: 64 bits (DDR4, DDR5: one DIMM channel; LPDDR: 64 bits)


@record(frozen=True)
class RamRate:
    """A RAM bandwidth given on the command line: ``bytes_per_s``, and where the RAM's type,
    rate and channels were given (``ddr5-6000x2``), them as written (``DDR5-6000 x2``):
    ``bytes_per_s`` is then their peak, MT/s x 8 bytes x channels."""

    bytes_per_s: int
    ram: str | None = None


def parse_rate(text: str) -> RamRate:
    """A bandwidth in bytes per second: GB/s (10^9 bytes, as vendors and ``doctor`` give it:
    ``60``, ``60G``, ``60GB/s``), a size per second in moetune's binary units (``56G/s``,
    ``58.5GiB/s``), or the RAM's type, rate and channels, its peak: ``ddr5-6000x2`` is
    6000 MT/s x 8 bytes x 2 channels, 96 GB/s (a channel is a 64-bit bus, LPDDR's too:
    a 128-bit LPDDR5X bus is ``lpddr5x-8533x2``); above 0 and at most 100 TB/s
    (``MAX_RATE``)."""
    stripped = text.strip()
    ram = _RAM_RE.match(stripped)
    if ram is not None:
        kind, rate, channels = ram.groups()
        if channels is None:
            raise BadValueError(
                f"{shown(stripped)} does not say how many channels",
                hint=f"add them, e.g. {stripped[:SHOWN]}x2 (a channel is 64 bits wide)",
            )
        if len(rate) + len(channels) > MAX_RAM_DIGITS:  # before int(): 4,300 digits fail
            _above_max_rate(text)
        if int(rate) <= 0 or int(channels) <= 0:
            raise BadValueError(f"a RAM's rate and channels must be positive: {shown(text)}")
        name = f"{kind.upper()}-{int(rate)} x{int(channels)}"
        return _bounded(RamRate(int(rate) * 1_000_000 * BUS_BYTES * int(channels), ram=name), text)
    gbps = _GBPS_RE.match(stripped)
    if gbps is not None:
        value = float(gbps.group(1))  # a long digit string: inf, refused by _bounded
        if value <= 0:
            raise BadValueError(f"a bandwidth must be positive: {shown(text)}", hint=RATE_HINT)
        if not value * 1e9 <= MAX_RATE:
            _above_max_rate(text)
        return RamRate(round(value * 1e9))
    size, slash, per = stripped.rpartition("/")
    if not slash or per.strip().lower() != "s":
        raise BadValueError(f"not a bandwidth: {shown(text)}", hint=RATE_HINT)
    return _bounded(RamRate(parse_size(size)), text)


MAX_RAM_DIGITS = 12  # a RAM's rate and channels: more digits are far above MAX_RATE


def _bounded(rate: RamRate, text: str) -> RamRate:
    if rate.bytes_per_s > MAX_RATE:
        _above_max_rate(text)
    return rate


def _above_max_rate(text: str) -> NoReturn:
    raise BadValueError(f"a bandwidth must be at most 100 TB/s (100000 GB/s), got {shown(text)}")


def format_rate(bytes_per_s: float) -> str:
    """A bandwidth in GB/s (10^9 bytes): whole from 100 GB/s, else to one decimal."""
    value = bytes_per_s / 1e9
    return f"{value:.0f} GB/s" if bytes_per_s >= 1e11 else f"{value:.1f} GB/s"


@record(frozen=True)
class Sizes:
    """One size for every device, or one per device (``24G``, ``24G,12G``), in bytes."""

    values: tuple[int, ...]
    # ``--vram 16G:rtx4080``: the hardware profile each size names (None: none), or empty
    cards: tuple[str | None, ...] = ()

    def __len__(self) -> int:
        return len(self.values)

    def card(self, index: int) -> str | None:
        """The hardware profile the ``index``-th size names, if any."""
        return self.cards[index] if index < len(self.cards) else None

    def __getitem__(self, index: int) -> int:
        return self.values[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self.values)

    @property
    def arg(self) -> str:
        """As typed: ``22G`` or ``22G,10G``."""
        cards = [f":{card}" if (card := self.card(i)) else "" for i in range(len(self.values))]
        return ",".join(size_arg(v) + card for v, card in zip(self.values, cards, strict=True))


def parse_sizes(text: str, allow_zero: bool = False) -> Sizes:
    """One size, or one per device: ``24G`` or ``24G,12G``."""
    parts = text.split(",")
    if not all(part.strip() for part in parts):
        raise BadValueError(f"not a size list: {shown(text)}", hint="e.g. 24G or 24G,12G")
    return Sizes(tuple(parse_size(part, allow_zero) for part in parts))


MAX_CARD_CHARS = 200  # a hardware profile's id, name or .toml path after a --vram size


def parse_vram(text: str) -> Sizes:
    """Device memory, one size or one per device, each optionally naming its card (a
    hardware profile, for its speed figures): ``16G``, ``16G:rtx4080``,
    ``24G:rtx3090,12G``."""
    parts = text.split(",")
    sizes: list[int] = []
    cards: list[str | None] = []
    for part in parts:
        size, colon, card = part.partition(":")
        card = card.strip()
        if colon and not card:
            raise BadValueError(
                f"no card after the colon in {shown(part)}",
                hint="e.g. 16G:rtx4080, a hardware profile as --gpu takes it",
            )
        if len(card) > MAX_CARD_CHARS or not card.isprintable():
            raise BadValueError(
                f"not a hardware profile name: {shown(card)}",
                hint=f"an id, name or .toml path of at most {MAX_CARD_CHARS} characters, "
                "e.g. rtx4080",
            )
        if not size.strip():
            raise BadValueError(
                f"not a size list: {shown(text)}", hint="e.g. 24G or 24G:rtx4090,12G"
            )
        sizes.append(parse_size(size))
        cards.append(card or None)
    return Sizes(tuple(sizes), tuple(cards) if any(cards) else ())


def per_device(values: Sizes | None, n_devices: int, what: str) -> tuple[int, ...] | None:
    """``values`` for each of ``n_devices`` devices: one value for all, or one each."""
    if values is None:
        return None
    if len(values) == 1:
        return values.values * n_devices
    if len(values) != n_devices:
        raise BadValueError(
            f"{what} gives {len(values)} sizes for {n_devices} devices",
            hint="give one size for every device, or one per device in llama.cpp's order",
        )
    return values.values


def size_arg(n_bytes: int) -> str:
    """The size as an argument moetune parses back to the same bytes, in the largest unit it
    is written in with two decimals at most, as a person types it: ``24G``, ``22.5G`` (not
    ``23040M``), ``23000M``, ``512B``."""
    for unit, scale in (("T", TIB), ("G", GIB), ("M", MIB), ("K", KIB)):
        if n_bytes < scale:
            continue
        for places in range(3):
            number = f"{n_bytes / scale:.{places}f}"
            if round(float(number) * scale) == n_bytes:
                return number + unit
    return f"{n_bytes}B" if n_bytes else "0"


def parse_tokens(text: str) -> int:
    """A token count: ``32768``, ``32k`` or ``128K`` (k = 1024, as context sizes go), at most
    ``MAX_TOKENS`` (16M)."""
    match = _TOKENS_RE.match(text.replace("_", ""))
    if match is None:
        raise BadValueError(f"not a token count: {shown(text)}", hint="e.g. 32768, 32k or 128K")
    number, k = match.groups()
    digits = number.lstrip("0")  # the bound before int(): Python refuses 4,300 digits and more
    if len(digits) > len(str(MAX_TOKENS)) or int(digits or 0) * (1024 if k else 1) > MAX_TOKENS:
        raise BadValueError(
            f"a token count must be at most {MAX_TOKENS} ({tokens_arg(MAX_TOKENS)}), "
            f"got {shown(text)}"
        )
    return int(number) * (1024 if k else 1)


class Workload(NamedTuple):
    """One request: a prompt of ``n_prompt`` tokens, then ``n_gen`` generated."""

    n_prompt: int
    n_gen: int


def parse_positive_tokens(text: str) -> int:
    """A token count of at least 1: ``4096`` or ``4k``."""
    tokens = parse_tokens(text)
    if tokens < 1:
        raise BadValueError(f"need at least 1 token, got {shown(text)}")
    return tokens


def parse_counts(text: str, most: int = MAX_TOKENS) -> tuple[int, ...]:
    """``512,2048``: counts from 1 to ``most`` (``2k`` = 2048), in the order given, once each."""
    found: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        count = parse_positive_tokens(part)
        if count > most:
            raise BadValueError(f"need counts from 1 to {most}, got {shown(part)}")
        found.append(count)
    if not found:
        raise BadValueError(f"need one or more counts, got {shown(text)}", hint="e.g. 512,2048")
    return tuple(dict.fromkeys(found))


def counts_option(option: str, text: str, most: int = MAX_TOKENS) -> tuple[int, ...]:
    """``parse_counts`` of an option's value; its error names the option."""
    try:
        return parse_counts(text, most)
    except BadValueError as exc:
        raise BadValueError(f"{option}: {exc.message}", hint=exc.hint) from None


def parse_workload(text: str) -> Workload:
    """``8k:512``: a prompt of 8192 tokens, then 512 generated (each a token count, at most
    ``MAX_TOKENS``; the plan holds the request to its context)."""
    prompt, sep, gen = text.partition(":")
    if not sep:
        raise BadValueError(f"not a workload: {shown(text)}", hint="PROMPT:GEN, e.g. 8k:512")
    found = Workload(parse_tokens(prompt.strip()), parse_tokens(gen.strip()))
    if found.n_gen <= 0:
        raise BadValueError(f"a workload generates at least one token: {shown(text)}")
    return found


def tokens_arg(n_tokens: int) -> str:
    """A token count as it is best typed: ``32k`` for 32768, else the number."""
    return f"{n_tokens // 1024}k" if n_tokens and n_tokens % 1024 == 0 else str(n_tokens)


def format_bytes(n_bytes: int | None, precision: int = 2) -> str:
    """Format bytes with a binary unit: ``17.48 GiB``, ``384.00 MiB``; ``?`` for unknown."""
    if n_bytes is None:
        return "?"
    sign = "-" if n_bytes < 0 else ""
    value = abs(n_bytes)
    for unit, scale in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if value >= scale:
            return f"{sign}{value / scale:.{precision}f} {unit}"
    return f"{sign}{value} B"


def format_mib(n_bytes: int) -> str:
    """Format as llama.cpp prints buffer sizes: MiB with two decimals."""
    return f"{n_bytes / MIB:.2f} MiB"


class Ctx(NamedTuple):
    """A ``--ctx`` value: a number of tokens, or the largest context that fits (``max``)."""

    tokens: int | None  # None: max

    @property
    def is_max(self) -> bool:
        return self.tokens is None


def parse_ctx(text: str) -> Ctx:
    """``32768``, ``32k``, ``128K`` or ``max``."""
    if text.strip().lower() == "max":
        return Ctx(None)
    tokens = parse_tokens(text)
    if tokens <= 0:
        raise BadValueError(f"context must be positive, got {shown(text)}")
    return Ctx(tokens)


# A measured speed: the median of repeated requests, with their range.
NOISY_SPREAD = 0.20


def spread(median: float | None, low: float | None, high: float | None) -> float | None:
    """The range of repeated measurements as a share of their median: ``(max - min) /
    median`` (None: a figure is missing, or the median is not above 0)."""
    if median is None or low is None or high is None or median <= 0:
        return None
    return (high - low) / median


def format_spread(share: float | None) -> str:
    """``4.2 %``; ``?`` when unknown."""
    return "?" if share is None else f"{share * 100:.1f} %"


def is_noisy(median: float | None, low: float | None, high: float | None) -> bool:
    """A spread (max - min) wider than ``NOISY_SPREAD`` (20 %) of the median."""
    share = spread(median, low, high)
    return share is not None and share > NOISY_SPREAD


def format_speed(
    median: float | None, low: float | None = None, high: float | None = None, repeats: int = 0
) -> str:
    """``41.5 tok/s (40.2-42.0 over 3, noisy)``; the median alone when there is no range."""
    if median is None:
        return "?"
    text = f"{median:.1f} tok/s"
    if low is None or high is None:
        return text
    over = f" over {repeats}" if repeats else ""
    noisy = ", noisy" if is_noisy(median, low, high) else ""
    return f"{text} ({low:.1f}-{high:.1f}{over}{noisy})"
