"""`moetune bench` and `moetune report` (issue 5): registered on the app by import."""

from __future__ import annotations
