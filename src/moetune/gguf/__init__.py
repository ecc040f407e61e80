"""Header-only GGUF reading: single files and split models, and tensor roles."""

from moetune.gguf.reader import GGUFHeader, SkippedArray, TensorInfo, read_header
from moetune.gguf.roles import Role, classify, expert_part
from moetune.gguf.split import GGUFModel, read_model

__all__ = [
    "GGUFHeader",
    "GGUFModel",
    "Role",
    "SkippedArray",
    "TensorInfo",
    "classify",
    "expert_part",
    "read_header",
    "read_model",
]
