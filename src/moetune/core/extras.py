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

from collections.abc import Sequence
from dataclasses import replace
from pathlib import PurePath
from typing import TYPE_CHECKING

from moetune.core.flags import FlagRole, Pair, pairs, words
from moetune.core.hparams import scalar
from moetune.core.kvcache import parse_cache_type
from moetune.core.placement import ALL_LAYERS, CPU, EXPS_REGEX, Override
from moetune.errors import BadValueError, DraftModelError, ProjectorError
from moetune.gguf.reader import MetaValue
from moetune.record import record

if TYPE_CHECKING:
    from moetune.core.facts import ModelFacts
    from moetune.core.projector import ProjectorFacts

SPEC_TYPE_FLAG = "--spec-type"
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


@record(frozen=True)
class DraftRule:
    """One draft override, ``PATTERN=BUFT`` (``CPU``, ``CUDA0``, ``RPC0[host:port]``)."""

    pattern: str
    buft: str


@record(frozen=True)
class ExtrasFlags:
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


def _pairs(pass_through: Sequence[str]) -> list[Pair]:
    """``pass_through``'s pairs (the one tokenizer); BadValueError for a flag left without
    its value."""
    found = pairs(pass_through)
    for pair in found:
        if pair.missing:
            raise BadValueError(f"{pair.name} after -- needs a value")
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


def _projector_flag(pair: Pair, update: dict[str, object]) -> bool:
    """A projector flag's effect into ``update``; False when ``pair`` is not one."""
    value = pair.value
    if pair.is_("-mm") and value is not None:
        update["mmproj"] = value
    elif pair.is_("--mmproj-auto"):  # --no-mmproj: -hf brings no mmproj sibling
        update["mmproj_auto"] = pair.key == "--mmproj-auto"
    elif pair.is_("--mmproj-offload"):
        update["mmproj_offload"] = pair.key == "--mmproj-offload"
    elif pair.is_("-mmdev") and value is not None:
        none = value == "none"
        update["mmproj_offload"] = not none
        update["mmproj_device"] = None if none else value
    elif pair.is_("--image-min-tokens", "--image-max-tokens") and value is not None:
        update[pair.key.removeprefix("--").replace("-", "_")] = _int(pair.name, value)
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
    for pair in _pairs(pass_through):
        name, value = pair.name, pair.value
        if value is not None:
            values[pair.key] = value
        if _projector_flag(pair, update):
            continue
        if pair.is_("-md") and value is not None:
            update["draft"] = value
        elif pair.is_("-ngld") and value is not None:
            update["draft_n_gpu_layers"] = _ngl(value)
        elif pair.is_("-devd") and value is not None:
            names = tuple(n.strip() for n in value.split(",") if n.strip())
            update["draft_devices"] = () if names == ("none",) else names
        elif pair.is_("-otd") and value is not None:
            rules += _rules(name, value)
        elif pair.is_("-cmoed"):
            rules.append(DraftRule(EXPS_REGEX, "CPU"))
        elif pair.is_("-ncmoed") and value is not None:
            rules += [DraftRule(f"blk\\.{i}{EXPS_REGEX}", "CPU") for i in range(_int(name, value))]
        elif pair.is_("-ctkd", "-ctvd") and value is not None:
            update["draft_type_k" if pair.is_("-ctkd") else "draft_type_v"] = parse_cache_type(
                value
            )
        elif pair.is_(SPEC_TYPE_FLAG) and value is not None:
            types += _spec_types(value)
        elif pair.is_("--spec-default"):  # n-gram-mod, drafting up to 64 tokens
            types.append("ngram-mod")
            values["--spec-ngram-mod-n-max"] = "64"
        elif pair.is_("-dev") and value is not None:  # the projector follows the first one
            main_devices = [n.strip() for n in value.split(",") if n.strip()]
    if update.get("mmproj_offload", True) and "mmproj_device" not in update and main_devices:
        # common_params_parse: the projector follows the first -dev device (none: the CPU)
        none = main_devices[0] == "none"
        update["mmproj_offload"] = not none
        update["mmproj_device"] = None if none else main_devices[0]
    enabled = tuple(dict.fromkeys(t for t in types if t != "none"))
    return replace(
        parsed,
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

    return tuple(
        words(
            pair.with_value(str(Path(pair.values[0]).absolute()))
            if pair.flag is not None and pair.flag.file and pair.values
            else pair
            for pair in pairs(pass_through)
        )
    )


def without_extras_flags(args: Sequence[str]) -> list[str]:
    """``args`` as llama-fit-params takes them: without the projector's, the draft's and
    speculation's flags (it counts neither), nor any other it refuses (llama-server's own)."""
    return words(
        pair
        for pair in pairs(args)
        if pair.flag is None
        or (pair.flag.fit and pair.flag.role not in (FlagRole.PROJECTOR, FlagRole.DRAFT))
    )


def _flags(pass_through: Sequence[str]) -> set[str]:
    """The flags among ``pass_through`` as llama-server reads their names (values left out)."""
    return {pair.key for pair in pairs(pass_through)}


# --- the loaded companions (jobs/loader.py reads their files) --------------------------------


@record(frozen=True, eq=False)
class Projector:
    """A projector beside the model: its facts and where llama-server puts it."""

    facts: ProjectorFacts
    offload: bool = True
    device: str | None = None  # -mmdev NAME
    image_min_tokens: int | None = None
    image_max_tokens: int | None = None


@record(frozen=True, eq=False)
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


@record(frozen=True, eq=False)
class Extras:
    """Everything beside the main model that takes memory in the same llama-server; it
    travels beside the Settings (whose ``n_draft`` has the logits rows speculation adds)."""

    projector: Projector | None = None
    draft: Draft | None = None
    mtp: bool = False  # --spec-type draft-mtp: the model's own NextN blocks draft
    mtp_type_k: str = "f16"  # the MTP context's cache types: -ctkd/-ctvd
    mtp_type_v: str = "f16"

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


# --- llama.cpp's own checks of the files jobs/loader.py read ---------------------------------

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128  # common/speculative.cpp
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
TOKENS_KEY = "tokenizer.ggml.tokens"
# Vocabulary's fields and the metadata keys they come from, in the order llama.cpp checks them
_VOCABULARY_KEYS = {
    "model": "tokenizer.ggml.model",
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
}
VOCABULARY_KEYS = tuple(_VOCABULARY_KEYS.values())


@record(frozen=True)
class Vocabulary:
    """What llama.cpp compares between a draft and its target (read by jobs/loader.py): the
    tokenizer's model, BOS and EOS (absent keys: None), and the token texts."""

    name: str  # the file's name, for messages
    model: MetaValue | None
    bos: MetaValue | None
    eos: MetaValue | None
    tokens: Sequence[bytes] | None


def companions(
    args: ExtrasFlags,
    target: ModelFacts,
    *,
    projector: ProjectorFacts | None = None,
    draft: ModelFacts | None = None,
) -> Extras:
    """What runs beside ``target``, from its flags and the files jobs/loader.py read and
    checked (the projector's facts, the draft's), refused as llama.cpp refuses it."""
    found_projector = None
    if projector is not None:
        found_projector = Projector(
            projector,
            offload=args.mmproj_offload,
            device=args.mmproj_device,
            image_min_tokens=args.image_min_tokens,
            image_max_tokens=args.image_max_tokens,
        )
    found_draft = None
    if draft is not None and args.draft is not None:
        found_draft = Draft(
            draft,
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
        projector=found_projector,
        draft=found_draft,
        mtp=args.mtp,
        mtp_type_k=args.draft_type_k,
        mtp_type_v=args.draft_type_v,
    )


def text_embd_inp(target: ModelFacts) -> int:
    """llama_hparams::n_embd_inp: the width of the embeddings the model takes (deepstack
    models take the main one and one per deepstack layer side by side)."""
    n_embd = target.dims.n_embd
    return n_embd + n_embd * scalar(target.hparams, "n_deepstack_layers", 0)


def check_projector(facts: ProjectorFacts, target: ModelFacts) -> None:
    """mtmd_context: the projector's output width must be the text model's input width."""
    want = text_embd_inp(target)
    if facts.n_embd_out and want and facts.n_embd_out != want:
        raise ProjectorError(
            f"{_name(facts.path)} makes {facts.n_embd_out}-wide embeddings but "
            f"{_name(target.paths[0])} takes {want}: it is not this model's projector",
            hint="use the mmproj file published with this model",
        )


def check_vocabulary(draft: Vocabulary, target: Vocabulary) -> None:
    """common_speculative_are_compatible: the same tokenizer type, BOS/EOS and, from token 5
    on, the same token texts (sizes within 128)."""

    def refuse(why: str) -> DraftModelError:
        return DraftModelError(
            f"{draft.name} cannot draft for {target.name}: {why}",
            hint="a draft needs the target's vocabulary (a smaller model of the same family)",
        )

    for key in ("model", "bos", "eos"):
        mine, theirs = getattr(draft, key), getattr(target, key)
        if mine is not None and theirs is not None and mine != theirs:
            raise refuse(f"{_VOCABULARY_KEYS[key].rsplit('.', 1)[1]} {mine} vs {theirs}")

    tokens_d, tokens_t = draft.tokens, target.tokens
    if tokens_d is None or tokens_t is None:
        return
    if abs(len(tokens_d) - len(tokens_t)) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        raise refuse(f"a vocabulary of {len(tokens_d)} tokens vs {len(tokens_t)}")
    for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(len(tokens_d), len(tokens_t))):
        if tokens_d[i] != tokens_t[i]:
            raise refuse(f"token {i} is {_text(tokens_d[i])} vs {_text(tokens_t[i])}")


def _name(path: str | PurePath) -> str:
    return PurePath(path).name


def _text(token: bytes) -> str:
    return repr(token.decode("utf-8", errors="replace"))
