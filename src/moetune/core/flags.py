"""llama-server's arguments, declared once as build 11434 declares them (common/arg.cpp,
``common_arg({"-md", "--model-draft"}, "FNAME", ...)``): each flag's names (its negations
too), the hint of each value it takes, what it is to moetune, and whether llama-fit-params
takes it as well; and the one tokenizer that turns an argv into (flag, values) pairs by it.

How llama-server reads its argv (common_params_parse_ex): a word is looked up among every
name (``--`` names with ``_`` read as ``-``); a flag with a value hint takes the next word as
its value whatever it looks like (``--seed -1``, ``-ot -x=CPU``), one with two hints the next
two; an unknown word is an error; a repeated flag's last value wins (``--spec-type``
accumulates). It has no ``--flag=value`` form: ``--mmproj=x`` is an unknown argument there.
moetune's tokenizer reads ``NAME=VALUE`` for a flag that takes a value all the same (users
write it), keeps the form as written, and reads a word it does not know as a flag of its
own without a value (it goes through unchanged). A test holds the table to
``llama-server --help`` of the build the tests run, so that a new flag fails a test.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum
from typing import NamedTuple


class FlagRole(str, Enum):
    """What a flag is to moetune."""

    PLACEMENT = "placement"  # moetune sets it (the model file too): refused after --
    LAUNCH = "launch"  # launch sets it (port, log format): refused by launch
    MODEL = "model"  # names the model another way (-hf, -mu): a dry run names the file
    PROJECTOR = "projector"  # the multimodal projector (-mm, -mmdev, ...)
    DRAFT = "draft"  # speculative decoding: the draft model and its settings, -spec-*
    DEVICE = "device"  # chooses the devices (--rpc, -dev, -mg): before any -ot naming one
    PASS = "pass"  # passed through as it is


class Flag(NamedTuple):
    """One of llama-server's flags, as common/arg.cpp declares it."""

    names: tuple[str, ...]  # every spelling, the negations (--no-...) too
    value: str | None = None  # the hint of the value it takes; None: it takes none
    value_2: str | None = None  # a second value's hint (--control-vector-layer-range)
    role: FlagRole = FlagRole.PASS
    fit: bool = True  # llama-fit-params takes it too (False: llama-server's own)
    file: bool = False  # its value is a file of the projector or the draft
    # the key a router preset names it by (jobs/export.py: one of its names without dashes,
    # the long one moetune writes); None: a preset key as the argv spells it
    preset: str | None = None

    @property
    def n_values(self) -> int:
        return (self.value is not None) + (self.value_2 is not None)


# llama-server's arguments, build 11434, in common/arg.cpp's order
FLAGS: tuple[Flag, ...] = (
    Flag(("-h", "--help", "--usage")),
    Flag(("--version",)),
    Flag(("-cl", "--cache-list")),
    Flag(("--completion-bash",)),
    Flag(("-t", "--threads"), "N", preset="threads"),
    Flag(("-tb", "--threads-batch"), "N"),
    Flag(("-C", "--cpu-mask"), "M"),
    Flag(("-Cr", "--cpu-range"), "lo-hi"),
    Flag(("--cpu-strict",), "<0|1>"),
    Flag(("--prio",), "N"),
    Flag(("--poll",), "<0...100>"),
    Flag(("-Cb", "--cpu-mask-batch"), "M"),
    Flag(("-Crb", "--cpu-range-batch"), "lo-hi"),
    Flag(("--cpu-strict-batch",), "<0|1>"),
    Flag(("--prio-batch",), "N"),
    Flag(("--poll-batch",), "<0|1>"),
    Flag(("-lcs", "--lookup-cache-static"), "FNAME", fit=False),
    Flag(("-lcd", "--lookup-cache-dynamic"), "FNAME", fit=False),
    Flag(("-c", "--ctx-size"), "N", role=FlagRole.PLACEMENT, preset="ctx-size"),
    Flag(("--kv-unified-per-slot",), "N", fit=False),
    Flag(("-n", "--predict", "--n-predict"), "N"),
    Flag(("-b", "--batch-size"), "N", preset="batch-size"),
    Flag(("-ub", "--ubatch-size"), "N", preset="ubatch-size"),
    Flag(("--keep",), "N"),
    Flag(("--swa-full",)),
    Flag(("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), "N", fit=False),
    Flag(("-cms", "--checkpoint-min-step"), "N", fit=False),
    Flag(("-cram", "--cache-ram"), "N", fit=False),
    Flag(("-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"), fit=False),
    Flag(("--cache-idle-slots", "--no-cache-idle-slots"), fit=False),
    Flag(("--context-shift", "--no-context-shift"), fit=False),
    Flag(("-fa", "--flash-attn"), "[on|off|auto]", role=FlagRole.PLACEMENT, preset="flash-attn"),
    Flag(("--perf", "--no-perf")),
    Flag(("-e", "--escape", "--no-escape")),
    Flag(("-r", "--reverse-prompt"), "PROMPT", fit=False),
    Flag(("-sp", "--special"), fit=False),
    Flag(("--warmup", "--no-warmup"), fit=False),
    Flag(("--spm-infill",), fit=False),
    Flag(("--samplers",), "SAMPLERS"),
    Flag(("-s", "--seed"), "SEED"),
    Flag(("--sampler-seq", "--sampling-seq"), "SEQUENCE"),
    Flag(("--ignore-eos",)),
    Flag(("--temp", "--temperature"), "N"),
    Flag(("--top-k",), "N"),
    Flag(("--top-p",), "N"),
    Flag(("--min-p",), "N"),
    Flag(("--top-nsigma", "--top-n-sigma"), "N"),
    Flag(("--xtc-probability",), "N"),
    Flag(("--xtc-threshold",), "N"),
    Flag(("--typical", "--typical-p"), "N"),
    Flag(("--repeat-last-n",), "N"),
    Flag(("--repeat-penalty",), "N"),
    Flag(("--presence-penalty",), "N"),
    Flag(("--frequency-penalty",), "N"),
    Flag(("--dry-multiplier",), "N"),
    Flag(("--dry-base",), "N"),
    Flag(("--dry-allowed-length",), "N"),
    Flag(("--dry-penalty-last-n",), "N"),
    Flag(("--dry-sequence-breaker",), "STRING"),
    Flag(("--adaptive-target",), "N"),
    Flag(("--adaptive-decay",), "N"),
    Flag(("--dynatemp-range",), "N"),
    Flag(("--dynatemp-exp",), "N"),
    Flag(("--mirostat",), "N"),
    Flag(("--mirostat-lr",), "N"),
    Flag(("--mirostat-ent",), "N"),
    Flag(("-l", "--logit-bias"), "TOKEN_ID(+/-)BIAS"),
    Flag(("--grammar",), "GRAMMAR"),
    Flag(("--grammar-file",), "FNAME"),
    Flag(("-j", "--json-schema"), "SCHEMA"),
    Flag(("-jf", "--json-schema-file"), "FILE"),
    Flag(("-bs", "--backend-sampling")),
    Flag(("--pooling",), "{none,mean,cls,last,rank}", fit=False),
    Flag(("--rope-scaling",), "{none,linear,yarn}"),
    Flag(("--rope-scale",), "N"),
    Flag(("--rope-freq-base",), "N"),
    Flag(("--rope-freq-scale",), "N"),
    Flag(("--yarn-orig-ctx",), "N"),
    Flag(("--yarn-ext-factor",), "N"),
    Flag(("--yarn-attn-factor",), "N"),
    Flag(("--yarn-beta-slow",), "N"),
    Flag(("--yarn-beta-fast",), "N"),
    Flag(("-kvo", "--kv-offload", "-nkvo", "--no-kv-offload")),
    Flag(("--repack", "-nr", "--no-repack")),
    Flag(("--no-host",)),
    Flag(("-ctk", "--cache-type-k"), "TYPE", role=FlagRole.PLACEMENT, preset="cache-type-k"),
    Flag(("-ctv", "--cache-type-v"), "TYPE", role=FlagRole.PLACEMENT, preset="cache-type-v"),
    Flag(("-dt", "--defrag-thold"), "N"),
    Flag(("-np", "--parallel"), "N", role=FlagRole.PLACEMENT, preset="parallel"),
    Flag(("-cb", "--cont-batching", "-nocb", "--no-cont-batching"), fit=False),
    Flag(
        ("-mm", "--mmproj"), "FILE", role=FlagRole.PROJECTOR, fit=False, file=True, preset="mmproj"
    ),
    Flag(("-mmu", "--mmproj-url"), "URL", role=FlagRole.PROJECTOR, fit=False),
    Flag(("--mmproj-auto", "--no-mmproj", "--no-mmproj-auto"), role=FlagRole.PROJECTOR, fit=False),
    Flag(("--mmproj-offload", "--no-mmproj-offload"), role=FlagRole.PROJECTOR, fit=False),
    Flag(
        ("-mmdev", "--mmproj-device"),
        "DEVICE",
        role=FlagRole.PROJECTOR,
        fit=False,
        preset="mmproj-device",
    ),
    Flag(("--image-min-tokens",), "N", role=FlagRole.PROJECTOR, fit=False),
    Flag(("--image-max-tokens",), "N", role=FlagRole.PROJECTOR, fit=False),
    Flag(("--mtmd-batch-max-tokens",), "N", role=FlagRole.PROJECTOR, fit=False),
    Flag(("--video-fps",), "N", role=FlagRole.PROJECTOR, fit=False),
    Flag(("--video-timestamp-interval",), "N", role=FlagRole.PROJECTOR, fit=False),
    Flag(("--video-ffmpeg-dir",), "DIR", role=FlagRole.PROJECTOR, fit=False),
    Flag(("--rpc",), "SERVERS", role=FlagRole.DEVICE),
    Flag(("-lm", "--load-mode"), "MODE", preset="load-mode"),
    Flag(("-lzm", "--lazy-mode"), "MODE"),
    Flag(("--numa",), "TYPE"),
    Flag(("-dev", "--device"), "<dev1,dev2,..>", role=FlagRole.DEVICE, preset="device"),
    Flag(("--list-devices",)),
    Flag(
        ("-ot", "--override-tensor"),
        "<tensor name pattern>=<buffer type>,...",
        role=FlagRole.PLACEMENT,
        preset="override-tensor",
    ),
    Flag(("-cmoe", "--cpu-moe"), role=FlagRole.PLACEMENT, preset="cpu-moe"),
    Flag(("-ncmoe", "--n-cpu-moe"), "N", role=FlagRole.PLACEMENT, preset="n-cpu-moe"),
    Flag(("-ncffn", "--n-cpu-ffn"), "N"),
    Flag(
        ("-ngl", "--gpu-layers", "--n-gpu-layers"),
        "N",
        role=FlagRole.PLACEMENT,
        preset="n-gpu-layers",
    ),
    Flag(("-sm", "--split-mode"), "{none,layer,row,tensor}", preset="split-mode"),
    Flag(("-ts", "--tensor-split"), "N0,N1,N2,...", role=FlagRole.PLACEMENT, preset="tensor-split"),
    Flag(("-mg", "--main-gpu"), "INDEX", role=FlagRole.DEVICE, preset="main-gpu"),
    Flag(("-fit", "--fit"), "[on|off]", role=FlagRole.PLACEMENT, preset="fit"),
    Flag(("-fitt", "--fit-target"), "MiB0,MiB1,MiB2,..."),
    Flag(("-fitc", "--fit-ctx"), "N"),
    Flag(("--check-tensors",)),
    Flag(("--override-kv",), "KEY=TYPE:VALUE,..."),
    Flag(("--op-offload", "--no-op-offload")),
    Flag(("--lora",), "FNAME"),
    Flag(("--lora-scaled",), "FNAME:SCALE,..."),
    Flag(("--control-vector",), "FNAME"),
    Flag(("--control-vector-scaled",), "FNAME:SCALE,..."),
    Flag(("--control-vector-layer-range",), "START", "END"),
    Flag(("-a", "--alias"), "STRING", fit=False),
    Flag(("--tags",), "STRING", fit=False),
    Flag(("-m", "--model"), "FNAME", role=FlagRole.PLACEMENT, preset="model"),
    Flag(("-mu", "--model-url"), "MODEL_URL", role=FlagRole.MODEL, preset="model-url"),
    Flag(("-dr", "--docker-repo"), "[<repo>/]<model>[:quant]"),
    Flag(
        ("-hf", "-hfr", "--hf-repo"),
        "<user>/<model>[:quant]",
        role=FlagRole.MODEL,
        preset="hf-repo",
    ),
    Flag(("-hff", "--hf-file"), "FILE"),
    Flag(("-hft", "--hf-token"), "TOKEN"),
    Flag(("--embd-normalize",), "N", fit=False),
    Flag(("--host",), "HOST", role=FlagRole.LAUNCH, fit=False),
    Flag(("--port",), "PORT", role=FlagRole.LAUNCH, fit=False),
    Flag(("--reuse-port",), role=FlagRole.LAUNCH, fit=False),
    Flag(("--path",), "PATH", fit=False),
    Flag(("--cors-origins",), "ORIGINS", fit=False),
    Flag(("--cors-methods",), "METHODS", fit=False),
    Flag(("--cors-headers",), "HEADERS", fit=False),
    Flag(("--cors-credentials", "--no-cors-credentials"), fit=False),
    Flag(("--api-prefix",), "PREFIX", fit=False),
    Flag(("--ui-config", "--webui-config"), "JSON", fit=False),
    Flag(("--ui-config-file", "--webui-config-file"), "PATH", fit=False),
    Flag(
        ("--ui-mcp-proxy", "--webui-mcp-proxy", "--no-ui-mcp-proxy", "--no-webui-mcp-proxy"),
        fit=False,
    ),
    Flag(("--tools",), "TOOL1,TOOL2,...", fit=False),
    Flag(("--tools-runtime",), "OPTION", fit=False),
    Flag(("--mcp-servers-config",), "PATH", fit=False),
    Flag(("--mcp-servers-json",), "JSON", fit=False),
    Flag(("-ag", "--agent", "-no-ag", "--no-agent"), fit=False),
    Flag(("--ui", "--webui", "--no-ui", "--no-webui"), fit=False),
    Flag(("--embedding", "--embeddings"), fit=False),
    Flag(("--rerank", "--reranking"), fit=False),
    Flag(("--api-key",), "KEY", fit=False),
    Flag(("--api-key-file",), "FNAME", fit=False),
    Flag(("--ssl-key-file",), "FNAME", fit=False),
    Flag(("--ssl-cert-file",), "FNAME", fit=False),
    Flag(("--chat-template-kwargs",), "STRING", fit=False),
    Flag(("-to", "--timeout"), "N", fit=False),
    Flag(("--sse-ping-interval",), "N", fit=False),
    Flag(("--threads-http",), "N", fit=False),
    Flag(("--cache-prompt", "--no-cache-prompt"), fit=False),
    Flag(("--cache-reuse",), "N", fit=False),
    Flag(("--metrics",), fit=False),
    Flag(("--props",), fit=False),
    Flag(("--slots", "--no-slots"), fit=False),
    Flag(("--slot-save-path",), "PATH", fit=False),
    Flag(("--media-path",), "PATH", fit=False),
    Flag(("--models-dir",), "PATH", fit=False),
    Flag(("--models-preset",), "PATH", fit=False),
    Flag(("--models-max",), "N", fit=False),
    Flag(("--models-autoload", "--no-models-autoload"), fit=False),
    Flag(("--jinja", "--no-jinja"), fit=False),
    Flag(("--reasoning-format",), "FORMAT", fit=False),
    Flag(("-rea", "--reasoning"), "[on|off|auto]", fit=False),
    Flag(("--reasoning-effort",), "LEVEL", fit=False),
    Flag(("--reasoning-budget",), "N", fit=False),
    Flag(("--reasoning-budget-message",), "MESSAGE", fit=False),
    Flag(("--reasoning-preserve", "--no-reasoning-preserve"), fit=False),
    Flag(("--chat-template",), "JINJA_TEMPLATE", fit=False),
    Flag(("--chat-template-file",), "JINJA_TEMPLATE_FILE", fit=False),
    Flag(("--skip-chat-parsing", "--no-skip-chat-parsing"), fit=False),
    Flag(("--prefill-assistant", "--no-prefill-assistant"), fit=False),
    Flag(("-sps", "--slot-prompt-similarity"), "SIMILARITY", fit=False),
    Flag(("--lora-init-without-apply",), fit=False),
    Flag(("--sleep-idle-seconds",), "SECONDS", fit=False),
    Flag(("--log-disable",), role=FlagRole.LAUNCH),
    Flag(("--log-file",), "FNAME"),
    Flag(("--log-jsonl", "--no-log-jsonl"), role=FlagRole.LAUNCH),
    Flag(("--log-prompts-dir",), "PATH", fit=False),
    Flag(("--log-colors",), "[on|off|auto]"),
    Flag(("-v", "--verbose", "--log-verbose")),
    Flag(("--offline",)),
    Flag(("-lv", "--verbosity", "--log-verbosity"), "N"),
    Flag(("--log-prefix", "--no-log-prefix")),
    Flag(("--log-timestamps", "--no-log-timestamps")),
    Flag(
        ("--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft"),
        "<user>/<model>[:quant]",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    Flag(("--spec-draft-threads", "-td", "--threads-draft"), "N", role=FlagRole.DRAFT, fit=False),
    Flag(
        ("--spec-draft-threads-batch", "-tbd", "--threads-batch-draft"),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    Flag(("--spec-draft-cpu-mask", "-Cd", "--cpu-mask-draft"), "M", role=FlagRole.DRAFT, fit=False),
    Flag(
        ("--spec-draft-cpu-range", "-Crd", "--cpu-range-draft"),
        "lo-hi",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    Flag(
        ("--spec-draft-cpu-strict", "--cpu-strict-draft"),
        "<0|1>",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    Flag(("--spec-draft-prio", "--prio-draft"), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-draft-poll", "--poll-draft"), "<0|1>", role=FlagRole.DRAFT, fit=False),
    Flag(
        ("--spec-draft-cpu-mask-batch", "-Cbd", "--cpu-mask-batch-draft"),
        "M",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    Flag(
        ("--spec-draft-cpu-strict-batch", "--cpu-strict-batch-draft"),
        "<0|1>",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    Flag(("--spec-draft-prio-batch", "--prio-batch-draft"), "N", role=FlagRole.DRAFT, fit=False),
    Flag(
        ("--spec-draft-poll-batch", "--poll-batch-draft"),
        "<0|1>",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    Flag(
        ("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"),
        "TYPE",
        role=FlagRole.DRAFT,
        preset="spec-draft-type-k",
    ),
    Flag(
        ("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"),
        "TYPE",
        role=FlagRole.DRAFT,
        preset="spec-draft-type-v",
    ),
    Flag(
        ("--spec-draft-override-tensor", "-otd", "--override-tensor-draft"),
        "<tensor name pattern>=<buffer type>,...",
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-override-tensor",
    ),
    Flag(
        ("--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft"),
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-cpu-moe",
    ),
    Flag(
        ("--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncmoed", "--n-cpu-moe-draft"),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-n-cpu-moe",
    ),
    Flag(("--spec-draft-n-max",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-draft-n-min",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-synth-len",), "L", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-synth-rates",), "P0,P1,...", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-draft-p-split", "--draft-p-split"), "P", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-draft-p-min", "--draft-p-min"), "P", role=FlagRole.DRAFT, fit=False),
    Flag(
        ("--spec-draft-backend-sampling", "--no-spec-draft-backend-sampling"),
        role=FlagRole.DRAFT,
        fit=False,
    ),
    Flag(("--spec-draft-sampling",), "{greedy,probabilistic}", role=FlagRole.DRAFT, fit=False),
    Flag(
        ("--spec-draft-device", "-devd", "--device-draft"),
        "<dev1,dev2,..>",
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-device",
    ),
    Flag(
        ("--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-ngl",
    ),
    Flag(
        ("--spec-draft-model", "-md", "--model-draft"),
        "FNAME",
        role=FlagRole.DRAFT,
        fit=False,
        file=True,
        preset="model-draft",
    ),
    Flag(
        ("--spec-type",),
        "none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,"
        "ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    Flag(("--spec-ngram-mod-n-min",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-mod-n-max",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-mod-n-match",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-simple-size-n",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-simple-size-m",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-simple-min-hits",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-map-k-size-n",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-map-k-size-m",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-map-k-min-hits",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-map-k4v-size-n",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-map-k4v-size-m",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-map-k4v-min-hits",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--draft", "--draft-n", "--draft-max"), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--draft-min", "--draft-n-min"), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-size-n",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-size-m",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--spec-ngram-min-hits",), "N", role=FlagRole.DRAFT, fit=False),
    Flag(("--embd-gemma-default",), fit=False),
    Flag(("--fim-qwen-1.5b-default",), fit=False),
    Flag(("--fim-qwen-3b-default",), fit=False),
    Flag(("--fim-qwen-7b-default",), fit=False),
    Flag(("--fim-qwen-7b-spec",), fit=False),
    Flag(("--fim-qwen-14b-spec",), fit=False),
    Flag(("--fim-qwen-30b-default",), fit=False),
    Flag(("--gpt-oss-20b-default",), fit=False),
    Flag(("--gpt-oss-120b-default",), fit=False),
    Flag(("--vision-gemma-4b-default",), fit=False),
    Flag(("--vision-gemma-12b-default",), fit=False),
    Flag(("--spec-default",), role=FlagRole.DRAFT, fit=False),
)


def _index(flags: Iterable[Flag]) -> dict[str, Flag]:
    found: dict[str, Flag] = {}
    for entry in flags:
        for name in entry.names:
            found[name] = entry
    return found


BY_NAME = _index(FLAGS)


def lookup(name: str) -> Flag | None:
    """The flag ``name`` spells, as llama-server reads it (``--n_gpu_layers`` too)."""
    return BY_NAME.get(_spelled(name))


def _spelled(name: str) -> str:
    return name.replace("_", "-") if name.startswith("--") else name


def flag(name: str) -> Flag:
    """The flag ``name`` spells; KeyError when llama-server has none such."""
    found = lookup(name)
    if found is None:
        raise KeyError(name)
    return found


class Pair(NamedTuple):
    """A flag and its values as written; a word the table does not know is one of its own,
    with no values (``flag`` None)."""

    name: str  # the flag as written, without its "=VALUE"
    values: tuple[str, ...] = ()
    flag: Flag | None = None
    joined: bool = False  # written NAME=VALUE

    @property
    def key(self) -> str:
        """The name as llama-server reads it (``--n_gpu_layers`` is ``--n-gpu-layers``)."""
        return _spelled(self.name)

    @property
    def value(self) -> str | None:
        return self.values[0] if self.values else None

    @property
    def missing(self) -> bool:
        """A flag at the end of the argv without the value(s) it takes."""
        return self.flag is not None and len(self.values) < self.flag.n_values

    @property
    def role(self) -> FlagRole | None:
        return None if self.flag is None else self.flag.role

    def is_(self, *names: str) -> bool:
        """Whether this is the flag one of ``names`` spells (any of its spellings)."""
        if self.flag is None:
            return self.name in names
        return any(lookup(name) is self.flag for name in names)

    def words(self) -> tuple[str, ...]:
        """The words it was written as."""
        if self.joined:
            return (f"{self.name}={self.values[0]}", *self.values[1:])
        return (self.name, *self.values)

    def with_value(self, value: str) -> Pair:
        """The same flag, in the same form, with ``value`` for its (first) value."""
        return self._replace(values=(value, *self.values[1:]))


def pairs(argv: Sequence[str]) -> list[Pair]:
    """``argv`` as (flag, values) pairs in order, every occurrence of a repeated flag kept."""
    found: list[Pair] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        known = lookup(word)
        key, eq, inline = word.partition("=")
        joined = lookup(key) if eq and known is None else None
        if joined is not None and joined.n_values:
            rest = joined.n_values - 1
            found.append(Pair(key, (inline, *argv[i + 1 : i + 1 + rest]), joined, joined=True))
            i += 1 + rest
        elif known is not None:
            found.append(Pair(word, tuple(argv[i + 1 : i + 1 + known.n_values]), known))
            i += 1 + known.n_values
        else:
            found.append(Pair(word))
            i += 1
    return found


def words(found: Iterable[Pair]) -> list[str]:
    """The pairs back into an argv."""
    return [word for pair in found for word in pair.words()]
