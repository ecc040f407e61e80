"""Where moetune keeps its files: the one module that reads ``MOETUNE_HOME`` or platformdirs.

- config (hardware profiles of your own, tuned profiles): ``$MOETUNE_HOME``, else the user
  config dir (``$XDG_CONFIG_HOME/moetune``, usually ``~/.config/moetune``);
- data (saved bench results, speed points): ``$MOETUNE_HOME/bench`` and ``$MOETUNE_HOME/speed``,
  else ``<user data dir>/moetune/bench`` and ``.../speed``;
- this machine's measured figures (RAM read bandwidth; moetune.store.machine):
  ``$MOETUNE_HOME/machine.json``, else ``<user data dir>/moetune/machine.json``;
- logs (llama-server's, one per launch): ``$MOETUNE_HOME/logs``, else
  ``<user cache dir>/moetune/logs``;
- the hub cache (remote headers, listings; moetune.hub): ``$MOETUNE_HOME/hub``, else
  ``<user cache dir>/moetune/hub``.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_HOME = "MOETUNE_HOME"
APP = "moetune"


def home_override() -> Path | None:
    """``$MOETUNE_HOME`` when set."""
    if home := os.environ.get(ENV_HOME):
        return Path(home).expanduser()
    return None


def config_dir() -> Path:
    """``$MOETUNE_HOME``, else the user config dir (XDG on Linux)."""
    if (home := home_override()) is not None:
        return home
    from platformdirs import user_config_dir

    return Path(user_config_dir(APP, appauthor=False))


def tuned_dir() -> Path:
    """Tuned profiles saved by `moetune run`."""
    return config_dir() / "profiles"


def user_hardware_dir() -> Path:
    """Hardware profiles of the user's own (they override shipped ones of the same id)."""
    return config_dir() / "hardware"


def bench_dir() -> Path:
    """Saved bench results: ``$MOETUNE_HOME/bench``, else ``<user data dir>/moetune/bench``."""
    if (home := home_override()) is not None:
        return home / "bench"
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP)) / "bench"


def speed_dir() -> Path:
    """Speed points (store/speed.py): ``$MOETUNE_HOME/speed``, else
    ``<user data dir>/moetune/speed``."""
    if (home := home_override()) is not None:
        return home / "speed"
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP)) / "speed"


def machine_file() -> Path:
    """This machine's measured figures: ``$MOETUNE_HOME/machine.json``, else
    ``<user data dir>/moetune/machine.json``."""
    if (home := home_override()) is not None:
        return home / "machine.json"
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP)) / "machine.json"


def log_dir() -> Path:
    """llama-server logs: ``$MOETUNE_HOME/logs``, else ``<user cache dir>/moetune/logs``
    (never the model's folder)."""
    if (home := home_override()) is not None:
        return home / "logs"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir(APP)) / "logs"


def hub_cache_dir() -> Path:
    """Remote headers and repository listings: ``$MOETUNE_HOME/hub``, else
    ``<user cache dir>/moetune/hub``."""
    if (home := home_override()) is not None:
        return home / "hub"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir(APP)) / "hub"
