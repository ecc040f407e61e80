"""moetune: tuning assistant for llama.cpp Mixture-of-Experts expert offload."""

__version__ = "0.1.0"
