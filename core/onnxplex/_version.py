"""The package's version (base layer: the session's build info and the CLI read it without
importing the package's public API)."""

__version__ = "0.1.0"
