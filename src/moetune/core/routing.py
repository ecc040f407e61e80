"""How many of a block's routed experts a ubatch touches: what a prompt ubatch copies over the
host link (llama.cpp copies only the experts its tokens use) and what a device reads of its
own experts.

One token picks ``k`` of ``n`` experts, a share ``p = k/n``. ``U`` independent tokens of
uniform routing touch ``1 - (1 - p)^U`` of them in expectation. A router whose picks are
concentrated on some experts touches fewer: the share is written here as ``1 - (1 -
p)^(U^a)``, ``U^a`` tokens' worth of independent picks (``0 < a <= 1``). It is ``p`` for one
token, grows with ``U``, stays at most 1 and reaches it for large enough ``U``; ``a = 1`` is
uniform routing.

``a`` is a property of the model's router, not of ``k`` and ``n``: it is fitted for each
architecture that has public copy-all / copy-used pairs, the same llama-bench prompt run
with every expert on the CPU, once copying all of them per ubatch and once only the used ones
(llama.cpp PR 15346, ik_llama.cpp PR 698; benchmarks/data/public_sweeps/). Per ubatch, copy
all takes ``L + c U`` (the whole copy, then the compute), copy used ``s L + c U``, so ``s =
1 - (T_all - T_used) / L``. Fitted on them (tests/support/public_sweeps.py ``fit_routing``,
printed by scripts/speed-prior.py, refitted by a test):

- gpt-oss (20b and 120b, three pairs, two machines and two builds): ``a = 0.398``; its
  router leaves many experts rarely picked (gpt-oss-120b at ubatch 4096 copies 64 % of them);
- deepseek2 (DeepSeek-V2-Lite, 64 experts, 6 used): ``a = 0.952``, within the noise of
  uniform (copy used as fast as copy all from ubatch 512);
- any other architecture: uniform (``a = 1``). ik_llama.cpp PR 698's author measured no
  effect of copying only the used experts on Qwen3-30B-A3B and GLM-4.5-Air, "so it looks
  like having rarely activated experts is specific to GPT-OSS"
  (https://github.com/ikawrakow/ik_llama.cpp/pull/698, 2025-08-16).

llama-bench's prompt test feeds random tokens: what these pairs measure and what the
forecast is checked against; a real prompt's routing may be more concentrated still, which a
calibration on the user's machine absorbs.
"""

from __future__ import annotations

import math

# scripts/speed-prior.py prints this from benchmarks/data/public_sweeps/'s pairs
ROUTING_EXPONENT = {"deepseek2": 0.952, "gpt-oss": 0.398}


def routing_exponent(architecture: str) -> float:
    """The architecture's ``a`` (1.0: uniform routing, where no pair measured it)."""
    return ROUTING_EXPONENT.get(architecture, 1.0)


def touched_share(n_used: int, n_expert: int, n_tokens: int, exponent: float = 1.0) -> float:
    """The expected share of a block's routed experts ``n_tokens`` tokens touch."""
    if n_expert <= 0 or n_tokens <= 0:
        return 0.0
    return 1.0 - math.pow(1.0 - n_used / n_expert, math.pow(n_tokens, exponent))
