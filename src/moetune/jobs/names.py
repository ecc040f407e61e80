"""The jobs' defaults and the bench's configuration names: plain constants (and the hub's
network timeout, whose module imports nothing else, and --rpc's variable from the flag table),
so the command line can show them without loading the jobs."""

from moetune.core.flags import RPC_ENV  # --rpc's default: llama-server's variable for it
from moetune.hub.env import DEFAULT_TIMEOUT_S  # --timeout's default

DEFAULT_CACHE_TYPE = "q8_0"  # -ctk/-ctv of plan, run, bench and doctor
DEFAULT_HEADROOM = "1.5G"  # kept free on each device without --target-vram

CONFIG_NAMES: tuple[str, ...] = ("plan", "fit", "cpu-moe", "layers", "gpu-only")
ENDPOINTS: tuple[str, ...] = ("chat", "completion")
DEFAULT_DEPTHS: tuple[int, ...] = (0, 4096, 16384)
DEFAULT_REPEATS = 3  # timed requests per depth at the least
DEFAULT_MAX_REPEATS = 10  # timed requests per depth at the most
DEFAULT_MAX_SPREAD = 0.10  # more until they agree: (max - min) / median at most this
DEFAULT_MAX_TIME_S = 60.0  # no further repeat of a depth after this long
DEFAULT_N_PREDICT = 128

# The bounds of the options' whole numbers, stated in their help: what llama.cpp takes where
# it has a limit, else far above any real use.
MAX_N_CPU_MOE = 10_000  # blocks (llama.cpp has at most 512; more means every block)
MAX_PARALLEL = 256  # slots: LLAMA_MAX_SEQ (core/kvcache.MAX_SEQ)
MAX_UBATCH = 65_536  # -ub (and -b): tokens of one micro-batch
MAX_THREADS = 512  # -t: GGML_MAX_N_THREADS
MAX_GPU_INDEX = 63  # nvidia-smi's index
MAX_REPEATS = 1000  # timed requests or llama-bench repetitions
MAX_SECONDS = 86_400.0  # a timeout or a time limit: a day
MAX_SHARE = 10.0  # a spread: 1000 %
MAX_MODELS_MAX = 1024  # models a router keeps loaded (0: no limit; far above any machine)

__all__ = [
    "CONFIG_NAMES",
    "DEFAULT_CACHE_TYPE",
    "DEFAULT_DEPTHS",
    "DEFAULT_HEADROOM",
    "DEFAULT_MAX_REPEATS",
    "DEFAULT_MAX_SPREAD",
    "DEFAULT_MAX_TIME_S",
    "DEFAULT_N_PREDICT",
    "DEFAULT_REPEATS",
    "DEFAULT_TIMEOUT_S",
    "ENDPOINTS",
    "MAX_GPU_INDEX",
    "MAX_MODELS_MAX",
    "MAX_N_CPU_MOE",
    "MAX_PARALLEL",
    "MAX_REPEATS",
    "MAX_SECONDS",
    "MAX_SHARE",
    "MAX_THREADS",
    "MAX_UBATCH",
    "RPC_ENV",
]
