"""Records: what a job measured and what llama.cpp said, as plain data (pydantic models and
the pure statistics on them).

Starts nothing and imports no process, HTTP, hardware or terminal code, and of moetune only
core/, errors and units: store/ saves these records, report/ renders them, jobs/ and
llamacpp/ make them (tests/unit/test_layers.py checks the layers).
"""
