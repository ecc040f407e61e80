"""The jobs' defaults and the bench's configuration names: plain constants (and the hub's
network timeout, whose module imports nothing else), so the command line can show them without
loading the jobs."""

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
]
