"""`moetune profiles`, `moetune alias` and `moetune doctor` (issue 6): registered on the app by
import."""

from __future__ import annotations
