"""External data: files a model's tensors point into, resolved inside the model's folder and
refused when they would leave it (absolute paths, ``..``, symlinks) or reach past a file's end."""

from __future__ import annotations

import logging
import os

import onnx

from .._errors import (
    ExternalDataError,
)
from .limits import _expected_nbytes

logger = logging.getLogger(__name__)


class _ExternalFiles:
    """External data files, each resolved once (:func:`resolve_inside`) and checked
    against; a location is rewritten to the checked path relative to the folder, so the
    reader opens exactly the file that was checked."""

    def __init__(self, base_dir: str | None) -> None:
        self.root = os.path.realpath(base_dir) if base_dir is not None else None
        self.files: dict[str, tuple[str, int, str]] = {}   # location -> (path, size, relative)

    def check(self, t: onnx.TensorProto) -> None:
        """Refuse external data that leaves the model folder or reaches past its file."""
        root, files = self.root, self.files
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        what = f"initializer {t.name!r}"
        if root is None:
            raise ExternalDataError(
                f"{what} has its data in external file {loc!r}, but the model was not loaded "
                "from a path; load it from its file so the data can be found beside it"
            )
        if loc not in files:
            full = resolve_inside(root, loc, what)
            files[loc] = (full, os.path.getsize(full), os.path.relpath(full, root))
        full, size, rel = files[loc]
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if info.get("length") else None
        except ValueError:
            raise ExternalDataError(f"{what}: external data offset/length is not a number"
                                    ) from None
        if offset < 0 or (length is not None and length < 0):
            raise ExternalDataError(f"{what}: negative external data offset or length")
        expected = _expected_nbytes(t)
        need = length if length is not None else expected
        if need is not None and offset + need > size:
            raise ExternalDataError(
                f"{what}: external data range [{offset}, {offset + need}) is beyond the end of "
                f"{loc!r} ({size} bytes)"
            )
        if expected is not None and length is not None and length != expected:
            raise ExternalDataError(
                f"{what}: external data length {length} does not match its shape and dtype "
                f"({expected} bytes)"
            )
        if rel != loc:
            for e in t.external_data:
                if e.key == "location":
                    e.value = rel


def resolve_inside(root: str, location: str, what: str) -> str:
    """The real path of ``location`` relative to folder ``root`` (itself a real path), after
    following every symlink; raises :class:`ExternalDataError` unless it is a regular file
    inside ``root``. The one place that decides whether a file named by a model may be read."""
    if not location:
        raise ExternalDataError(f"{what} is marked external but names no location")
    if "\0" in location:
        raise ExternalDataError(f"{what}: external data location {location!r} contains a NUL "
                                "byte")
    if (os.path.isabs(location) or location.startswith(("/", "\\"))
            or (len(location) > 1 and location[1] == ":")):
        raise ExternalDataError(
            f"{what}: external data location {location!r} is an absolute path; only paths "
            f"inside the model folder {root!r} are allowed"
        )
    try:
        full = os.path.realpath(os.path.join(root, location))
    except (OSError, ValueError) as e:
        raise ExternalDataError(f"{what}: external data location {location!r} cannot be "
                                f"resolved: {e}") from e
    if os.path.commonpath([full, root]) != root or full == root:
        raise ExternalDataError(
            f"{what}: external data location {location!r} resolves to {full!r}, outside the "
            f"model folder {root!r}; refusing to read it"
        )
    if not os.path.isfile(full):
        raise ExternalDataError(f"{what}: external data file {location!r} not found in "
                                f"{root!r}")
    return full
