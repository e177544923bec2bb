"""The PNG canvas behind the benchmark chart (and profile timelines)."""

from __future__ import annotations

import struct
import zlib

import numpy as np

from onnxplex._raster import Canvas, hex_color


def _decode(png: bytes) -> np.ndarray:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos:pos + 4])
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", png[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + data)
        chunks[kind] = chunks.get(kind, b"") + data
        pos += 12 + n
    w, h, depth, ctype = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, ctype) == (8, 2) and b"IEND" in chunks
    raw = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(h, 1 + 3 * w)
    assert not raw[:, 0].any()  # filter type 0 on every row
    return raw[:, 1:].reshape(h, w, 3)


def test_png_round_trip_with_rect_and_clipping():
    c = Canvas(20, 10, "#ffffff")
    c.rect(5, 2, 50, 4, "#ff0000")  # clipped at the right edge
    img = _decode(c.png_bytes())
    assert img.shape == (10, 20, 3)
    assert (img[2:4, 5:] == (255, 0, 0)).all() and (img[:2] == 255).all()
    assert (img[4:] == 255).all() and (img[2:4, :5] == 255).all()


def test_text_draws_glyphs_and_anchors():
    c = Canvas(100, 12)
    c.text(50, 2, "AB 1.0", color="#000000", anchor="center")
    img = _decode(c.png_bytes())
    ink = np.argwhere((img == 0).all(-1))
    assert len(ink) > 20
    width = Canvas.text_width("AB 1.0")
    assert ink[:, 1].min() >= 50 - width / 2 - 1 and ink[:, 1].max() <= 50 + width / 2 + 1
    assert ink[:, 0].min() >= 2 and ink[:, 0].max() <= 8
    lower, upper = Canvas(40, 10), Canvas(40, 10)
    lower.text(0, 0, "onnx")
    upper.text(0, 0, "ONNX")
    assert lower.png_bytes() == upper.png_bytes()
    assert hex_color("#1f77b4") == (31, 119, 180)
