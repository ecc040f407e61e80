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


class ServerFlag(NamedTuple):
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
FLAGS: tuple[ServerFlag, ...] = (
    ServerFlag(("-h", "--help", "--usage")),
    ServerFlag(("--version",)),
    ServerFlag(("-cl", "--cache-list")),
    ServerFlag(("--completion-bash",)),
    ServerFlag(("-t", "--threads"), "N", preset="threads"),
    ServerFlag(("-tb", "--threads-batch"), "N"),
    ServerFlag(("-C", "--cpu-mask"), "M"),
    ServerFlag(("-Cr", "--cpu-range"), "lo-hi"),
    ServerFlag(("--cpu-strict",), "<0|1>"),
    ServerFlag(("--prio",), "N"),
    ServerFlag(("--poll",), "<0...100>"),
    ServerFlag(("-Cb", "--cpu-mask-batch"), "M"),
    ServerFlag(("-Crb", "--cpu-range-batch"), "lo-hi"),
    ServerFlag(("--cpu-strict-batch",), "<0|1>"),
    ServerFlag(("--prio-batch",), "N"),
    ServerFlag(("--poll-batch",), "<0|1>"),
    ServerFlag(("-lcs", "--lookup-cache-static"), "FNAME", fit=False),
    ServerFlag(("-lcd", "--lookup-cache-dynamic"), "FNAME", fit=False),
    ServerFlag(("-c", "--ctx-size"), "N", role=FlagRole.PLACEMENT, preset="ctx-size"),
    ServerFlag(("--kv-unified-per-slot",), "N", fit=False),
    ServerFlag(("-n", "--predict", "--n-predict"), "N"),
    ServerFlag(("-b", "--batch-size"), "N", preset="batch-size"),
    ServerFlag(("-ub", "--ubatch-size"), "N", preset="ubatch-size"),
    ServerFlag(("--keep",), "N"),
    ServerFlag(("--swa-full",)),
    ServerFlag(("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), "N", fit=False),
    ServerFlag(("-cms", "--checkpoint-min-step"), "N", fit=False),
    ServerFlag(("-cram", "--cache-ram"), "N", fit=False),
    ServerFlag(("-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"), fit=False),
    ServerFlag(("--cache-idle-slots", "--no-cache-idle-slots"), fit=False),
    ServerFlag(("--context-shift", "--no-context-shift"), fit=False),
    ServerFlag(
        ("-fa", "--flash-attn"), "[on|off|auto]", role=FlagRole.PLACEMENT, preset="flash-attn"
    ),
    ServerFlag(("--perf", "--no-perf")),
    ServerFlag(("-e", "--escape", "--no-escape")),
    ServerFlag(("-r", "--reverse-prompt"), "PROMPT", fit=False),
    ServerFlag(("-sp", "--special"), fit=False),
    ServerFlag(("--warmup", "--no-warmup"), fit=False),
    ServerFlag(("--spm-infill",), fit=False),
    ServerFlag(("--samplers",), "SAMPLERS"),
    ServerFlag(("-s", "--seed"), "SEED"),
    ServerFlag(("--sampler-seq", "--sampling-seq"), "SEQUENCE"),
    ServerFlag(("--ignore-eos",)),
    ServerFlag(("--temp", "--temperature"), "N"),
    ServerFlag(("--top-k",), "N"),
    ServerFlag(("--top-p",), "N"),
    ServerFlag(("--min-p",), "N"),
    ServerFlag(("--top-nsigma", "--top-n-sigma"), "N"),
    ServerFlag(("--xtc-probability",), "N"),
    ServerFlag(("--xtc-threshold",), "N"),
    ServerFlag(("--typical", "--typical-p"), "N"),
    ServerFlag(("--repeat-last-n",), "N"),
    ServerFlag(("--repeat-penalty",), "N"),
    ServerFlag(("--presence-penalty",), "N"),
    ServerFlag(("--frequency-penalty",), "N"),
    ServerFlag(("--dry-multiplier",), "N"),
    ServerFlag(("--dry-base",), "N"),
    ServerFlag(("--dry-allowed-length",), "N"),
    ServerFlag(("--dry-penalty-last-n",), "N"),
    ServerFlag(("--dry-sequence-breaker",), "STRING"),
    ServerFlag(("--adaptive-target",), "N"),
    ServerFlag(("--adaptive-decay",), "N"),
    ServerFlag(("--dynatemp-range",), "N"),
    ServerFlag(("--dynatemp-exp",), "N"),
    ServerFlag(("--mirostat",), "N"),
    ServerFlag(("--mirostat-lr",), "N"),
    ServerFlag(("--mirostat-ent",), "N"),
    ServerFlag(("-l", "--logit-bias"), "TOKEN_ID(+/-)BIAS"),
    ServerFlag(("--grammar",), "GRAMMAR"),
    ServerFlag(("--grammar-file",), "FNAME"),
    ServerFlag(("-j", "--json-schema"), "SCHEMA"),
    ServerFlag(("-jf", "--json-schema-file"), "FILE"),
    ServerFlag(("-bs", "--backend-sampling")),
    ServerFlag(("--pooling",), "{none,mean,cls,last,rank}", fit=False),
    ServerFlag(("--rope-scaling",), "{none,linear,yarn}"),
    ServerFlag(("--rope-scale",), "N"),
    ServerFlag(("--rope-freq-base",), "N"),
    ServerFlag(("--rope-freq-scale",), "N"),
    ServerFlag(("--yarn-orig-ctx",), "N"),
    ServerFlag(("--yarn-ext-factor",), "N"),
    ServerFlag(("--yarn-attn-factor",), "N"),
    ServerFlag(("--yarn-beta-slow",), "N"),
    ServerFlag(("--yarn-beta-fast",), "N"),
    ServerFlag(("-kvo", "--kv-offload", "-nkvo", "--no-kv-offload")),
    ServerFlag(("--repack", "-nr", "--no-repack")),
    ServerFlag(("--no-host",)),
    ServerFlag(("-ctk", "--cache-type-k"), "TYPE", role=FlagRole.PLACEMENT, preset="cache-type-k"),
    ServerFlag(("-ctv", "--cache-type-v"), "TYPE", role=FlagRole.PLACEMENT, preset="cache-type-v"),
    ServerFlag(("-dt", "--defrag-thold"), "N"),
    ServerFlag(("-np", "--parallel"), "N", role=FlagRole.PLACEMENT, preset="parallel"),
    ServerFlag(("-cb", "--cont-batching", "-nocb", "--no-cont-batching"), fit=False),
    ServerFlag(
        ("-mm", "--mmproj"), "FILE", role=FlagRole.PROJECTOR, fit=False, file=True, preset="mmproj"
    ),
    ServerFlag(("-mmu", "--mmproj-url"), "URL", role=FlagRole.PROJECTOR, fit=False),
    ServerFlag(
        ("--mmproj-auto", "--no-mmproj", "--no-mmproj-auto"), role=FlagRole.PROJECTOR, fit=False
    ),
    ServerFlag(("--mmproj-offload", "--no-mmproj-offload"), role=FlagRole.PROJECTOR, fit=False),
    ServerFlag(
        ("-mmdev", "--mmproj-device"),
        "DEVICE",
        role=FlagRole.PROJECTOR,
        fit=False,
        preset="mmproj-device",
    ),
    ServerFlag(("--image-min-tokens",), "N", role=FlagRole.PROJECTOR, fit=False),
    ServerFlag(("--image-max-tokens",), "N", role=FlagRole.PROJECTOR, fit=False),
    ServerFlag(("--mtmd-batch-max-tokens",), "N", role=FlagRole.PROJECTOR, fit=False),
    ServerFlag(("--video-fps",), "N", role=FlagRole.PROJECTOR, fit=False),
    ServerFlag(("--video-timestamp-interval",), "N", role=FlagRole.PROJECTOR, fit=False),
    ServerFlag(("--video-ffmpeg-dir",), "DIR", role=FlagRole.PROJECTOR, fit=False),
    ServerFlag(("--rpc",), "SERVERS", role=FlagRole.DEVICE),
    ServerFlag(("-lm", "--load-mode"), "MODE", preset="load-mode"),
    ServerFlag(("-lzm", "--lazy-mode"), "MODE"),
    ServerFlag(("--numa",), "TYPE"),
    ServerFlag(("-dev", "--device"), "<dev1,dev2,..>", role=FlagRole.DEVICE, preset="device"),
    ServerFlag(("--list-devices",)),
    ServerFlag(
        ("-ot", "--override-tensor"),
        "<tensor name pattern>=<buffer type>,...",
        role=FlagRole.PLACEMENT,
        preset="override-tensor",
    ),
    ServerFlag(("-cmoe", "--cpu-moe"), role=FlagRole.PLACEMENT, preset="cpu-moe"),
    ServerFlag(("-ncmoe", "--n-cpu-moe"), "N", role=FlagRole.PLACEMENT, preset="n-cpu-moe"),
    ServerFlag(("-ncffn", "--n-cpu-ffn"), "N"),
    ServerFlag(
        ("-ngl", "--gpu-layers", "--n-gpu-layers"),
        "N",
        role=FlagRole.PLACEMENT,
        preset="n-gpu-layers",
    ),
    ServerFlag(("-sm", "--split-mode"), "{none,layer,row,tensor}", preset="split-mode"),
    ServerFlag(
        ("-ts", "--tensor-split"), "N0,N1,N2,...", role=FlagRole.PLACEMENT, preset="tensor-split"
    ),
    ServerFlag(("-mg", "--main-gpu"), "INDEX", role=FlagRole.DEVICE, preset="main-gpu"),
    ServerFlag(("-fit", "--fit"), "[on|off]", role=FlagRole.PLACEMENT, preset="fit"),
    ServerFlag(("-fitt", "--fit-target"), "MiB0,MiB1,MiB2,..."),
    ServerFlag(("-fitc", "--fit-ctx"), "N"),
    ServerFlag(("--check-tensors",)),
    ServerFlag(("--override-kv",), "KEY=TYPE:VALUE,..."),
    ServerFlag(("--op-offload", "--no-op-offload")),
    ServerFlag(("--lora",), "FNAME"),
    ServerFlag(("--lora-scaled",), "FNAME:SCALE,..."),
    ServerFlag(("--control-vector",), "FNAME"),
    ServerFlag(("--control-vector-scaled",), "FNAME:SCALE,..."),
    ServerFlag(("--control-vector-layer-range",), "START", "END"),
    ServerFlag(("-a", "--alias"), "STRING", fit=False),
    ServerFlag(("--tags",), "STRING", fit=False),
    ServerFlag(("-m", "--model"), "FNAME", role=FlagRole.PLACEMENT, preset="model"),
    ServerFlag(("-mu", "--model-url"), "MODEL_URL", role=FlagRole.MODEL, preset="model-url"),
    ServerFlag(("-dr", "--docker-repo"), "[<repo>/]<model>[:quant]"),
    ServerFlag(
        ("-hf", "-hfr", "--hf-repo"),
        "<user>/<model>[:quant]",
        role=FlagRole.MODEL,
        preset="hf-repo",
    ),
    ServerFlag(("-hff", "--hf-file"), "FILE"),
    ServerFlag(("-hft", "--hf-token"), "TOKEN"),
    ServerFlag(("--embd-normalize",), "N", fit=False),
    ServerFlag(("--host",), "HOST", role=FlagRole.LAUNCH, fit=False),
    ServerFlag(("--port",), "PORT", role=FlagRole.LAUNCH, fit=False),
    ServerFlag(("--reuse-port",), role=FlagRole.LAUNCH, fit=False),
    ServerFlag(("--path",), "PATH", fit=False),
    ServerFlag(("--cors-origins",), "ORIGINS", fit=False),
    ServerFlag(("--cors-methods",), "METHODS", fit=False),
    ServerFlag(("--cors-headers",), "HEADERS", fit=False),
    ServerFlag(("--cors-credentials", "--no-cors-credentials"), fit=False),
    ServerFlag(("--api-prefix",), "PREFIX", fit=False),
    ServerFlag(("--ui-config", "--webui-config"), "JSON", fit=False),
    ServerFlag(("--ui-config-file", "--webui-config-file"), "PATH", fit=False),
    ServerFlag(
        ("--ui-mcp-proxy", "--webui-mcp-proxy", "--no-ui-mcp-proxy", "--no-webui-mcp-proxy"),
        fit=False,
    ),
    ServerFlag(("--tools",), "TOOL1,TOOL2,...", fit=False),
    ServerFlag(("--tools-runtime",), "OPTION", fit=False),
    ServerFlag(("--mcp-servers-config",), "PATH", fit=False),
    ServerFlag(("--mcp-servers-json",), "JSON", fit=False),
    ServerFlag(("-ag", "--agent", "-no-ag", "--no-agent"), fit=False),
    ServerFlag(("--ui", "--webui", "--no-ui", "--no-webui"), fit=False),
    ServerFlag(("--embedding", "--embeddings"), fit=False),
    ServerFlag(("--rerank", "--reranking"), fit=False),
    ServerFlag(("--api-key",), "KEY", fit=False),
    ServerFlag(("--api-key-file",), "FNAME", fit=False),
    ServerFlag(("--ssl-key-file",), "FNAME", fit=False),
    ServerFlag(("--ssl-cert-file",), "FNAME", fit=False),
    ServerFlag(("--chat-template-kwargs",), "STRING", fit=False),
    ServerFlag(("-to", "--timeout"), "N", fit=False),
    ServerFlag(("--sse-ping-interval",), "N", fit=False),
    ServerFlag(("--threads-http",), "N", fit=False),
    ServerFlag(("--cache-prompt", "--no-cache-prompt"), fit=False),
    ServerFlag(("--cache-reuse",), "N", fit=False),
    ServerFlag(("--metrics",), fit=False),
    ServerFlag(("--props",), fit=False),
    ServerFlag(("--slots", "--no-slots"), fit=False),
    ServerFlag(("--slot-save-path",), "PATH", fit=False),
    ServerFlag(("--media-path",), "PATH", fit=False),
    ServerFlag(("--models-dir",), "PATH", fit=False),
    ServerFlag(("--models-preset",), "PATH", fit=False),
    ServerFlag(("--models-max",), "N", fit=False),
    ServerFlag(("--models-autoload", "--no-models-autoload"), fit=False),
    ServerFlag(("--jinja", "--no-jinja"), fit=False),
    ServerFlag(("--reasoning-format",), "FORMAT", fit=False),
    ServerFlag(("-rea", "--reasoning"), "[on|off|auto]", fit=False),
    ServerFlag(("--reasoning-effort",), "LEVEL", fit=False),
    ServerFlag(("--reasoning-budget",), "N", fit=False),
    ServerFlag(("--reasoning-budget-message",), "MESSAGE", fit=False),
    ServerFlag(("--reasoning-preserve", "--no-reasoning-preserve"), fit=False),
    ServerFlag(("--chat-template",), "JINJA_TEMPLATE", fit=False),
    ServerFlag(("--chat-template-file",), "JINJA_TEMPLATE_FILE", fit=False),
    ServerFlag(("--skip-chat-parsing", "--no-skip-chat-parsing"), fit=False),
    ServerFlag(("--prefill-assistant", "--no-prefill-assistant"), fit=False),
    ServerFlag(("-sps", "--slot-prompt-similarity"), "SIMILARITY", fit=False),
    ServerFlag(("--lora-init-without-apply",), fit=False),
    ServerFlag(("--sleep-idle-seconds",), "SECONDS", fit=False),
    ServerFlag(("--log-disable",), role=FlagRole.LAUNCH),
    ServerFlag(("--log-file",), "FNAME"),
    ServerFlag(("--log-jsonl", "--no-log-jsonl"), role=FlagRole.LAUNCH),
    ServerFlag(("--log-prompts-dir",), "PATH", fit=False),
    ServerFlag(("--log-colors",), "[on|off|auto]"),
    ServerFlag(("-v", "--verbose", "--log-verbose")),
    ServerFlag(("--offline",)),
    ServerFlag(("-lv", "--verbosity", "--log-verbosity"), "N"),
    ServerFlag(("--log-prefix", "--no-log-prefix")),
    ServerFlag(("--log-timestamps", "--no-log-timestamps")),
    ServerFlag(
        ("--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft"),
        "<user>/<model>[:quant]",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    ServerFlag(
        ("--spec-draft-threads", "-td", "--threads-draft"), "N", role=FlagRole.DRAFT, fit=False
    ),
    ServerFlag(
        ("--spec-draft-threads-batch", "-tbd", "--threads-batch-draft"),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    ServerFlag(
        ("--spec-draft-cpu-mask", "-Cd", "--cpu-mask-draft"), "M", role=FlagRole.DRAFT, fit=False
    ),
    ServerFlag(
        ("--spec-draft-cpu-range", "-Crd", "--cpu-range-draft"),
        "lo-hi",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    ServerFlag(
        ("--spec-draft-cpu-strict", "--cpu-strict-draft"),
        "<0|1>",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    ServerFlag(("--spec-draft-prio", "--prio-draft"), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-draft-poll", "--poll-draft"), "<0|1>", role=FlagRole.DRAFT, fit=False),
    ServerFlag(
        ("--spec-draft-cpu-mask-batch", "-Cbd", "--cpu-mask-batch-draft"),
        "M",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    ServerFlag(
        ("--spec-draft-cpu-strict-batch", "--cpu-strict-batch-draft"),
        "<0|1>",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    ServerFlag(
        ("--spec-draft-prio-batch", "--prio-batch-draft"), "N", role=FlagRole.DRAFT, fit=False
    ),
    ServerFlag(
        ("--spec-draft-poll-batch", "--poll-batch-draft"),
        "<0|1>",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    ServerFlag(
        ("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"),
        "TYPE",
        role=FlagRole.DRAFT,
        preset="spec-draft-type-k",
    ),
    ServerFlag(
        ("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"),
        "TYPE",
        role=FlagRole.DRAFT,
        preset="spec-draft-type-v",
    ),
    ServerFlag(
        ("--spec-draft-override-tensor", "-otd", "--override-tensor-draft"),
        "<tensor name pattern>=<buffer type>,...",
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-override-tensor",
    ),
    ServerFlag(
        ("--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft"),
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-cpu-moe",
    ),
    ServerFlag(
        ("--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncmoed", "--n-cpu-moe-draft"),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-n-cpu-moe",
    ),
    ServerFlag(("--spec-draft-n-max",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-draft-n-min",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-synth-len",), "L", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-synth-rates",), "P0,P1,...", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-draft-p-split", "--draft-p-split"), "P", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-draft-p-min", "--draft-p-min"), "P", role=FlagRole.DRAFT, fit=False),
    ServerFlag(
        ("--spec-draft-backend-sampling", "--no-spec-draft-backend-sampling"),
        role=FlagRole.DRAFT,
        fit=False,
    ),
    ServerFlag(
        ("--spec-draft-sampling",), "{greedy,probabilistic}", role=FlagRole.DRAFT, fit=False
    ),
    ServerFlag(
        ("--spec-draft-device", "-devd", "--device-draft"),
        "<dev1,dev2,..>",
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-device",
    ),
    ServerFlag(
        ("--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-ngl",
    ),
    ServerFlag(
        ("--spec-draft-model", "-md", "--model-draft"),
        "FNAME",
        role=FlagRole.DRAFT,
        fit=False,
        file=True,
        preset="model-draft",
    ),
    ServerFlag(
        ("--spec-type",),
        "none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,"
        "ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache",
        role=FlagRole.DRAFT,
        fit=False,
    ),
    ServerFlag(("--spec-ngram-mod-n-min",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-mod-n-max",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-mod-n-match",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-simple-size-n",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-simple-size-m",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-simple-min-hits",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-map-k-size-n",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-map-k-size-m",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-map-k-min-hits",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-map-k4v-size-n",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-map-k4v-size-m",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-map-k4v-min-hits",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--draft", "--draft-n", "--draft-max"), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--draft-min", "--draft-n-min"), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-size-n",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-size-m",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--spec-ngram-min-hits",), "N", role=FlagRole.DRAFT, fit=False),
    ServerFlag(("--embd-gemma-default",), fit=False),
    ServerFlag(("--fim-qwen-1.5b-default",), fit=False),
    ServerFlag(("--fim-qwen-3b-default",), fit=False),
    ServerFlag(("--fim-qwen-7b-default",), fit=False),
    ServerFlag(("--fim-qwen-7b-spec",), fit=False),
    ServerFlag(("--fim-qwen-14b-spec",), fit=False),
    ServerFlag(("--fim-qwen-30b-default",), fit=False),
    ServerFlag(("--gpt-oss-20b-default",), fit=False),
    ServerFlag(("--gpt-oss-120b-default",), fit=False),
    ServerFlag(("--vision-gemma-4b-default",), fit=False),
    ServerFlag(("--vision-gemma-12b-default",), fit=False),
    ServerFlag(("--spec-default",), role=FlagRole.DRAFT, fit=False),
)


def _index(flags: Iterable[ServerFlag]) -> dict[str, ServerFlag]:
    found: dict[str, ServerFlag] = {}
    for entry in flags:
        for name in entry.names:
            found[name] = entry
    return found


BY_NAME = _index(FLAGS)


def lookup(name: str) -> ServerFlag | None:
    """The flag ``name`` spells, as llama-server reads it (``--n_gpu_layers`` too)."""
    return BY_NAME.get(_spelled(name))


def _spelled(name: str) -> str:
    return name.replace("_", "-") if name.startswith("--") else name


def flag(name: str) -> ServerFlag:
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
    flag: ServerFlag | None = None
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
