"""``IOBinding``: onnxruntime's input/output binding, for the CPU.

Inputs are bound to arrays (``bind_cpu_input``), to :class:`OrtValue` s or to raw CPU
addresses; outputs are bound by name (onnxplex allocates them) or to pre-allocated memory (an
``OrtValue`` or a raw address), which ``run_with_iobinding`` fills. Binding to any device but
``'cpu'`` raises :class:`InvalidArgumentError`; ``synchronize_inputs``/``synchronize_outputs``
have nothing to wait for on the CPU and return at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import InvalidArgumentError
from .ortvalue import OrtValue, OrtValueVector, array_at, check_cpu_device

if TYPE_CHECKING:
    from .session import InferenceSession, RunOptions

__all__ = ["IOBinding", "SessionIOBinding"]


class IOBinding:
    """Inputs and outputs bound for :meth:`InferenceSession.run_with_iobinding`.

    Made by :meth:`InferenceSession.io_binding`; usable only with that session. Bound arrays
    are referenced, not copied: change a bound input array in place and run again to use the
    new values.
    """

    def __init__(self, session: InferenceSession) -> None:
        # (``SessionIOBinding(sess._sess)``, as onnxruntime code builds one: the session)
        self._session = getattr(session, "_onnxplex_session", session)
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, OrtValue | None] = {}
        self._results: list[OrtValue] = []

    # ----------------------------------------------------------------------------- inputs

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind input ``name`` to an array (referenced, not copied)."""
        self._check_input(name)
        kind = self._session._input_type(name)
        if not kind.startswith("tensor("):
            raise InvalidArgumentError(
                f"IOBinding.bind_cpu_input({name!r}): the input is {kind}; only tensors can be "
                "bound to arrays, as in onnxruntime (bind an OrtValue a run returned with "
                "bind_ortvalue_input, or pass the value to run())")
        self._inputs[name] = arr_on_cpu if isinstance(arr_on_cpu, np.ndarray) \
            else np.asarray(arr_on_cpu)

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any,
                   shape: Any, buffer_ptr: int) -> None:
        """Bind input ``name`` to ``shape`` elements of ``element_type`` at address
        ``buffer_ptr`` (CPU memory the caller keeps alive)."""
        what = f"IOBinding.bind_input({name!r})"
        check_cpu_device(device_type, what)
        self._check_input(name)
        self._inputs[name] = array_at(buffer_ptr, element_type, shape, what)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Bind input ``name`` to an :class:`OrtValue` (its memory, not a copy)."""
        self._check_input(name)
        self._inputs[name] = _unwrap(ortvalue, f"IOBinding.bind_ortvalue_input({name!r})")

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def synchronize_inputs(self) -> None:
        """Nothing to wait for on the CPU."""

    # ---------------------------------------------------------------------------- outputs

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0,
                    element_type: Any = None, shape: Any = None,
                    buffer_ptr: int | None = None) -> None:
        """Bind output ``name``: allocated by the run, or written into ``shape`` elements of
        ``element_type`` at address ``buffer_ptr`` (all three given, CPU memory)."""
        what = f"IOBinding.bind_output({name!r})"
        check_cpu_device(device_type, what)
        self._check_output(name)
        if buffer_ptr is None:
            self._outputs[name] = None
            return
        self._check_tensor_output(name, what)
        if element_type is None or shape is None:
            raise InvalidArgumentError(f"{what}: element_type and shape are needed with "
                                       "buffer_ptr (pre-allocated memory)")
        self._outputs[name] = OrtValue(array_at(buffer_ptr, element_type, shape, what))

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind output ``name`` to a pre-allocated tensor :class:`OrtValue`, which each run
        fills (its shape and dtype must match the output's)."""
        what = f"IOBinding.bind_ortvalue_output({name!r})"
        self._check_output(name)
        self._check_tensor_output(name, what)
        _unwrap(ortvalue, what)
        if not ortvalue.is_tensor():
            raise InvalidArgumentError(f"{what}: only tensors can receive outputs")
        self._outputs[name] = ortvalue

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def synchronize_outputs(self) -> None:
        """Nothing to wait for on the CPU."""

    def get_outputs(self) -> list[OrtValue]:
        """The outputs of the last run, in binding order (pre-bound ``OrtValue`` s as bound)."""
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> OrtValueVector:
        """:meth:`get_outputs` as an :class:`OrtValueVector`."""
        return OrtValueVector(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        """Copies of the last run's outputs as numpy arrays (lists for sequences, dicts for
        maps)."""
        out = []
        for ov in self._results:
            v = ov._value
            out.append(v.copy() if isinstance(v, (np.ndarray, dict)) else
                       [x.copy() for x in v] if isinstance(v, list) else v)
        return out

    # -------------------------------------------------------------------------------- run

    def _run(self, run_options: RunOptions | None) -> None:
        """Called by ``InferenceSession.run_with_iobinding``."""
        names = list(self._outputs)
        if not names:
            raise InvalidArgumentError("run_with_iobinding: no output is bound; bind at least "
                                       "one with bind_output")
        sess = self._session
        values = sess.run(names, self._inputs, run_options)
        types = {a.name: a.type for a in sess.get_outputs()}
        results = []
        for name, value in zip(names, values):
            bound = self._outputs[name]
            if bound is None:
                results.append(OrtValue(value, types.get(name)))
                continue
            target = bound._value
            if not isinstance(value, np.ndarray) or value.shape != target.shape \
                    or value.dtype != target.dtype:
                got = (f"{value.dtype} {list(value.shape)}" if isinstance(value, np.ndarray)
                       else type(value).__name__)
                raise InvalidArgumentError(
                    f"run_with_iobinding: output {name!r} is {got} (dtype, shape), but the "
                    f"memory bound to it holds {target.dtype} {list(target.shape)}; bind it "
                    f"with bind_output({name!r}) to let the run allocate it")
            np.copyto(target, value)
            results.append(bound)
        self._results = results

    def _check_input(self, name: str) -> None:
        known = self._session._bindable_inputs()
        if name not in known:
            raise InvalidArgumentError(f"IOBinding: unknown input name {name!r}; the model's "
                                       f"inputs are {[a.name for a in self._session.get_inputs()]}")

    def _check_tensor_output(self, name: str, what: str) -> None:
        kind = next(a.type for a in self._session.get_outputs() if a.name == name)
        if not kind.startswith("tensor("):
            raise InvalidArgumentError(
                f"{what}: the output is {kind}; only tensor outputs can be written into bound "
                f"memory (bind it with bind_output({name!r}) to let the run make it)")

    def _check_output(self, name: str) -> None:
        known = [a.name for a in self._session.get_outputs()]
        if name not in known:
            raise InvalidArgumentError(f"IOBinding: unknown output name {name!r}; the model's "
                                       f"outputs are {known}")


def _unwrap(value: Any, what: str) -> Any:
    if not isinstance(value, OrtValue):
        raise InvalidArgumentError(f"{what}: expected an onnxplex.OrtValue, got "
                                   f"{type(value).__name__}")
    return value._value


class SessionIOBinding(IOBinding):
    """onnxruntime's C-level binding (``capi._pybind_state.SessionIOBinding(sess._sess)``),
    which its own ``IOBinding`` wraps and some code calls directly: devices are
    :class:`OrtDevice` objects, not names and ids; ``bind_input(name, array)`` binds an array;
    ``bind_input(name, device, element_type, shape, buffer_ptr)`` and ``bind_output(name,
    device[, element_type, shape, buffer_ptr])`` take memory; ``get_outputs()`` is an
    :class:`OrtValueVector`."""

    def bind_input(self, name: str, *args: Any) -> None:  # type: ignore[override]
        if len(args) == 1:
            self.bind_cpu_input(name, args[0])
            return
        if len(args) != 4:
            raise InvalidArgumentError(
                f"SessionIOBinding.bind_input({name!r}): takes (name, array) or (name, "
                f"device, element_type, shape, buffer_ptr), got {len(args) + 1} arguments")
        device, element_type, shape, buffer_ptr = args
        super().bind_input(name, device, 0, element_type, shape, buffer_ptr)

    def bind_output(self, name: str, device: Any = "cpu",  # type: ignore[override]
                    element_type: Any = None, shape: Any = None,
                    buffer_ptr: int | None = None) -> None:
        super().bind_output(name, device, 0, element_type, shape, buffer_ptr)

    def get_outputs(self) -> OrtValueVector:  # type: ignore[override]
        return self.get_outputs_as_ortvaluevector()
