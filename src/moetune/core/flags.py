"""llama-server's arguments, declared once as build 11434 declares them (common/arg.cpp,
``common_arg({"-md", "--model-draft"}, "FNAME", ...)``): each flag's names (its negations
too), the hint of each value it takes, what it is to moetune, whether llama-fit-params
takes it as well, and the environment variable llama.cpp reads it from (``moving_env``: those a
launch leaves out); and the one tokenizer that turns an argv into (flag, values) pairs by it.

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

import functools
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


_ENV_PREFIX = "LLAMA_ARG_"
# --rpc's variable: llama-server reads it as --rpc, and so does moetune's --rpc (cli/options.py),
# so that the devices a shell names for llama-server are the ones moetune plans for
RPC_ENV = "LLAMA_ARG_RPC"
_ENV_NEGATED = "LLAMA_ARG_NO_"


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
    # the environment variable llama.cpp reads it from (``.set_env(...)``; ``--help`` prints
    # it as ``(env: ...)``), mostly LLAMA_ARG_*; None: it has none
    env: str | None = None
    # a PASS flag that changes memory or speed (-b/-ub, -t, -kvo, -sm, ...): its variable is
    # left out of llama.cpp's environment like those of every other role (``moving_env``)
    moves: bool = False

    @property
    def n_values(self) -> int:
        return (self.value is not None) + (self.value_2 is not None)

    @property
    def env_names(self) -> tuple[str, ...]:
        """Every variable llama.cpp reads this flag from (common_arg::get_env): ``env``, and
        for a flag with negations its ``LLAMA_ARG_NO_`` twin, which means the negation."""
        if self.env is None:
            return ()
        negated = not self.names[0].startswith("--no-") and any(
            name.startswith(("--no-", "-no-")) for name in self.names
        )
        if negated and self.env.startswith(_ENV_PREFIX):
            return (self.env, _ENV_NEGATED + self.env.removeprefix(_ENV_PREFIX))
        return (self.env,)


# llama-server's arguments, build 11434, in common/arg.cpp's order
FLAGS: tuple[ServerFlag, ...] = (
    ServerFlag(("-h", "--help", "--usage")),
    ServerFlag(("--version",)),
    ServerFlag(("-cl", "--cache-list")),
    ServerFlag(("--completion-bash",)),
    ServerFlag(("-t", "--threads"), "N", preset="threads", env="LLAMA_ARG_THREADS", moves=True),
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
    ServerFlag(
        ("-c", "--ctx-size"),
        "N",
        role=FlagRole.PLACEMENT,
        preset="ctx-size",
        env="LLAMA_ARG_CTX_SIZE",
    ),
    ServerFlag(
        ("--kv-unified-per-slot",), "N", fit=False, env="LLAMA_ARG_KV_UNIFIED_PER_SLOT", moves=True
    ),
    ServerFlag(("-n", "--predict", "--n-predict"), "N", env="LLAMA_ARG_N_PREDICT"),
    ServerFlag(("-b", "--batch-size"), "N", preset="batch-size", env="LLAMA_ARG_BATCH", moves=True),
    ServerFlag(
        ("-ub", "--ubatch-size"), "N", preset="ubatch-size", env="LLAMA_ARG_UBATCH", moves=True
    ),
    ServerFlag(("--keep",), "N"),
    ServerFlag(("--swa-full",), env="LLAMA_ARG_SWA_FULL", moves=True),
    ServerFlag(
        ("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"),
        "N",
        fit=False,
        env="LLAMA_ARG_CTX_CHECKPOINTS",
    ),
    ServerFlag(
        ("-cms", "--checkpoint-min-step"), "N", fit=False, env="LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT"
    ),
    ServerFlag(("-cram", "--cache-ram"), "N", fit=False, env="LLAMA_ARG_CACHE_RAM"),
    ServerFlag(
        ("-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"),
        fit=False,
        env="LLAMA_ARG_KV_UNIFIED",
        moves=True,
    ),
    ServerFlag(
        ("--cache-idle-slots", "--no-cache-idle-slots"), fit=False, env="LLAMA_ARG_CACHE_IDLE_SLOTS"
    ),
    ServerFlag(("--context-shift", "--no-context-shift"), fit=False, env="LLAMA_ARG_CONTEXT_SHIFT"),
    ServerFlag(
        ("-fa", "--flash-attn"),
        "[on|off|auto]",
        role=FlagRole.PLACEMENT,
        preset="flash-attn",
        env="LLAMA_ARG_FLASH_ATTN",
    ),
    ServerFlag(("--perf", "--no-perf"), env="LLAMA_ARG_PERF"),
    ServerFlag(("-e", "--escape", "--no-escape")),
    ServerFlag(("-r", "--reverse-prompt"), "PROMPT", fit=False),
    ServerFlag(("-sp", "--special"), fit=False),
    ServerFlag(("--warmup", "--no-warmup"), fit=False),
    ServerFlag(("--spm-infill",), fit=False),
    ServerFlag(("--samplers",), "SAMPLERS"),
    ServerFlag(("-s", "--seed"), "SEED"),
    ServerFlag(("--sampler-seq", "--sampling-seq"), "SEQUENCE"),
    ServerFlag(("--ignore-eos",)),
    ServerFlag(("--temp", "--temperature"), "N", env="LLAMA_ARG_TEMPERATURE"),
    ServerFlag(("--top-k",), "N", env="LLAMA_ARG_TOP_K"),
    ServerFlag(("--top-p",), "N", env="LLAMA_ARG_TOP_P"),
    ServerFlag(("--min-p",), "N", env="LLAMA_ARG_MIN_P"),
    ServerFlag(("--top-nsigma", "--top-n-sigma"), "N"),
    ServerFlag(("--xtc-probability",), "N"),
    ServerFlag(("--xtc-threshold",), "N"),
    ServerFlag(("--typical", "--typical-p"), "N"),
    ServerFlag(("--repeat-last-n",), "N"),
    ServerFlag(("--repeat-penalty",), "N", env="LLAMA_ARG_REPEAT_PENALTY"),
    ServerFlag(("--presence-penalty",), "N", env="LLAMA_ARG_PRESENCE_PENALTY"),
    ServerFlag(("--frequency-penalty",), "N", env="LLAMA_ARG_FREQUENCY_PENALTY"),
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
    ServerFlag(("-bs", "--backend-sampling"), env="LLAMA_ARG_BACKEND_SAMPLING", moves=True),
    ServerFlag(("--pooling",), "{none,mean,cls,last,rank}", fit=False, env="LLAMA_ARG_POOLING"),
    ServerFlag(("--rope-scaling",), "{none,linear,yarn}", env="LLAMA_ARG_ROPE_SCALING_TYPE"),
    ServerFlag(("--rope-scale",), "N", env="LLAMA_ARG_ROPE_SCALE"),
    ServerFlag(("--rope-freq-base",), "N", env="LLAMA_ARG_ROPE_FREQ_BASE"),
    ServerFlag(("--rope-freq-scale",), "N", env="LLAMA_ARG_ROPE_FREQ_SCALE"),
    ServerFlag(("--yarn-orig-ctx",), "N", env="LLAMA_ARG_YARN_ORIG_CTX"),
    ServerFlag(("--yarn-ext-factor",), "N", env="LLAMA_ARG_YARN_EXT_FACTOR"),
    ServerFlag(("--yarn-attn-factor",), "N", env="LLAMA_ARG_YARN_ATTN_FACTOR"),
    ServerFlag(("--yarn-beta-slow",), "N", env="LLAMA_ARG_YARN_BETA_SLOW"),
    ServerFlag(("--yarn-beta-fast",), "N", env="LLAMA_ARG_YARN_BETA_FAST"),
    ServerFlag(
        ("-kvo", "--kv-offload", "-nkvo", "--no-kv-offload"), env="LLAMA_ARG_KV_OFFLOAD", moves=True
    ),
    ServerFlag(("--repack", "-nr", "--no-repack"), env="LLAMA_ARG_REPACK", moves=True),
    ServerFlag(("--no-host",), env="LLAMA_ARG_NO_HOST", moves=True),
    ServerFlag(
        ("-ctk", "--cache-type-k"),
        "TYPE",
        role=FlagRole.PLACEMENT,
        preset="cache-type-k",
        env="LLAMA_ARG_CACHE_TYPE_K",
    ),
    ServerFlag(
        ("-ctv", "--cache-type-v"),
        "TYPE",
        role=FlagRole.PLACEMENT,
        preset="cache-type-v",
        env="LLAMA_ARG_CACHE_TYPE_V",
    ),
    ServerFlag(("-dt", "--defrag-thold"), "N", env="LLAMA_ARG_DEFRAG_THOLD"),
    ServerFlag(
        ("-np", "--parallel"),
        "N",
        role=FlagRole.PLACEMENT,
        preset="parallel",
        env="LLAMA_ARG_N_PARALLEL",
    ),
    ServerFlag(
        ("-cb", "--cont-batching", "-nocb", "--no-cont-batching"),
        fit=False,
        env="LLAMA_ARG_CONT_BATCHING",
        moves=True,
    ),
    ServerFlag(
        ("-mm", "--mmproj"),
        "FILE",
        role=FlagRole.PROJECTOR,
        fit=False,
        file=True,
        preset="mmproj",
        env="LLAMA_ARG_MMPROJ",
    ),
    ServerFlag(
        ("-mmu", "--mmproj-url"),
        "URL",
        role=FlagRole.PROJECTOR,
        fit=False,
        env="LLAMA_ARG_MMPROJ_URL",
    ),
    ServerFlag(
        ("--mmproj-auto", "--no-mmproj", "--no-mmproj-auto"),
        role=FlagRole.PROJECTOR,
        fit=False,
        env="LLAMA_ARG_MMPROJ_AUTO",
    ),
    ServerFlag(
        ("--mmproj-offload", "--no-mmproj-offload"),
        role=FlagRole.PROJECTOR,
        fit=False,
        env="LLAMA_ARG_MMPROJ_OFFLOAD",
    ),
    ServerFlag(
        ("-mmdev", "--mmproj-device"),
        "DEVICE",
        role=FlagRole.PROJECTOR,
        fit=False,
        preset="mmproj-device",
        env="MTMD_BACKEND_DEVICE",
    ),
    ServerFlag(
        ("--image-min-tokens",),
        "N",
        role=FlagRole.PROJECTOR,
        fit=False,
        env="LLAMA_ARG_IMAGE_MIN_TOKENS",
    ),
    ServerFlag(
        ("--image-max-tokens",),
        "N",
        role=FlagRole.PROJECTOR,
        fit=False,
        env="LLAMA_ARG_IMAGE_MAX_TOKENS",
    ),
    ServerFlag(
        ("--mtmd-batch-max-tokens",),
        "N",
        role=FlagRole.PROJECTOR,
        fit=False,
        env="LLAMA_ARG_MTMD_BATCH_MAX_TOKENS",
    ),
    ServerFlag(
        ("--video-fps",), "N", role=FlagRole.PROJECTOR, fit=False, env="LLAMA_ARG_VIDEO_FPS"
    ),
    ServerFlag(
        ("--video-timestamp-interval",),
        "N",
        role=FlagRole.PROJECTOR,
        fit=False,
        env="LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL",
    ),
    ServerFlag(
        ("--video-ffmpeg-dir",),
        "DIR",
        role=FlagRole.PROJECTOR,
        fit=False,
        env="LLAMA_ARG_VIDEO_FFMPEG_DIR",
    ),
    ServerFlag(("--rpc",), "SERVERS", role=FlagRole.DEVICE, env=RPC_ENV),
    ServerFlag(
        ("-lm", "--load-mode"), "MODE", preset="load-mode", env="LLAMA_ARG_LOAD_MODE", moves=True
    ),
    ServerFlag(("-lzm", "--lazy-mode"), "MODE", env="LLAMA_ARG_LAZY_MODE", moves=True),
    ServerFlag(("--numa",), "TYPE", env="LLAMA_ARG_NUMA", moves=True),
    ServerFlag(
        ("-dev", "--device"),
        "<dev1,dev2,..>",
        role=FlagRole.DEVICE,
        preset="device",
        env="LLAMA_ARG_DEVICE",
    ),
    ServerFlag(("--list-devices",)),
    ServerFlag(
        ("-ot", "--override-tensor"),
        "<tensor name pattern>=<buffer type>,...",
        role=FlagRole.PLACEMENT,
        preset="override-tensor",
        env="LLAMA_ARG_OVERRIDE_TENSOR",
    ),
    ServerFlag(
        ("-cmoe", "--cpu-moe"), role=FlagRole.PLACEMENT, preset="cpu-moe", env="LLAMA_ARG_CPU_MOE"
    ),
    ServerFlag(
        ("-ncmoe", "--n-cpu-moe"),
        "N",
        role=FlagRole.PLACEMENT,
        preset="n-cpu-moe",
        env="LLAMA_ARG_N_CPU_MOE",
    ),
    ServerFlag(("-ncffn", "--n-cpu-ffn"), "N", env="LLAMA_ARG_N_CPU_FFN", moves=True),
    ServerFlag(
        ("-ngl", "--gpu-layers", "--n-gpu-layers"),
        "N",
        role=FlagRole.PLACEMENT,
        preset="n-gpu-layers",
        env="LLAMA_ARG_N_GPU_LAYERS",
    ),
    ServerFlag(
        ("-sm", "--split-mode"),
        "{none,layer,row,tensor}",
        preset="split-mode",
        env="LLAMA_ARG_SPLIT_MODE",
        moves=True,
    ),
    ServerFlag(
        ("-ts", "--tensor-split"),
        "N0,N1,N2,...",
        role=FlagRole.PLACEMENT,
        preset="tensor-split",
        env="LLAMA_ARG_TENSOR_SPLIT",
    ),
    ServerFlag(
        ("-mg", "--main-gpu"),
        "INDEX",
        role=FlagRole.DEVICE,
        preset="main-gpu",
        env="LLAMA_ARG_MAIN_GPU",
    ),
    ServerFlag(
        ("-fit", "--fit"), "[on|off]", role=FlagRole.PLACEMENT, preset="fit", env="LLAMA_ARG_FIT"
    ),
    ServerFlag(
        ("-fitt", "--fit-target"), "MiB0,MiB1,MiB2,...", env="LLAMA_ARG_FIT_TARGET", moves=True
    ),
    ServerFlag(("-fitc", "--fit-ctx"), "N", env="LLAMA_ARG_FIT_CTX", moves=True),
    ServerFlag(("--check-tensors",)),
    ServerFlag(("--override-kv",), "KEY=TYPE:VALUE,..."),
    ServerFlag(("--op-offload", "--no-op-offload")),
    ServerFlag(("--lora",), "FNAME"),
    ServerFlag(("--lora-scaled",), "FNAME:SCALE,..."),
    ServerFlag(("--control-vector",), "FNAME"),
    ServerFlag(("--control-vector-scaled",), "FNAME:SCALE,..."),
    ServerFlag(("--control-vector-layer-range",), "START", "END"),
    ServerFlag(("-a", "--alias"), "STRING", fit=False, env="LLAMA_ARG_ALIAS"),
    ServerFlag(("--tags",), "STRING", fit=False, env="LLAMA_ARG_TAGS"),
    ServerFlag(
        ("-m", "--model"), "FNAME", role=FlagRole.PLACEMENT, preset="model", env="LLAMA_ARG_MODEL"
    ),
    ServerFlag(
        ("-mu", "--model-url"),
        "MODEL_URL",
        role=FlagRole.MODEL,
        preset="model-url",
        env="LLAMA_ARG_MODEL_URL",
    ),
    ServerFlag(
        ("-dr", "--docker-repo"),
        "[<repo>/]<model>[:quant]",
        env="LLAMA_ARG_DOCKER_REPO",
        moves=True,
    ),
    ServerFlag(
        ("-hf", "-hfr", "--hf-repo"),
        "<user>/<model>[:quant]",
        role=FlagRole.MODEL,
        preset="hf-repo",
        env="LLAMA_ARG_HF_REPO",
    ),
    ServerFlag(("-hff", "--hf-file"), "FILE", env="LLAMA_ARG_HF_FILE", moves=True),
    ServerFlag(("-hft", "--hf-token"), "TOKEN", env="HF_TOKEN"),
    ServerFlag(("--embd-normalize",), "N", fit=False),
    ServerFlag(("--host",), "HOST", role=FlagRole.LAUNCH, fit=False, env="LLAMA_ARG_HOST"),
    ServerFlag(("--port",), "PORT", role=FlagRole.LAUNCH, fit=False, env="LLAMA_ARG_PORT"),
    ServerFlag(("--reuse-port",), role=FlagRole.LAUNCH, fit=False, env="LLAMA_ARG_REUSE_PORT"),
    ServerFlag(("--path",), "PATH", fit=False, env="LLAMA_ARG_STATIC_PATH"),
    ServerFlag(("--cors-origins",), "ORIGINS", fit=False, env="LLAMA_ARG_CORS_ORIGINS"),
    ServerFlag(("--cors-methods",), "METHODS", fit=False, env="LLAMA_ARG_CORS_METHODS"),
    ServerFlag(("--cors-headers",), "HEADERS", fit=False, env="LLAMA_ARG_CORS_HEADERS"),
    ServerFlag(
        ("--cors-credentials", "--no-cors-credentials"), fit=False, env="LLAMA_ARG_CORS_CREDENTIALS"
    ),
    ServerFlag(("--api-prefix",), "PREFIX", fit=False, env="LLAMA_ARG_API_PREFIX"),
    ServerFlag(("--ui-config", "--webui-config"), "JSON", fit=False, env="LLAMA_ARG_UI_CONFIG"),
    ServerFlag(
        ("--ui-config-file", "--webui-config-file"),
        "PATH",
        fit=False,
        env="LLAMA_ARG_UI_CONFIG_FILE",
    ),
    ServerFlag(
        ("--ui-mcp-proxy", "--webui-mcp-proxy", "--no-ui-mcp-proxy", "--no-webui-mcp-proxy"),
        fit=False,
        env="LLAMA_ARG_UI_MCP_PROXY",
    ),
    ServerFlag(("--tools",), "TOOL1,TOOL2,...", fit=False, env="LLAMA_ARG_TOOLS"),
    ServerFlag(("--tools-runtime",), "OPTION", fit=False, env="LLAMA_ARG_TOOLS_RUNTIME"),
    ServerFlag(("--mcp-servers-config",), "PATH", fit=False, env="LLAMA_ARG_MCP_SERVERS_CONFIG"),
    ServerFlag(("--mcp-servers-json",), "JSON", fit=False, env="LLAMA_ARG_MCP_SERVERS_JSON"),
    ServerFlag(("-ag", "--agent", "-no-ag", "--no-agent"), fit=False, env="LLAMA_ARG_AGENT"),
    ServerFlag(("--ui", "--webui", "--no-ui", "--no-webui"), fit=False, env="LLAMA_ARG_UI"),
    ServerFlag(("--embedding", "--embeddings"), fit=False, env="LLAMA_ARG_EMBEDDINGS", moves=True),
    ServerFlag(("--rerank", "--reranking"), fit=False, env="LLAMA_ARG_RERANKING", moves=True),
    ServerFlag(("--api-key",), "KEY", fit=False, env="LLAMA_API_KEY"),
    ServerFlag(("--api-key-file",), "FNAME", fit=False, env="LLAMA_ARG_API_KEY_FILE"),
    ServerFlag(("--ssl-key-file",), "FNAME", fit=False, env="LLAMA_ARG_SSL_KEY_FILE"),
    ServerFlag(("--ssl-cert-file",), "FNAME", fit=False, env="LLAMA_ARG_SSL_CERT_FILE"),
    ServerFlag(
        ("--chat-template-kwargs",), "STRING", fit=False, env="LLAMA_ARG_CHAT_TEMPLATE_KWARGS"
    ),
    ServerFlag(("-to", "--timeout"), "N", fit=False, env="LLAMA_ARG_TIMEOUT"),
    ServerFlag(("--sse-ping-interval",), "N", fit=False, env="LLAMA_ARG_SSE_PING_INTERVAL"),
    ServerFlag(("--threads-http",), "N", fit=False, env="LLAMA_ARG_THREADS_HTTP"),
    ServerFlag(("--cache-prompt", "--no-cache-prompt"), fit=False, env="LLAMA_ARG_CACHE_PROMPT"),
    ServerFlag(("--cache-reuse",), "N", fit=False, env="LLAMA_ARG_CACHE_REUSE"),
    ServerFlag(("--metrics",), fit=False, env="LLAMA_ARG_ENDPOINT_METRICS"),
    ServerFlag(("--props",), fit=False, env="LLAMA_ARG_ENDPOINT_PROPS"),
    ServerFlag(("--slots", "--no-slots"), fit=False, env="LLAMA_ARG_ENDPOINT_SLOTS"),
    ServerFlag(("--slot-save-path",), "PATH", fit=False),
    ServerFlag(("--media-path",), "PATH", fit=False),
    ServerFlag(("--models-dir",), "PATH", fit=False, env="LLAMA_ARG_MODELS_DIR"),
    ServerFlag(("--models-preset",), "PATH", fit=False, env="LLAMA_ARG_MODELS_PRESET"),
    ServerFlag(("--models-max",), "N", fit=False, env="LLAMA_ARG_MODELS_MAX"),
    ServerFlag(
        ("--models-autoload", "--no-models-autoload"), fit=False, env="LLAMA_ARG_MODELS_AUTOLOAD"
    ),
    ServerFlag(("--jinja", "--no-jinja"), fit=False, env="LLAMA_ARG_JINJA"),
    ServerFlag(("--reasoning-format",), "FORMAT", fit=False, env="LLAMA_ARG_THINK"),
    ServerFlag(("-rea", "--reasoning"), "[on|off|auto]", fit=False, env="LLAMA_ARG_REASONING"),
    ServerFlag(("--reasoning-effort",), "LEVEL", fit=False, env="LLAMA_ARG_REASONING_EFFORT"),
    ServerFlag(("--reasoning-budget",), "N", fit=False, env="LLAMA_ARG_THINK_BUDGET"),
    ServerFlag(
        ("--reasoning-budget-message",), "MESSAGE", fit=False, env="LLAMA_ARG_THINK_BUDGET_MESSAGE"
    ),
    ServerFlag(
        ("--reasoning-preserve", "--no-reasoning-preserve"),
        fit=False,
        env="LLAMA_ARG_REASONING_PRESERVE",
    ),
    ServerFlag(("--chat-template",), "JINJA_TEMPLATE", fit=False, env="LLAMA_ARG_CHAT_TEMPLATE"),
    ServerFlag(
        ("--chat-template-file",),
        "JINJA_TEMPLATE_FILE",
        fit=False,
        env="LLAMA_ARG_CHAT_TEMPLATE_FILE",
    ),
    ServerFlag(
        ("--skip-chat-parsing", "--no-skip-chat-parsing"),
        fit=False,
        env="LLAMA_ARG_SKIP_CHAT_PARSING",
    ),
    ServerFlag(
        ("--prefill-assistant", "--no-prefill-assistant"),
        fit=False,
        env="LLAMA_ARG_PREFILL_ASSISTANT",
    ),
    ServerFlag(("-sps", "--slot-prompt-similarity"), "SIMILARITY", fit=False),
    ServerFlag(("--lora-init-without-apply",), fit=False),
    ServerFlag(("--sleep-idle-seconds",), "SECONDS", fit=False),
    ServerFlag(("--log-disable",), role=FlagRole.LAUNCH),
    ServerFlag(("--log-file",), "FNAME", env="LLAMA_ARG_LOG_FILE"),
    ServerFlag(("--log-jsonl", "--no-log-jsonl"), role=FlagRole.LAUNCH, env="LLAMA_ARG_LOG_JSONL"),
    ServerFlag(("--log-prompts-dir",), "PATH", fit=False),
    ServerFlag(("--log-colors",), "[on|off|auto]", env="LLAMA_ARG_LOG_COLORS"),
    ServerFlag(("-v", "--verbose", "--log-verbose")),
    ServerFlag(("--offline",), env="LLAMA_ARG_OFFLINE"),
    ServerFlag(("-lv", "--verbosity", "--log-verbosity"), "N", env="LLAMA_ARG_LOG_VERBOSITY"),
    ServerFlag(("--log-prefix", "--no-log-prefix"), env="LLAMA_ARG_LOG_PREFIX"),
    ServerFlag(("--log-timestamps", "--no-log-timestamps"), env="LLAMA_ARG_LOG_TIMESTAMPS"),
    ServerFlag(
        ("--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft"),
        "<user>/<model>[:quant]",
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_SPEC_DRAFT_HF_REPO",
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
        env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K",
    ),
    ServerFlag(
        ("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"),
        "TYPE",
        role=FlagRole.DRAFT,
        preset="spec-draft-type-v",
        env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V",
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
        env="LLAMA_ARG_SPEC_DRAFT_CPU_MOE",
    ),
    ServerFlag(
        ("--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncmoed", "--n-cpu-moe-draft"),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
        preset="spec-draft-n-cpu-moe",
        env="LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE",
    ),
    ServerFlag(
        ("--spec-draft-n-max",),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_SPEC_DRAFT_N_MAX",
    ),
    ServerFlag(
        ("--spec-draft-n-min",),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_SPEC_DRAFT_N_MIN",
    ),
    ServerFlag(
        ("--spec-synth-len",), "L", role=FlagRole.DRAFT, fit=False, env="LLAMA_ARG_SPEC_SYNTH_LEN"
    ),
    ServerFlag(
        ("--spec-synth-rates",),
        "P0,P1,...",
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_SPEC_SYNTH_RATES",
    ),
    ServerFlag(
        ("--spec-draft-p-split", "--draft-p-split"),
        "P",
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_SPEC_DRAFT_P_SPLIT",
    ),
    ServerFlag(
        ("--spec-draft-p-min", "--draft-p-min"),
        "P",
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_SPEC_DRAFT_P_MIN",
    ),
    ServerFlag(
        ("--spec-draft-backend-sampling", "--no-spec-draft-backend-sampling"),
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING",
    ),
    ServerFlag(
        ("--spec-draft-sampling",),
        "{greedy,probabilistic}",
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_SPEC_DRAFT_SAMPLING",
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
        env="LLAMA_ARG_N_GPU_LAYERS_DRAFT",
    ),
    ServerFlag(
        ("--spec-draft-model", "-md", "--model-draft"),
        "FNAME",
        role=FlagRole.DRAFT,
        fit=False,
        file=True,
        preset="model-draft",
        env="LLAMA_ARG_SPEC_DRAFT_MODEL",
    ),
    ServerFlag(
        ("--spec-type",),
        "none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,"
        "ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache",
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_SPEC_TYPE",
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
    ServerFlag(
        ("--draft", "--draft-n", "--draft-max"),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_DRAFT_MAX",
    ),
    ServerFlag(
        ("--draft-min", "--draft-n-min"),
        "N",
        role=FlagRole.DRAFT,
        fit=False,
        env="LLAMA_ARG_DRAFT_MIN",
    ),
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


@functools.cache
def moving_env() -> frozenset[str]:
    """The environment variables that would move a placement, which every launch leaves out of
    llama.cpp's environment (llamacpp/process.py's ``child_env``).

    llama.cpp applies a flag's variable before the command line (common_params_parse_ex), and
    -ot, -cmoe and -ncmoe add override rules rather than replace them: ``LLAMA_ARG_N_CPU_MOE``
    in a shell profile would load a placement moetune did not plan, and it would be measured
    and saved as tuned. The rule: the variables (``env_names``, the ``LLAMA_ARG_NO_`` twins
    too) of every flag whose role is not PASS (moetune sets it, or launch does; it names the
    model, the devices, the projector or the draft), and of every PASS flag that ``moves``
    (changes memory or speed: batch sizes, threads, KV offload, split mode, ...). Those of the
    other PASS flags (sampling, the HTTP server's, the chat template's) pass through."""
    return frozenset(
        name
        for entry in FLAGS
        if entry.role is not FlagRole.PASS or entry.moves
        for name in entry.env_names
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
