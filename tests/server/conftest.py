"""Fixtures of the tests that run llama.cpp (every test here is marked ``server``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.llama import rpc_server


@pytest.fixture(scope="module")
def rpc() -> Iterator[str]:
    """A ggml-rpc-server on loopback (the test rig's "GPU"), shared by one module's tests."""
    with rpc_server() as endpoint:
        yield endpoint
