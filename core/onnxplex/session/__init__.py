"""Sessions (layer 4): :class:`InferenceSession` (``session``), IOBinding, OrtValue, LoRA
adapters, devices and the rest of onnxruntime's Python API (``ortcompat``). Builds on
``framework`` and ``optimizer``; imported by ``tools`` and the package's public names."""
