"""Stands first on the PYTHONPATH of what a test outside tests/server/ starts, so a moetune
child finds no llama.cpp there either (tests/conftest.py ``_llama_or_not``)."""

raise ImportError("llama.cpp is hidden from tests outside tests/server/")
