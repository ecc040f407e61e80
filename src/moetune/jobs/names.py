"""The bench's configuration names and workload defaults: plain constants, no imports, so the
command line can show them without loading the jobs."""

CONFIG_NAMES: tuple[str, ...] = ("plan", "fit", "cpu-moe", "layers", "gpu-only")
ENDPOINTS: tuple[str, ...] = ("chat", "completion")
DEFAULT_DEPTHS: tuple[int, ...] = (0, 4096, 16384)
DEFAULT_REPEATS = 3
DEFAULT_N_PREDICT = 128
