"""Enables onnxplex's provider author kit for `pytest` in this folder; pyproject.toml names
the provider under test (ini option ``onnxplex_provider``)."""

pytest_plugins = ["onnxplex.testing"]
