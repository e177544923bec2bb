"""A tiny raster canvas that writes PNG files: rectangles, lines and 5x7 bitmap text.

Charts (the benchmark bar chart, profile timelines) are simple enough that a plotting library
would be a dependency for a few rectangles and labels; this draws them with numpy and writes
the PNG with zlib. Text is upper case only (lower case is drawn as upper case).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

__all__ = ["Canvas", "hex_color"]

# 5x7 glyphs: seven rows, five bits each (bit 4 = leftmost column)
_FONT: dict[str, tuple[int, ...]] = {
    " ": (0, 0, 0, 0, 0, 0, 0),
    "0": (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E),
    "1": (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "2": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F),
    "3": (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),
    "4": (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02),
    "5": (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),
    "6": (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E),
    "7": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    "8": (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E),
    "9": (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),
    "A": (0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11),
    "B": (0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E),
    "C": (0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E),
    "D": (0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C),
    "E": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F),
    "F": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10),
    "G": (0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F),
    "H": (0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11),
    "I": (0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "J": (0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C),
    "K": (0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11),
    "L": (0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F),
    "M": (0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11),
    "N": (0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11),
    "O": (0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E),
    "P": (0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10),
    "Q": (0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D),
    "R": (0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11),
    "S": (0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E),
    "T": (0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04),
    "U": (0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E),
    "V": (0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04),
    "W": (0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A),
    "X": (0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11),
    "Y": (0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04),
    "Z": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F),
    ".": (0, 0, 0, 0, 0, 0x0C, 0x0C),
    ",": (0, 0, 0, 0, 0x0C, 0x04, 0x08),
    ":": (0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0),
    "-": (0, 0, 0, 0x1F, 0, 0, 0),
    "_": (0, 0, 0, 0, 0, 0, 0x1F),
    "+": (0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0),
    "=": (0, 0, 0x1F, 0, 0x1F, 0, 0),
    "/": (0, 0x01, 0x02, 0x04, 0x08, 0x10, 0),
    "(": (0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02),
    ")": (0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08),
    "[": (0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E),
    "]": (0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E),
    "%": (0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03),
    "\u00d7": (0, 0, 0x11, 0x0A, 0x04, 0x0A, 0x11),  # multiplication sign
    "<": (0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02),
    ">": (0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08),
    "#": (0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A),
    "'": (0x04, 0x04, 0x08, 0, 0, 0, 0),
    "?": (0x0E, 0x11, 0x01, 0x02, 0x04, 0, 0x04),
    "!": (0x04, 0x04, 0x04, 0x04, 0x04, 0, 0x04),
    "*": (0, 0x04, 0x15, 0x0E, 0x15, 0x04, 0),
    "|": (0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04),
    ";": (0, 0x0C, 0x0C, 0, 0x0C, 0x04, 0x08),
    "&": (0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D),
    "@": (0x0E, 0x11, 0x01, 0x0D, 0x15, 0x15, 0x0E),
    "\u2026": (0, 0, 0, 0, 0, 0, 0x15),  # ellipsis, for clipped labels
}
GLYPH_W, GLYPH_H = 6, 8  # advance per character and line height, at scale 1


def hex_color(text: str) -> tuple[int, int, int]:
    """``"#1f77b4"`` -> (31, 119, 180)."""
    t = text.lstrip("#")
    return int(t[0:2], 16), int(t[2:4], 16), int(t[4:6], 16)


def _glyph_masks() -> dict[str, np.ndarray]:
    bits = np.array([16, 8, 4, 2, 1])
    return {c: (np.array(rows)[:, None] & bits) != 0 for c, rows in _FONT.items()}


_MASKS = _glyph_masks()


class Canvas:
    """An RGB image: ``Canvas(w, h)``, draw, then ``save(path)`` or ``png_bytes()``."""

    def __init__(self, width: int, height: int, background: str = "#ffffff") -> None:
        self.pixels = np.empty((int(height), int(width), 3), np.uint8)
        self.pixels[:] = hex_color(background)

    @property
    def width(self) -> int:
        return self.pixels.shape[1]

    @property
    def height(self) -> int:
        return self.pixels.shape[0]

    def rect(self, x0: float, y0: float, x1: float, y1: float, color: str) -> None:
        """Fill [x0, x1) x [y0, y1), clipped to the canvas."""
        xa, xb = sorted((int(round(x0)), int(round(x1))))
        ya, yb = sorted((int(round(y0)), int(round(y1))))
        xa, ya = max(xa, 0), max(ya, 0)
        xb, yb = min(xb, self.width), min(yb, self.height)
        if xa < xb and ya < yb:
            self.pixels[ya:yb, xa:xb] = hex_color(color)

    def hline(self, x0: float, x1: float, y: float, color: str, width: int = 1) -> None:
        self.rect(x0, y, x1, y + width, color)

    def vline(self, x: float, y0: float, y1: float, color: str, width: int = 1) -> None:
        self.rect(x, y0, x + width, y1, color)

    def text(self, x: float, y: float, s: str, color: str = "#000000", scale: int = 1,
             anchor: str = "left") -> None:
        """Draw ``s`` with its top at ``y``; ``anchor`` left, right or center at ``x``."""
        w = self.text_width(s, scale)
        x = x - w if anchor == "right" else x - w / 2 if anchor == "center" else x
        rgb = np.array(hex_color(color), np.uint8)
        cx = int(round(x))
        for ch in s:
            mask = _MASKS.get(ch.upper(), _MASKS["?"])
            if scale > 1:
                mask = np.kron(mask, np.ones((scale, scale), bool))
            self._stamp(cx, int(round(y)), mask, rgb)
            cx += GLYPH_W * scale

    @staticmethod
    def text_width(s: str, scale: int = 1) -> int:
        return max(0, len(s) * GLYPH_W * scale - scale)

    @staticmethod
    def fit(s: str, width: float, scale: int = 1) -> str:
        """``s``, clipped with an ellipsis so that it is at most ``width`` pixels wide."""
        chars = int((width + scale) // (GLYPH_W * scale))
        if len(s) <= chars:
            return s
        return s[:max(0, chars - 1)] + "\u2026" if chars > 0 else ""

    def frame(self, x0: float, y0: float, x1: float, y1: float, color: str,
              width: int = 1) -> None:
        """The outline of [x0, x1) x [y0, y1), ``width`` pixels inside it."""
        self.hline(x0, x1, y0, color, width)
        self.hline(x0, x1, y1 - width, color, width)
        self.vline(x0, y0, y1, color, width)
        self.vline(x1 - width, y0, y1, color, width)

    def _stamp(self, x: int, y: int, mask: np.ndarray, rgb: np.ndarray) -> None:
        h, w = mask.shape
        xa, ya = max(x, 0), max(y, 0)
        xb, yb = min(x + w, self.width), min(y + h, self.height)
        if xa >= xb or ya >= yb:
            return
        sub = mask[ya - y:yb - y, xa - x:xb - x]
        self.pixels[ya:yb, xa:xb][sub] = rgb

    def png_bytes(self) -> bytes:
        h, w, _ = self.pixels.shape
        raw = np.concatenate([np.zeros((h, 1), np.uint8), self.pixels.reshape(h, w * 3)], 1)

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9)) + chunk(b"IEND", b""))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_bytes(self.png_bytes())
        return path
