"""PNG charts through matplotlib, an optional dependency (``pip install 'onnxplex[plot]'``).

The profile timeline (``onnxplex profile --png``) and the benchmark chart
(``benchmarks/run.py``) are the kind of plot people read every day: proportional fonts, axes
with ticks, a legend. matplotlib draws them; it is not a dependency of the runtime, so it is
imported here only when a chart is drawn, and a missing matplotlib is a
:class:`MissingDependencyError` that says what to install.

Figures are made with :class:`matplotlib.figure.Figure` on an Agg canvas, never through
``pyplot``: drawing a chart needs no display, and it leaves alone the backend, the open
figures and the rcParams of a program that uses matplotlib itself.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

from .._errors import MissingDependencyError

__all__ = ["PLOT_INSTALL", "Chart", "new_figure", "require_matplotlib"]

log = logging.getLogger(__name__)

PLOT_INSTALL = "pip install 'onnxplex[plot]'"
DPI = 100


def require_matplotlib() -> Any:
    """The ``matplotlib`` module, or :class:`MissingDependencyError` naming the extra."""
    try:
        # the package first: a test (or a user) blocking it with sys.modules["matplotlib"] =
        # None must block the submodules too, even when they were imported before
        import matplotlib
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401
    except ImportError as e:
        raise MissingDependencyError(
            f"drawing charts needs matplotlib, which is not installed ({e}); install it with "
            f"{PLOT_INSTALL} (or pip install 'matplotlib>=3.8')") from e
    return matplotlib


def new_figure(width_px: float, height_px: float) -> Any:
    """A :class:`matplotlib.figure.Figure` of ``width_px`` x ``height_px`` pixels (at
    :data:`DPI`) with its own Agg canvas, laid out by matplotlib's constrained layout."""
    mpl = require_matplotlib()
    fig = mpl.figure.Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI,
                            layout="constrained")
    mpl.backends.backend_agg.FigureCanvasAgg(fig)
    return fig


class Chart:
    """A drawn chart: :meth:`save` writes it as a PNG file, :meth:`png_bytes` returns the
    bytes; ``figure`` is the matplotlib figure, for callers who want to restyle or save it in
    another format themselves."""

    def __init__(self, figure: Any) -> None:
        self.figure = figure

    def png_bytes(self) -> bytes:
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=DPI, facecolor="white")
        return buf.getvalue()

    def save(self, path: str | Path) -> Path:
        """Write the PNG to ``path`` (the format is PNG whatever the suffix)."""
        path = Path(path)
        data = self.png_bytes()
        path.write_bytes(data)
        log.debug("wrote %s (%d bytes)", path, len(data))
        return path
