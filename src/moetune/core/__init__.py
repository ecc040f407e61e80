"""The pure core: model facts, per-layer dimensions, placement, KV cache, compute buffers,
memory, the planner, the command builder and the tuning search.

Nothing here starts a process, reads hardware, opens a file, touches the network or prints
(jobs/loader.py reads models and hands the core their facts); it imports only
``moetune.gguf``, ``moetune.units``, ``moetune.errors`` and itself (tests/unit/test_layers.py
checks).
"""
