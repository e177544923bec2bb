"""The in-memory model (layer 1, above the base modules ``_errors``, ``_dtypes``, ``_records``,
``_sparse``): loading a model into onnx-ir with its checks (``model``: :class:`Model`, the
views handed to providers, size limits, shape inference, external data), the wire-format
readers that skip onnx's parse where they can (``fast_read``, ``fast_attrs``, ``wire``), map
types (``maptype``) and onnxruntime's contrib-op shapes (``contrib_shapes``). Imports nothing
above it."""
