"""What some option values mean, where the core owns the meaning: a K/V cache type, a speed
objective, the goal of ``--objective``/``--workload``. The command line reads them here (cli/
imports jobs/, never the core); a module of its own, loaded where such an option is given."""

from __future__ import annotations

from moetune.core.goal import Goal, goal_of, parse_objective
from moetune.core.kvcache import parse_cache_type

__all__ = ["Goal", "goal_of", "parse_cache_type", "parse_objective"]
