"""What runs beside the main model in the same llama-server: a multimodal projector
(``--mmproj``) and a draft model for speculative decoding (``-md``), read from llama-server's
own flags as build 11434 parses them (common/arg.cpp, common/speculative.cpp,
tools/server/server-context.cpp).

Projector: ``-mm/--mmproj FILE``; on a GPU unless ``--no-mmproj-offload`` or ``-mmdev none``;
the device is ``-mmdev NAME``, else the first ``-dev`` device, else the first GPU (clip's
``ggml_backend_init_by_type(GPU)``: CUDA before RPC, RPC when there is no CUDA).

Draft: ``-md/--spec-draft-model FILE`` is loaded with every buffer (weights, KV, compute)
even without a speculative type, but only ``--spec-type draft-simple`` uses it (and checks
its vocabulary against the target's). Its own flags: ``-ngld`` (default: every layer),
``-devd`` (default: the main devices), ``-otd``/``-cmoed``/``-ncmoed`` (its only tensor
overrides: the main ``-ot`` does not reach it), ``-ctkd``/``-ctvd`` (default f16: ``-ctk``
does not reach it). It inherits ``-ts``, ``-sm``, ``-c`` (its cache has the target's cells
and slots), ``-ub``/``-b`` and ``-fa``; its logits are reserved for ``n_parallel`` rows.

Speculation also widens the MAIN context's outputs: llama-server reserves logits for
``n_parallel * (1 + n_max)`` rows (server_output_limits), ``n_max`` being the most tokens any
enabled speculative type drafts (common_speculative_n_max: ``--spec-draft-n-max``, default 3,
for the draft types; the n-gram types' own sizes).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from pydantic_core import CoreSchema, core_schema

from moetune.core.placement import ALL_LAYERS, CPU, EXPS_REGEX, Override
from moetune.errors import BadValueError

if TYPE_CHECKING:
    from moetune.core.facts import ModelFacts
    from moetune.core.projector import ProjectorFacts
    from moetune.core.settings import Settings

MMPROJ_FLAGS = ("-mm", "--mmproj")
NO_MMPROJ_FLAGS = ("--no-mmproj", "--no-mmproj-auto")  # -hf brings no mmproj sibling
MMPROJ_OFFLOAD_FLAGS = ("--mmproj-offload", "--no-mmproj-offload")
MMPROJ_DEVICE_FLAGS = ("-mmdev", "--mmproj-device")
DRAFT_FLAGS = ("-md", "--spec-draft-model", "--model-draft")
DRAFT_NGL_FLAGS = ("-ngld", "--spec-draft-ngl", "--gpu-layers-draft", "--n-gpu-layers-draft")
DRAFT_DEVICE_FLAGS = ("-devd", "--spec-draft-device", "--device-draft")
DRAFT_OT_FLAGS = ("-otd", "--spec-draft-override-tensor", "--override-tensor-draft")
DRAFT_CMOE_FLAGS = ("-cmoed", "--spec-draft-cpu-moe", "--cpu-moe-draft")
DRAFT_NCMOE_FLAGS = ("-ncmoed", "--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "--n-cpu-moe-draft")
DRAFT_CTK_FLAGS = ("-ctkd", "--spec-draft-type-k", "--cache-type-k-draft")
DRAFT_CTV_FLAGS = ("-ctvd", "--spec-draft-type-v", "--cache-type-v-draft")
SPEC_TYPE_FLAG = "--spec-type"
MAIN_DEVICE_FLAGS = ("-dev", "--device")  # the projector follows the first one
DRAFT_TYPES = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
SPEC_TYPES = ("none", *DRAFT_TYPES, *NGRAM_TYPES)
# common/common.h defaults, and the flags that change them: the tokens each type drafts
_N_MAX_FLAGS = {
    "draft": ("--spec-draft-n-max", 3),
    "ngram-simple": ("--spec-ngram-simple-size-m", 48),
    "ngram-map-k": ("--spec-ngram-map-k-size-m", 48),
    "ngram-map-k4v": ("--spec-ngram-map-k4v-size-m", 48),
    "ngram-mod": ("--spec-ngram-mod-n-max", 64),
}
_NGRAM_CACHE_N_MAX = 8
# the flags above that take a value, as llama-server reads them
_VALUED = frozenset(
    {
        *MMPROJ_FLAGS,
        *MMPROJ_DEVICE_FLAGS,
        *DRAFT_FLAGS,
        *DRAFT_NGL_FLAGS,
        *DRAFT_DEVICE_FLAGS,
        *DRAFT_OT_FLAGS,
        *DRAFT_NCMOE_FLAGS,
        *DRAFT_CTK_FLAGS,
        *DRAFT_CTV_FLAGS,
        SPEC_TYPE_FLAG,
        *MAIN_DEVICE_FLAGS,
        "--image-min-tokens",
        "--image-max-tokens",
        *(flag for flag, _ in _N_MAX_FLAGS.values()),
    }
)


class DraftRule(NamedTuple):
    """One draft override, ``PATTERN=BUFT`` (``CPU``, ``CUDA0``, ``RPC0[host:port]``)."""

    pattern: str
    buft: str


class ExtrasFlags(NamedTuple):
    """The projector and draft flags among llama-server's arguments."""

    mmproj: str | None = None
    mmproj_auto: bool = True  # -hf: the repository's mmproj sibling comes along
    mmproj_offload: bool = True
    mmproj_device: str | None = None  # -mmdev NAME; None: the first -dev, else the first GPU
    image_min_tokens: int | None = None
    image_max_tokens: int | None = None
    draft: str | None = None
    draft_n_gpu_layers: int = ALL_LAYERS
    draft_devices: tuple[str, ...] | None = None  # -devd; () = none (the CPU)
    draft_rules: tuple[DraftRule, ...] = ()  # -otd, -cmoed, -ncmoed in their order
    draft_type_k: str = "f16"
    draft_type_v: str = "f16"
    spec_types: tuple[str, ...] = ()
    n_draft: int = 0  # the tokens speculation drafts per step (0: no speculative type)

    @property
    def any(self) -> bool:
        return self.mmproj is not None or self.draft is not None or self.n_draft > 0

    @property
    def mtp(self) -> bool:
        return "draft-mtp" in self.spec_types


def _pairs(pass_through: Sequence[str]) -> list[tuple[str, str | None]]:
    """(flag, value) in order; ``--flag=value`` and ``--flag value`` alike."""
    found: list[tuple[str, str | None]] = []
    i = 0
    while i < len(pass_through):
        arg = pass_through[i]
        key, eq, value = arg.partition("=")
        if eq and key in _VALUED:
            found.append((key, value))
        elif arg in _VALUED:
            if i + 1 >= len(pass_through):
                raise BadValueError(f"{arg} after -- needs a value")
            found.append((arg, pass_through[i + 1]))
            i += 1
        else:
            found.append((arg, None))
        i += 1
    return found


def _int(flag: str, value: str, minimum: int = 0) -> int:
    try:
        number = int(value)
    except ValueError:
        raise BadValueError(f"{flag} {value}: not a whole number") from None
    if number < minimum:
        raise BadValueError(f"{flag} {value}: must be at least {minimum}")
    return number


def _ngl(value: str) -> int:
    """``-ngld``: a count, ``auto`` or ``all`` (both: every layer; -1 too)."""
    if value in ("auto", "all"):
        return ALL_LAYERS
    number = _int("-ngld", value, minimum=-2)
    return ALL_LAYERS if number < 0 else number


def _rules(flag: str, value: str) -> list[DraftRule]:
    rules = []
    for part in value.split(","):
        pattern, eq, buft = part.partition("=")
        if not eq or not pattern or not buft:
            raise BadValueError(f"{flag} {value}: expected PATTERN=BUFFER_TYPE[,...]")
        rules.append(DraftRule(pattern, buft))
    return rules


def _spec_types(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    for name in names:
        if name not in SPEC_TYPES:
            raise BadValueError(f"--spec-type {name}: unknown", hint=f"use {', '.join(SPEC_TYPES)}")
    return names


def n_max(spec_types: Sequence[str], values: dict[str, str]) -> int:
    """common_speculative_n_max: the most tokens any enabled type drafts (0: none)."""
    found = 0
    for name in spec_types:
        if name == "ngram-cache":
            found = max(found, _NGRAM_CACHE_N_MAX)
            continue
        key = "draft" if name in DRAFT_TYPES else name
        if key not in _N_MAX_FLAGS:
            continue
        flag, default = _N_MAX_FLAGS[key]
        found = max(found, _int(flag, values[flag]) if flag in values else default)
    return found


def _projector_flag(flag: str, value: str | None, update: dict[str, object]) -> bool:
    """A projector flag's effect into ``update``; False when ``flag`` is not one."""
    if flag in MMPROJ_FLAGS and value is not None:
        update["mmproj"] = value
    elif flag in NO_MMPROJ_FLAGS or flag == "--mmproj-auto":
        update["mmproj_auto"] = flag == "--mmproj-auto"
    elif flag in MMPROJ_OFFLOAD_FLAGS:
        update["mmproj_offload"] = flag == "--mmproj-offload"
    elif flag in MMPROJ_DEVICE_FLAGS and value is not None:
        none = value == "none"
        update["mmproj_offload"] = not none
        update["mmproj_device"] = None if none else value
    elif flag in ("--image-min-tokens", "--image-max-tokens") and value is not None:
        update[flag.removeprefix("--").replace("-", "_")] = _int(flag, value)
    else:
        return False
    return True


def parse_extras_flags(pass_through: Sequence[str]) -> ExtrasFlags:
    """The projector and draft flags among llama-server's arguments (the last one of a flag
    wins, as in llama.cpp; rules and speculative types accumulate)."""
    parsed = ExtrasFlags()
    values: dict[str, str] = {}
    rules: list[DraftRule] = []
    types: list[str] = []
    main_devices: list[str] = []
    update: dict[str, object] = {}
    for flag, value in _pairs(pass_through):
        if value is not None:
            values[flag] = value
        if _projector_flag(flag, value, update):
            continue
        if flag in DRAFT_FLAGS and value is not None:
            update["draft"] = value
        elif flag in DRAFT_NGL_FLAGS and value is not None:
            update["draft_n_gpu_layers"] = _ngl(value)
        elif flag in DRAFT_DEVICE_FLAGS and value is not None:
            names = tuple(n.strip() for n in value.split(",") if n.strip())
            update["draft_devices"] = () if names == ("none",) else names
        elif flag in DRAFT_OT_FLAGS and value is not None:
            rules += _rules(flag, value)
        elif flag in DRAFT_CMOE_FLAGS:
            rules.append(DraftRule(EXPS_REGEX, "CPU"))
        elif flag in DRAFT_NCMOE_FLAGS and value is not None:
            rules += [DraftRule(f"blk\\.{i}{EXPS_REGEX}", "CPU") for i in range(_int(flag, value))]
        elif flag in (*DRAFT_CTK_FLAGS, *DRAFT_CTV_FLAGS) and value is not None:
            from moetune.core.kvcache import parse_cache_type  # kvcache imports settings

            update["draft_type_k" if flag in DRAFT_CTK_FLAGS else "draft_type_v"] = (
                parse_cache_type(value)
            )
        elif flag == SPEC_TYPE_FLAG and value is not None:
            types += _spec_types(value)
        elif flag == "--spec-default":  # n-gram-mod, drafting up to 64 tokens
            types.append("ngram-mod")
            values["--spec-ngram-mod-n-max"] = "64"
        elif flag in MAIN_DEVICE_FLAGS and value is not None:
            main_devices = [n.strip() for n in value.split(",") if n.strip()]
    if update.get("mmproj_offload", True) and "mmproj_device" not in update and main_devices:
        # common_params_parse: the projector follows the first -dev device (none: the CPU)
        none = main_devices[0] == "none"
        update["mmproj_offload"] = not none
        update["mmproj_device"] = None if none else main_devices[0]
    enabled = tuple(dict.fromkeys(t for t in types if t != "none"))
    return parsed._replace(
        **update,  # type: ignore[arg-type]
        draft_rules=tuple(rules),
        spec_types=enabled,
        n_draft=n_max(enabled, values),
    )


def with_draft(pass_through: Sequence[str], draft: str) -> tuple[str, ...]:
    """``--draft FILE``: ``-md FILE``, and ``--spec-type draft-simple`` unless a speculative
    type is given (without one llama-server loads the draft but never uses it)."""
    speculation = () if SPEC_TYPE_FLAG in _flags(pass_through) else (SPEC_TYPE_FLAG, "draft-simple")
    return ("-md", draft, *speculation, *pass_through)


def with_mmproj(pass_through: Sequence[str], mmproj: str) -> tuple[str, ...]:
    """``--mmproj FILE`` given to moetune: the same flag for llama-server."""
    return ("--mmproj", mmproj, *pass_through)


def add_extras_flags(
    pass_through: Sequence[str], *, mmproj: str | None = None, draft: str | None = None
) -> tuple[str, ...]:
    """llama-server's arguments with moetune's ``--mmproj``/``--draft`` turned into its own."""
    found = tuple(pass_through)
    if draft is not None:
        found = with_draft(found, draft)
    if mmproj is not None:
        found = with_mmproj(found, mmproj)
    return found


def absolute_files(pass_through: Sequence[str]) -> tuple[str, ...]:
    """``pass_through`` with the projector's and the draft's files made absolute (a saved command,
    and the aliases made from it, then run from any folder)."""
    from pathlib import Path

    files = frozenset({*MMPROJ_FLAGS, *DRAFT_FLAGS})
    found: list[str] = []
    for index, arg in enumerate(pass_through):
        key, eq, value = arg.partition("=")
        if eq and key in files:
            found.append(f"{key}={Path(value).absolute()}")
        elif index and pass_through[index - 1] in files:
            found.append(str(Path(arg).absolute()))
        else:
            found.append(arg)
    return tuple(found)


def with_extras(
    settings: Settings,
    target: ModelFacts,
    pass_through: Sequence[str],
    *,
    sibling: ProjectorFacts | None = None,
) -> Settings:
    """``settings`` with what ``pass_through`` loads beside ``target`` (its files read and checked;
    ``sibling``: the mmproj ``-hf`` brings); unchanged when it loads nothing."""
    extras = load_extras(parse_extras_flags(pass_through), target, sibling=sibling)
    return settings if extras is None else settings.model_copy(update={"extras": extras})


# what only a projector or a draft uses: flags llama-fit-params refuses (it counts neither)
_BARE_EXTRAS_FLAGS = frozenset(
    {
        *MMPROJ_OFFLOAD_FLAGS,
        *DRAFT_CMOE_FLAGS,
        "--spec-default",
        "--spec-draft-backend-sampling",
        *NO_MMPROJ_FLAGS,
        "--mmproj-auto",
    }
)
_VALUED_EXTRAS_FLAGS = frozenset(
    {
        *(_VALUED - set(MAIN_DEVICE_FLAGS)),
        "-hfd",
        "-hfrd",
        "-td",
        "-tbd",
        "-Cd",
        "-Crd",
        "-Cbd",
        "-Crbd",
        "--draft",
        "--draft-n",
        "--draft-max",
        "--draft-min",
        "--draft-n-min",
    }
)


def without_extras_flags(args: Sequence[str]) -> list[str]:
    """``args`` without the projector's, the draft's and speculation's flags (and values)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        key, eq, _ = arg.partition("=")
        if key in _BARE_EXTRAS_FLAGS:
            continue
        if key in _VALUED_EXTRAS_FLAGS or key.startswith("--spec-"):
            skip = not eq
            continue
        kept.append(arg)
    return kept


def _flags(pass_through: Sequence[str]) -> set[str]:
    return {arg.split("=", 1)[0] for arg in pass_through}


# --- the loaded companions (the files read) ----------------------------------------------------


@dataclass(frozen=True, eq=False)
class Projector:
    """A projector beside the model: its facts and where llama-server puts it."""

    facts: ProjectorFacts
    offload: bool = True
    device: str | None = None  # -mmdev NAME
    image_min_tokens: int | None = None
    image_max_tokens: int | None = None


@dataclass(frozen=True, eq=False)
class Draft:
    """A draft model beside the model, with its own placement flags and cache types."""

    facts: ModelFacts
    path: str
    n_gpu_layers: int = ALL_LAYERS
    devices: tuple[str, ...] | None = None
    rules: tuple[DraftRule, ...] = ()
    type_k: str = "f16"
    type_v: str = "f16"

    def overrides(self, bufts: Sequence[str]) -> tuple[Override, ...]:
        """The rules as overrides onto the draft's devices (``bufts``: their buffer types)."""
        found = []
        for rule in self.rules:
            if rule.buft.upper().startswith("CPU"):
                found.append(Override(rule.pattern, CPU))
            elif rule.buft in bufts:
                found.append(Override(rule.pattern, bufts.index(rule.buft)))
            else:
                raise BadValueError(
                    f"-otd {rule.pattern}={rule.buft}: no such buffer type "
                    "among the draft's devices",
                    hint="its devices' buffer types: " + ", ".join(("CPU", *bufts)),
                )
        return tuple(found)


@dataclass(frozen=True, eq=False)
class Extras:
    """Everything beside the main model that takes memory in the same llama-server, and the
    logits rows speculation adds to the main context (``n_draft`` tokens per step)."""

    projector: Projector | None = None
    draft: Draft | None = None
    n_draft: int = 0
    mtp: bool = False  # --spec-type draft-mtp: the model's own NextN blocks draft
    mtp_type_k: str = "f16"  # the MTP context's cache types: -ctkd/-ctvd
    mtp_type_v: str = "f16"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: object) -> CoreSchema:
        """Inside Settings: taken as it is (files already read), never validated or dumped."""
        return core_schema.is_instance_schema(cls)

    @property
    def flags(self) -> str:
        """A short description for a profile's key: which files, how placed."""
        parts = []
        if self.projector is not None:
            parts.append(f"mmproj={self.projector.facts.path}")
        if self.draft is not None:
            parts.append(f"draft={self.draft.path}")
        if self.mtp:
            parts.append("mtp")
        return ";".join(parts)


# --- reading the files, and llama.cpp's own checks ---------------------------------------------

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128  # common/speculative.cpp
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
_TOKENS = "tokenizer.ggml.tokens"


def load_extras(
    args: ExtrasFlags, target: ModelFacts, *, sibling: ProjectorFacts | None = None
) -> Extras | None:
    """Read the projector's and the draft's headers and check them against the target as
    llama.cpp would: the projector's embedding width (mtmd.cpp), the draft's vocabulary
    (common_speculative_are_compatible). ``sibling``: the mmproj a model named on the hub
    brings along (``-hf``), unless ``--no-mmproj`` or an ``--mmproj`` of its own. None when
    there is nothing beside the model."""
    sibling = sibling if args.mmproj_auto and args.mmproj is None else None
    if not args.any and sibling is None:
        return None
    projector = None
    if args.mmproj is not None or sibling is not None:
        from pathlib import Path

        from moetune.core.projector import load_projector

        facts = sibling if sibling is not None else load_projector(Path(str(args.mmproj)))
        check_projector(facts, target)
        projector = Projector(
            facts,
            offload=args.mmproj_offload,
            device=args.mmproj_device,
            image_min_tokens=args.image_min_tokens,
            image_max_tokens=args.image_max_tokens,
        )
    draft = None
    if args.draft is not None:
        from moetune.core.facts import load_model_facts

        draft_facts = load_model_facts(args.draft)
        check_vocabulary(draft_facts, target)
        draft = Draft(
            draft_facts,
            args.draft,
            n_gpu_layers=args.draft_n_gpu_layers,
            devices=args.draft_devices,
            rules=args.draft_rules,
            type_k=args.draft_type_k,
            type_v=args.draft_type_v,
        )
    if args.mtp and args.draft is not None:
        raise BadValueError(
            "--spec-type draft-mtp with -md (an MTP context on a separate "
            "draft file) is not modelled",
            hint="use draft-mtp on a model that carries its NextN layers, or "
            "-md with --spec-type draft-simple",
        )
    if args.mtp and not target.n_nextn_layers:
        raise BadValueError(
            f"--spec-type draft-mtp: {_name(target.paths[0])} has no NextN/MTP "
            "layers to draft with",
            hint="leave draft-mtp out, or use a model that ships them (GLM-4.5, Qwen3.5/3.6-MoE)",
        )
    return Extras(
        projector=projector,
        draft=draft,
        n_draft=args.n_draft,
        mtp=args.mtp,
        mtp_type_k=args.draft_type_k,
        mtp_type_v=args.draft_type_v,
    )


def text_embd_inp(target: ModelFacts) -> int:
    """llama_hparams::n_embd_inp: the width of the embeddings the model takes (deepstack
    models take the main one and one per deepstack layer side by side)."""
    from moetune.core.hparams import scalar

    n_embd = target.dims.n_embd
    return n_embd + n_embd * scalar(target.hparams, "n_deepstack_layers", 0)


def check_projector(facts: ProjectorFacts, target: ModelFacts) -> None:
    """mtmd_context: the projector's output width must be the text model's input width."""
    from moetune.errors import ProjectorError

    want = text_embd_inp(target)
    if facts.n_embd_out and want and facts.n_embd_out != want:
        raise ProjectorError(
            f"{_name(facts.path)} makes {facts.n_embd_out}-wide embeddings but "
            f"{_name(target.paths[0])} takes {want}: it is not this model's projector",
            hint="use the mmproj file published with this model",
        )


def check_vocabulary(draft: ModelFacts, target: ModelFacts) -> None:
    """common_speculative_are_compatible: the same tokenizer type, BOS/EOS and, from token 5
    on, the same token texts (sizes within 128)."""
    from moetune.errors import DraftModelError

    def refuse(why: str) -> DraftModelError:
        return DraftModelError(
            f"{_name(draft.paths[0])} cannot draft for {_name(target.paths[0])}: {why}",
            hint="a draft needs the target's vocabulary (a smaller model of the same family)",
        )

    from moetune.gguf.reader import read_header, read_string_array

    mine, theirs = read_header(draft.paths[0]).metadata, read_header(target.paths[0]).metadata
    for key in (
        "tokenizer.ggml.model",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
    ):
        if key in mine and key in theirs and mine[key] != theirs[key]:
            raise refuse(f"{key.rsplit('.', 1)[1]} {mine[key]} vs {theirs[key]}")

    tokens_d, tokens_t = (
        read_string_array(draft.paths[0], _TOKENS),
        read_string_array(target.paths[0], _TOKENS),
    )
    if tokens_d is None or tokens_t is None:
        return
    if abs(len(tokens_d) - len(tokens_t)) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        raise refuse(f"a vocabulary of {len(tokens_d)} tokens vs {len(tokens_t)}")
    for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(len(tokens_d), len(tokens_t))):
        if tokens_d[i] != tokens_t[i]:
            raise refuse(f"token {i} is {_text(tokens_d[i])} vs {_text(tokens_t[i])}")


def _name(path: str | os.PathLike[str]) -> str:
    from pathlib import Path

    return Path(path).name


def _text(token: bytes) -> str:
    return repr(token.decode("utf-8", errors="replace"))
