"""The extended level: fusions into com.microsoft contrib ops (ORT's published semantics)."""

from __future__ import annotations

EXTENDED = 2
