"""ONNX node conformance cases cpu_mlas is expected to fail, each with its reason.

Strict: a listed case that passes fails the suite (remove it), and a listed case must fail with
an onnxplex error, never with a wrong answer. Keep this list short and honest.
"""

from __future__ import annotations

import importlib.util

_IMAGE_CODEC = ("ImageDecoder decodes with Pillow, an optional extra (pip install "
                "'onnxplex[image]'), which is not installed")

IMAGE_DECODER_CASES = tuple(f"test_image_decoder_decode_{k}" for k in (
    "jpeg_rgb", "jpeg_grayscale", "jpeg_bgr", "jpeg2k_rgb", "bmp_rgb", "png_rgb", "tiff_rgb",
    "webp_rgb", "pnm_rgb"))
HAVE_PILLOW = importlib.util.find_spec("PIL") is not None

EXPECTED_FAILURES: dict[str, str] = (
    {} if HAVE_PILLOW else {name: _IMAGE_CODEC for name in IMAGE_DECODER_CASES})
