"""Shell functions for dotfiles that start a tuned llama-server (bash, zsh, fish).

A function rather than an ``alias``: it quotes each argument once (regexes of ``-ot`` rules,
paths with spaces) and passes the caller's own arguments through (``qwen --port 8081``).
The snippet is text, never printed here; ``alias_for_model`` finds what it runs: the model's
tuned profile, else moetune's plan for it (a warning through ``warn`` says so).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from moetune.errors import BadValueError
from moetune.jobs.quoting import fish_quote, sh_quote, visible
from moetune.store.tuned import ProfileStore, TunedProfile, retune_command
from moetune.units import format_bytes, format_speed

if TYPE_CHECKING:
    from moetune.core.plan import PlanResult
    from moetune.jobs.pick import Pick

Shell = Literal["bash", "zsh", "fish"]
SHELLS: tuple[Shell, ...] = ("bash", "zsh", "fish")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
# Words a function must not be called (shell keywords and builtins people rely on).
_RESERVED = frozenset(
    {
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "case",
        "esac",
        "for",
        "while",
        "until",
        "do",
        "done",
        "in",
        "function",
        "select",
        "time",
        "coproc",
        "end",
        "begin",
        "switch",
        "not",
        "and",
        "or",
        "return",
        "exit",
        "set",
        "cd",
        "test",
        "alias",
        "source",
        "builtin",
        "command",
        "eval",
        "exec",
        "export",
        "unset",
    }
)


def check_name(name: str) -> str:
    """``name`` if it can be a function name in every shell; BadValueError otherwise."""
    if not _NAME_RE.match(name) or name in _RESERVED:
        raise BadValueError(
            f"not a usable alias name: {name!r}",
            hint="use letters, digits, _ and -, starting with a letter, e.g. qwen or qwen30b",
        )
    return name


def shell_from_path(path: str | None) -> Shell:
    """The shell named by ``$SHELL`` (``/usr/bin/zsh`` -> zsh), else bash."""
    base = (path or "").rsplit("/", 1)[-1]
    for shell in SHELLS:
        if base == shell:
            return shell
    return "bash"


def parse_shell(text: str) -> Shell:
    """``bash``, ``zsh`` or ``fish``; BadValueError otherwise."""
    for shell in SHELLS:
        if text.strip().lower() == shell:
            return shell
    raise BadValueError(f"unknown shell {text!r}", hint="use bash, zsh or fish")


def _comments(name: str, profile: TunedProfile) -> list[str]:
    m, s = profile.measured, profile.settings
    placement = f"--n-cpu-moe {profile.placement.n_cpu_moe or 0}"
    if profile.placement.override_tensor:
        placement = "-ot " + ",".join(profile.placement.override_tensor)
    speed = ""
    if m.decode_tps is not None:
        speed = ", decode " + format_speed(
            m.decode_tps, m.decode_tps_min, m.decode_tps_max, m.repeats
        )
    return [
        f"# moetune: {profile.model.file_name} on {profile.describe_devices()}, llama.cpp "
        f"{profile.llama_cpp.describe()}",
        f"# tuned {profile.tuned_at}: {placement}, ctx {s.n_ctx} {s.type_k}/{s.type_v}, "
        f"peak {format_bytes(m.vram_bytes)}{speed}",
        f"# after a new GPU, model file or llama.cpp: {shlex.join(retune_command(profile))}, "
        f"then moetune alias {name} again",
    ]


def predicted_comments(
    name: str, plan: PlanResult, gpu_source: str, run_args: Sequence[str] = ()
) -> list[str]:
    """The comments above an alias made from a plan: predicted, not measured; each device's
    peak and budget where there are several; the run (with ``run_args``: the options it was
    picked by) that tunes it."""
    rec = plan.first  # the command a plan prints first
    placement = (
        f"--n-cpu-moe {rec.n_cpu_moe}" if rec.n_cpu_moe is not None else f"-ngl {rec.n_gpu_layers}"
    )
    if rec.override_tensor:
        placement = "-ot " + ",".join(rec.override_tensor)
    s = plan.settings
    if plan.device_names:
        peaks = zip(rec.memory.devices, plan.device_budgets, strict=True)
        memory = "predicted peaks " + ", ".join(
            f"{d.name} {format_bytes(d.total_bytes)} of {format_bytes(b)}" for d, b in peaks
        )
        devices = f"devices {gpu_source}"
    else:
        memory = (
            f"predicted peak {format_bytes(rec.memory.gpu_bytes)} of a "
            f"{format_bytes(plan.budget_bytes)} budget"
        )
        devices = f"GPU {gpu_source}"
    run = shlex.join(["moetune", "run", rec.command[2], *run_args])
    return [
        f"# moetune: PREDICTED (no tuned profile): {placement}, ctx {s.n_ctx} "
        f"{s.type_k}/{s.type_v}, {memory}, {devices}",
        f"# measure it: {run}, then moetune alias {name} again",
    ]


def render_function(
    name: str,
    argv: Sequence[str],
    shell: Shell,
    comments: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> str:
    """A function ``name`` that runs ``argv`` plus its own arguments, for ``shell``, with
    ``env``'s variables set for it alone (bash/zsh: ``NAME=VALUE llama-server ...``; fish:
    ``env NAME=VALUE llama-server ...``)."""
    check_name(name)
    if not argv:
        raise BadValueError("nothing to run: the profile has no command")
    head = ["# " + visible(" ".join(line.lstrip("# ").split())) for line in comments]
    quote = fish_quote if shell == "fish" else sh_quote
    try:
        words = " ".join(quote(word) for word in argv)
        assigned = [f"{key}={quote(value)}" for key, value in (env or {}).items()]
    except BadValueError as exc:
        raise BadValueError(f"cannot write the alias {name}: {exc}") from None
    if assigned:
        words = " ".join([*(["env"] if shell == "fish" else []), *assigned, words])
    if shell == "fish":
        body = [
            f"function {name} --description 'llama-server tuned by moetune'",
            f"    {words} $argv",
            "end",
        ]
    else:
        body = [f"{name}() {{", f'    {words} "$@"', "}"]
    return "\n".join([*head, *body]) + "\n"


def alias_text(name: str, profile: TunedProfile, shell: Shell) -> str:
    """The dotfile snippet that starts the tuned server of ``profile`` as ``name``."""
    return render_function(
        name, profile.command, shell, _comments(name, profile), env=profile_env(profile)
    )


def profile_env(profile: TunedProfile) -> dict[str, str]:
    """The variables a tuned profile's command runs with (the op-offload threshold)."""
    from moetune.core.settings import OP_OFFLOAD_ENV

    found = profile.settings.op_offload_min_batch
    return {} if found is None else {OP_OFFLOAD_ENV: str(found)}


def alias_for_model(
    name: str,
    model: str,
    shell: Shell,
    pick: Pick,
    *,
    mmproj: Path | None,
    draft: Path | None,
    require_tuned: bool,
    warn: Callable[[str], None],
) -> str:
    """The alias ``name`` of ``model``: the profile ``pick`` chooses, tuned with the
    ``mmproj``/``draft`` files beside it, else (unless ``require_tuned``) moetune's plan for
    the devices of ``pick`` (default: detected)."""
    from moetune.core.extras import add_extras_flags
    from moetune.errors import DoesNotFitError
    from moetune.jobs.launch import check_loadable
    from moetune.jobs.models import open_model
    from moetune.jobs.pick import fallback_plan, run_args, tuned_profile
    from moetune.llamacpp.process import server_for_commands

    beside = [
        (flag, str(path.absolute()))
        for flag, path in (("--mmproj", mmproj), ("--draft", draft))
        if path is not None
    ]
    named = open_model(model)
    check_loadable(named.facts, "an alias", "alias")  # run refuses it: nothing was tuned
    found = tuned_profile(
        ProfileStore(), named, pick, beside, require_tuned=require_tuned, warn=warn
    )
    if isinstance(found, TunedProfile):
        return alias_text(name, found, shell)
    named = named.absolute()  # the printed command runs from any folder
    pass_through = add_extras_flags(
        (), mmproj=str(mmproj) if mmproj else None, draft=str(draft) if draft else None
    )
    plan, source = fallback_plan(named, pick, found, pass_through)
    if not plan.fits:
        raise DoesNotFitError(f"does not fit: {plan.reason}")
    argv = [server_for_commands(), *plan.first.command[1:]]
    warn(
        f"{found.message}: the alias runs moetune's plan (predicted, not measured); "
        "`moetune run` tunes it"
    )
    comments = predicted_comments(name, plan, source, run_args(pick))
    return render_function(name, argv, shell, comments, env=plan.first.env)
