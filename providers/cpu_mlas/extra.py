"""(in progress)"""

from __future__ import annotations

from ._registry import op  # noqa: F401
