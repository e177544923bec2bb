"""Type stub of the compiled ``_kleidi`` extension."""

import numpy as np
import numpy.typing as npt

def cpu_features() -> dict[str, object]: ...
def clamp_f32(x: npt.ArrayLike, lo: float, hi: float) -> np.ndarray: ...
