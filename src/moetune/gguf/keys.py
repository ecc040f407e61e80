"""The metadata keys moetune reads, as the GGUF spec (and gguf-py's ``gguf.Keys``) names them.

Kept here rather than imported from gguf-py so that reading a header needs neither gguf-py
nor numpy (tests/unit/test_reader.py checks them against ``gguf.Keys``). ``LLM`` keys carry an
``{arch}.`` prefix in the file; ``ModelFacts.hparams`` holds them without it.
"""

ALIGNMENT = "general.alignment"
ARCHITECTURE = "general.architecture"
NAME = "general.name"
SPLIT_NO = "split.no"
SPLIT_COUNT = "split.count"
SPLIT_TENSORS_COUNT = "split.tensors.count"

# {arch}.* keys, without the prefix
BLOCK_COUNT = "block_count"
NEXTN_PREDICT_LAYERS = "nextn_predict_layers"
EXPERT_COUNT = "expert_count"
EXPERT_USED_COUNT = "expert_used_count"
EXPERT_SHARED_COUNT = "expert_shared_count"
CONTEXT_LENGTH = "context_length"
