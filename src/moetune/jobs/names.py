"""The jobs' defaults and the bench's configuration names: plain constants, no imports, so the
command line can show them without loading the jobs."""

DEFAULT_CACHE_TYPE = "q8_0"  # -ctk/-ctv of plan, run, bench and doctor
DEFAULT_HEADROOM = "1.5G"  # kept free on each device without --target-vram

CONFIG_NAMES: tuple[str, ...] = ("plan", "fit", "cpu-moe", "layers", "gpu-only")
ENDPOINTS: tuple[str, ...] = ("chat", "completion")
DEFAULT_DEPTHS: tuple[int, ...] = (0, 4096, 16384)
DEFAULT_REPEATS = 3
DEFAULT_N_PREDICT = 128
