"""Bundled execution providers. Each registers through the ``onnxplex`` entry-point group
exactly as a third-party provider does; importing this package imports none of them."""
