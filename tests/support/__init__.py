"""What the tests share and are not tests: model writers, llama.cpp runners, fakes, helpers.

``tests/`` is on ``sys.path`` under pytest (the root ``conftest.py`` lives there), so test
modules import ``support.factory`` and so on; benchmarks and scripts put ``tests/`` first on
``sys.path`` themselves.  Test modules never import one another: what two of them share
lives here.
"""
