"""What some option values mean, where the core owns the meaning: a K/V cache type, a speed
objective, the goal of ``--objective``/``--workload``. The command line reads them here (cli/
imports jobs/, never the core); a module of its own, loaded where such an option is given."""

from __future__ import annotations

import os
from collections.abc import Mapping

from moetune.core.goal import Goal, goal_of, parse_objective
from moetune.core.kvcache import parse_cache_type
from moetune.core.settings import OP_OFFLOAD_ENV
from moetune.errors import BadValueError

_INT_MAX = 2**31 - 1

__all__ = [
    "Goal",
    "check_weights",
    "goal_of",
    "op_offload_min_batch",
    "parse_cache_type",
    "parse_objective",
]


def op_offload_min_batch(
    given: int | None = None, environ: Mapping[str, str] | None = None
) -> int | None:
    """The op-offload threshold a llama-server of this job runs with: ``given`` (an option),
    else ``GGML_OP_OFFLOAD_MIN_BATCH`` from ``environ`` (this process's: llama-server would
    inherit it), else None (ggml's 32). A value that is not a whole number from 1 to 2^31-1 is
    refused (ggml would read it with atoi: 0 offloads every op, a generated token's too)."""
    if given is not None:
        if given < 1:
            raise BadValueError(f"--op-offload-min-batch {given}: give 1 or more tokens")
        return given
    text = (os.environ if environ is None else environ).get(OP_OFFLOAD_ENV)
    if text is None or not text.strip():
        return None
    # ASCII digits only (atoi reads "١٢" as 0), within the int ggml reads it into
    digits = text.strip().lstrip("0") if text.strip().isascii() else ""
    if not (digits.isdigit() and len(digits) <= len(str(_INT_MAX)) and int(digits) <= _INT_MAX):
        shown = repr(text[:40] + "...") if len(text) > 40 else repr(text)
        raise BadValueError(
            f"{OP_OFFLOAD_ENV}={shown} in the environment is not a whole number from 1 to "
            f"{_INT_MAX}",
            hint=f"unset it, or give the batch ops are offloaded from: {OP_OFFLOAD_ENV}=1024",
        )
    return int(digits)


def check_weights(text: str) -> str:
    """``--weights``: each a positive finite number (core/together.py reads them per model)."""
    from moetune.core.together import parse_weights

    parse_weights(text, len(text.split(",")))
    return text
