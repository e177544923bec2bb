"""The in-memory model (layer 1, above the base modules ``_errors``, ``_dtypes``, ``_records``,
``_sparse``): loading a model into onnx-ir and the views handed to providers (``model``), the
checks a model must pass (``checks``), shape inference (``inference``), memory limits
(``limits``), external data (``external``), onnx-ir node helpers (``nodes``), the wire-format
readers that skip onnx's parse where they can (``fast_read``, ``fast_attrs``, ``wire``), map
types (``maptype``) and onnxruntime's contrib-op shapes (``contrib_shapes``). Imports nothing
above it."""
