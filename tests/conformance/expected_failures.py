"""ONNX node conformance cases cpu_mlas is expected to fail, each with its reason.

Strict: a listed case that passes fails the suite (remove it), and a listed case must fail with
an onnxplex error, never with a wrong answer. Keep this list short and honest.
"""

from __future__ import annotations

_IMAGE_CODEC = ("ImageDecoder needs an image codec (JPEG, PNG, ...); onnxplex depends on no "
                "imaging library and onnx.reference's implementation needs Pillow")

EXPECTED_FAILURES: dict[str, str] = {
    **{f"test_image_decoder_decode_{k}": _IMAGE_CODEC for k in (
        "jpeg_rgb", "jpeg_grayscale", "jpeg_bgr", "jpeg2k_rgb", "bmp_rgb", "png_rgb",
        "tiff_rgb", "webp_rgb", "pnm_rgb")},
}
