"""onnxruntime's device and memory description objects, for a runtime whose memory is the CPU's.

onnxruntime code asks a session where its inputs and outputs live
(``get_input_memory_infos()``), builds :class:`OrtDevice` and :class:`OrtMemoryInfo` values to
bind buffers and register allocators, and lists devices (``get_ep_devices()``). onnxplex's
tensors are numpy arrays in host memory, so every session answer describes the CPU; objects
describing other devices can be built (as in a CPU-only onnxruntime build) and are refused
where they would have to hold data (IOBinding, OrtValue), as onnxruntime refuses them there.
"""

from __future__ import annotations

import enum
from typing import Any

from .._errors import InvalidArgumentError, as_status

__all__ = [
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtDevice",
    "OrtDeviceMemoryType",
    "OrtDeviceVendorId",
    "OrtEpDevice",
    "OrtHardwareDevice",
    "OrtHardwareDeviceType",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType",
    "create_and_register_allocator",
    "create_and_register_allocator_v2",
    "get_ep_devices",
]


class OrtMemType(enum.IntEnum):
    """Where an allocator's memory is as a kernel sees it (onnxruntime's values)."""

    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1
    DEFAULT = 0


class OrtAllocatorType(enum.IntEnum):
    """An allocator's kind (onnxruntime's values): a device allocator or an arena over one."""

    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtDeviceMemoryType(enum.IntEnum):
    """A device's memory kind: its own (DEFAULT) or host memory it can reach."""

    DEFAULT = 0
    HOST_ACCESSIBLE = 5


class OrtMemoryInfoDeviceType(enum.IntEnum):
    """The device kind of an :class:`OrtMemoryInfo` (``create_v2``)."""

    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


class OrtHardwareDeviceType(enum.IntEnum):
    """The kind of an :class:`OrtHardwareDevice`."""

    CPU = 0
    GPU = 1
    NPU = 2


class OrtDeviceVendorId(enum.IntEnum):
    """PCI vendor ids onnxruntime names devices by (0: none, the CPU's)."""

    NONE = 0
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


# (onnxruntime's OrtDevice types: 0 CPU, 1 GPU, 2 FPGA, 3 NPU, 4 DML)
_DEVICE_TYPES = {"cpu": 0, "gpu": 1, "cuda": 1, "webgpu": 1, "fpga": 2, "npu": 3, "cann": 3,
                 "dml": 4}
_ALIAS_VENDORS = {"cuda": OrtDeviceVendorId.NVIDIA, "dml": OrtDeviceVendorId.MICROSOFT,
                  "cann": OrtDeviceVendorId.HUAWEI}
_TYPE_NAMES = {0: "Cpu", 1: "Gpu", 2: "Fpga", 3: "Npu", 4: "Dml"}


class OrtDevice:
    """A device: type (0 CPU, 1 GPU, 2 FPGA, 3 NPU), memory type, vendor and index."""

    __slots__ = ("_type", "_mem", "_vendor", "_id")

    def __init__(self, device_type: int = 0, mem_type: int = 0, vendor_id: int = 0,
                 device_id: int = 0) -> None:
        self._type, self._mem = int(device_type), int(mem_type)
        self._vendor, self._id = int(vendor_id), int(device_id)

    @staticmethod
    def make(ort_device_name: str, device_id: int, vendor_id: int = -1) -> OrtDevice:
        """A device from onnxruntime's name for its type (``"cpu"``, ``"cuda"``, ``"gpu"``,
        ``"dml"``, ``"npu"``...) and its index."""
        name = str(ort_device_name).lower()
        if name not in _DEVICE_TYPES:
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"Unsupported device type: {ort_device_name}")
        if vendor_id < 0:
            vendor_id = _ALIAS_VENDORS.get(name, OrtDeviceVendorId.NONE)
        return OrtDevice(_DEVICE_TYPES[name], 0, int(vendor_id), int(device_id))

    def device_id(self) -> int:
        return self._id

    def device_type(self) -> int:
        return self._type

    def device_mem_type(self) -> int:
        return self._mem

    def device_vendor_id(self) -> int:
        return self._vendor

    # (the C-level class's constants, ``OrtDevice.cpu()``...)
    @staticmethod
    def cpu() -> int:
        return 0

    @staticmethod
    def gpu() -> int:
        return 1

    cuda = gpu

    @staticmethod
    def fpga() -> int:
        return 2

    @staticmethod
    def npu() -> int:
        return 3

    @staticmethod
    def dml() -> int:
        return 4

    @staticmethod
    def default_memory() -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OrtDevice):
            return NotImplemented
        return (self._type, self._mem, self._vendor, self._id) == \
            (other._type, other._mem, other._vendor, other._id)

    def __hash__(self) -> int:
        return hash((self._type, self._mem, self._vendor, self._id))

    def __repr__(self) -> str:
        return (f"OrtDevice(type={_TYPE_NAMES.get(self._type, self._type)}, "
                f"mem_type={self._mem}, vendor_id={self._vendor}, device_id={self._id})")


class OrtMemoryInfo:
    """A memory location as onnxruntime describes it: allocator name (``"Cpu"``), allocator
    type, device index, memory type."""

    __slots__ = ("name", "allocator_type", "device_id", "mem_type", "device_mem_type",
                 "device_vendor_id", "_device_type")

    def __init__(self, name: str, allocator_type: OrtAllocatorType, device_id: int,
                 mem_type: OrtMemType) -> None:
        self.name = str(name)
        self.allocator_type = OrtAllocatorType(allocator_type)
        self.device_id = int(device_id)
        self.mem_type = OrtMemType(mem_type)
        self.device_mem_type = OrtDeviceMemoryType.DEFAULT
        self.device_vendor_id = 0
        self._device_type = OrtMemoryInfoDeviceType.CPU if self.name.lower().startswith("cpu") \
            else OrtMemoryInfoDeviceType.GPU

    @staticmethod
    def create_v2(name: str, device_type: OrtMemoryInfoDeviceType, vendor_id: int,
                  device_id: int, device_mem_type: OrtDeviceMemoryType, alignment: int,
                  allocator_type: OrtAllocatorType) -> OrtMemoryInfo:
        """onnxruntime's ``CreateMemoryInfo_V2``: with the device type, vendor, device memory
        type and alignment spelled out."""
        if int(alignment) < 0:
            raise InvalidArgumentError(f"alignment must be >= 0, got {alignment}")
        info = OrtMemoryInfo(name, allocator_type, device_id, OrtMemType.DEFAULT)
        info.device_mem_type = OrtDeviceMemoryType(device_mem_type)
        info.device_vendor_id = int(vendor_id)
        info._device_type = OrtMemoryInfoDeviceType(device_type)
        return info

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OrtMemoryInfo):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[Any, ...]:
        return (self.name, self.allocator_type, self.device_id, self.mem_type,
                self.device_mem_type, self.device_vendor_id, self._device_type)

    def __repr__(self) -> str:
        return (f"OrtMemoryInfo(name={self.name!r}, allocator_type={self.allocator_type.name}, "
                f"device_id={self.device_id}, mem_type={self.mem_type.name})")


def cpu_memory_info() -> OrtMemoryInfo:
    """Where every onnxplex tensor lives (what onnxruntime's CPU provider reports)."""
    return OrtMemoryInfo("Cpu", OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, OrtMemType.DEFAULT)


class OrtArenaCfg:
    """An arena configuration for :func:`create_and_register_allocator`: kept, not used
    (numpy allocates onnxplex's tensors). Built from the four classic settings in order, or
    from a dict of any of :data:`ARENA_SETTINGS`; unset ones are -1 (the default)."""

    ARENA_SETTINGS = ("max_mem", "arena_extend_strategy", "initial_chunk_size_bytes",
                      "max_dead_bytes_per_chunk", "initial_growth_chunk_size_bytes",
                      "max_power_of_two_extend_bytes")

    def __init__(self, *args: Any) -> None:
        if len(args) == 1 and isinstance(args[0], dict):
            given = dict(args[0])
            for key in given:
                if key not in self.ARENA_SETTINGS:
                    raise as_status(InvalidArgumentError, RuntimeError)(
                        f"Invalid OrtArenaCfg option: {key}")
        elif len(args) == 4:
            given = dict(zip(self.ARENA_SETTINGS, args))
        else:
            raise as_status(InvalidArgumentError, TypeError)(
                "OrtArenaCfg takes a dict of settings or (max_mem, arena_extend_strategy, "
                "initial_chunk_size_bytes, max_dead_bytes_per_chunk)")
        for name in self.ARENA_SETTINGS:
            setattr(self, name, int(given.get(name, -1)))


def create_and_register_allocator(mem_info: OrtMemoryInfo, arena_cfg: OrtArenaCfg | None
                                  ) -> None:
    """Register a shared allocator (``session.use_env_allocators``): onnxplex's memory is
    numpy's, so a CPU allocator is accepted and changes nothing; another device's is refused,
    as a CPU build of onnxruntime refuses it."""
    if not isinstance(mem_info, OrtMemoryInfo):
        raise as_status(InvalidArgumentError, TypeError)(
            f"create_and_register_allocator takes an OrtMemoryInfo, got "
            f"{type(mem_info).__name__}")
    if mem_info._device_type != OrtMemoryInfoDeviceType.CPU:
        raise as_status(InvalidArgumentError, RuntimeError)(
            f"cannot register an allocator for {mem_info.name!r}: onnxplex runs on the CPU")


def create_and_register_allocator_v2(provider_type: str, mem_info: OrtMemoryInfo,
                                     provider_options: dict[str, str],
                                     arena_cfg: OrtArenaCfg | None) -> None:
    """:func:`create_and_register_allocator` for a named provider's allocator."""
    create_and_register_allocator(mem_info, arena_cfg)


class OrtHardwareDevice:
    """A piece of hardware an execution provider runs on (here: the CPU)."""

    def __init__(self, type: OrtHardwareDeviceType, vendor: str, vendor_id: int,
                 device_id: int, metadata: dict[str, str]) -> None:
        self.type, self.vendor, self.vendor_id = type, vendor, vendor_id
        self.device_id, self.metadata = device_id, metadata


class OrtEpDevice:
    """An execution provider on a device, as ``get_ep_devices()`` lists them."""

    def __init__(self, ep_name: str, ep_vendor: str, device: OrtHardwareDevice) -> None:
        self.ep_name, self.ep_vendor, self.device = ep_name, ep_vendor, device
        self.ep_metadata: dict[str, str] = {}
        self.ep_options: dict[str, str] = {}

    def memory_info(self, memory_type: OrtDeviceMemoryType = OrtDeviceMemoryType.DEFAULT
                    ) -> OrtMemoryInfo:
        return cpu_memory_info()

    def __repr__(self) -> str:
        return f"OrtEpDevice(ep_name={self.ep_name!r}, device=CPU)"


def get_ep_devices() -> list[OrtEpDevice]:
    """Each available provider on this machine's CPU, the default CPU provider last."""
    import platform

    from .ortcompat import get_available_providers

    cpu = OrtHardwareDevice(OrtHardwareDeviceType.CPU, platform.processor() or "", 0, 0, {})
    return [OrtEpDevice(name, "onnxplex", cpu) for name in get_available_providers()]
