"""GPU and topology facts for `unishmem info`, from the vendors' own Python bindings: cuda-bindings
(cuda-python's driver API and NVML) for NVIDIA GPUs, hip-python for AMD GPUs. Both are optional (the
`cuda` and `rocm` extras) and imported only here, when info asks; where a package, a driver or a device
is missing the report says which, instead of failing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# hsa_amd_link_info_type_t (ROCm's hsa_ext_amd.h), what hipExtGetLinkTypeAndHopCount returns
_HSA_LINK_TYPES = {0: "HyperTransport", 1: "QPI", 2: "PCIe", 3: "InfiniBand", 4: "xGMI"}
_NVML_FEATURE_ENABLED = 1  # nvmlEnableState_t: an active NVLink


class _CallFailed(Exception):
    """A binding call returned an error status."""


def _caller(success: Any) -> Callable[..., Any]:
    """Both bindings return (status, *values): the values, or _CallFailed naming the call and the status."""

    def call(fn: Callable[..., Any], *args: Any) -> Any:
        status, *values = fn(*args)
        if status != success:
            raise _CallFailed(f"{fn.__name__}{args}: {getattr(status, 'name', status)}")
        return values[0] if len(values) == 1 else tuple(values)

    return call


def _text(value: Any) -> str:
    return value.split(b"\0", 1)[0].decode() if isinstance(value, bytes) else str(value)


def _peer_matrix(count: int, can_access: Callable[[int, int], bool]) -> list[str]:
    """Rows of who reads whose memory directly: row i, column j is whether GPU i can access GPU j."""
    lines = ["peer access (row GPU reads column GPU's memory):", "      " + " ".join(f"{j:>3}" for j in range(count))]
    for i in range(count):
        cells = ("  -" if i == j else ("yes" if can_access(i, j) else " no") for j in range(count))
        lines.append(f"  {i:>3} " + " ".join(cells))
    return lines


def nvidia() -> tuple[str, list[str]]:
    """(title, lines): the NVIDIA GPUs the driver sees, their peer access and their NVLinks."""
    try:
        import cuda.bindings
        from cuda.bindings import driver
    except ImportError as e:
        return "NVIDIA GPUs:", [f"cuda-bindings is not installed ({e}): `pip install 'unishmem[cuda]'` to list them"]
    except Exception as e:  # noqa: BLE001 - installed, but does not load here
        return "NVIDIA GPUs (cuda-bindings):", [f"no NVIDIA device: cuda-bindings does not load: {e}"]
    title = f"NVIDIA GPUs (cuda-bindings {cuda.bindings.__version__}):"
    call = _caller(driver.CUresult.CUDA_SUCCESS)
    try:
        call(driver.cuInit, 0)
        count = call(driver.cuDeviceGetCount)
    except Exception as e:  # noqa: BLE001 - no driver library (cuda.pathfinder says so), or no device
        return title, [f"no NVIDIA device: {e}"]
    if count == 0:
        return title, ["no NVIDIA device: the driver sees none"]
    cu_version = call(driver.cuDriverGetVersion)
    lines = [f"driver: CUDA {cu_version // 1000}.{cu_version % 1000 // 10}"]
    devices = [call(driver.cuDeviceGet, i) for i in range(count)]
    buses = []
    for i, dev in enumerate(devices):
        major = call(
            driver.cuDeviceGetAttribute, driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
        )
        minor = call(
            driver.cuDeviceGetAttribute, driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
        )
        buses.append(_text(call(driver.cuDeviceGetPCIBusId, 64, dev)))
        lines.append(f"GPU {i}: {_text(call(driver.cuDeviceGetName, 256, dev))}, sm_{major}{minor}, PCI {buses[-1]}")
    lines += _peer_matrix(count, lambda i, j: bool(call(driver.cuDeviceCanAccessPeer, devices[i], devices[j])))
    return title, lines + _nvlinks(buses)


def _nvlinks(buses: list[str]) -> list[str]:
    """One line per GPU: its active NVLinks, their version and what they reach (NVML)."""
    try:
        from cuda.bindings import nvml

        nvml.init_v2()
    except Exception as e:  # noqa: BLE001 - NVML's library, or numpy (which cuda.bindings.nvml imports), missing
        return [f"NVLink: not known, NVML is unavailable: {e}"]
    lines = []
    try:
        for i, bus in enumerate(buses):
            handle = nvml.device_get_handle_by_pci_bus_id_v2(bus)
            links, active, versions, remotes = 0, 0, set(), set()
            for link in range(nvml.NVLINK_MAX_LINKS):
                try:
                    state = nvml.device_get_nvlink_state(handle, link)
                except nvml.NvmlError:  # not a link of this GPU
                    continue
                links += 1
                if state != _NVML_FEATURE_ENABLED:
                    continue
                active += 1
                version = nvml.NvlinkVersion(nvml.device_get_nvlink_version(handle, link)).name
                versions.add(version.removeprefix("NVLINK_VERSION_").replace("_", "."))
                try:
                    remotes.add(nvml.IntNvLinkDeviceType(nvml.device_get_nvlink_remote_device_type(handle, link)).name)
                except nvml.NvmlError:
                    pass  # drivers before R535 cannot say
            if links == 0:
                lines.append(f"NVLink: GPU {i}: none")
                continue
            to = f", to {'/'.join(sorted(remotes))}" if remotes else ""
            lines.append(
                f"NVLink: GPU {i}: {active} of {links} links active, version {'/'.join(sorted(versions)) or '-'}{to}"
            )
    finally:
        nvml.shutdown()
    return lines


def amd() -> tuple[str, list[str]]:
    """(title, lines): the AMD GPUs HIP sees, their peer access and the link between each pair."""
    try:
        from hip import hip
    except ImportError as e:
        return "AMD GPUs:", [f"hip-python is not installed ({e}): `pip install 'unishmem[rocm]'` to list them"]
    except Exception as e:  # noqa: BLE001 - installed, but its HIP runtime does not load
        return "AMD GPUs (hip-python):", [f"no AMD device: hip-python does not load: {e}"]
    title = "AMD GPUs (hip-python):"
    call = _caller(hip.hipError_t.hipSuccess)
    try:
        count = call(hip.hipGetDeviceCount)
    except Exception as e:  # noqa: BLE001 - no HIP runtime library, or no device
        return title, [f"no AMD device: {e}"]
    if count == 0:
        return title, ["no AMD device: HIP sees none"]
    lines = []
    for i in range(count):
        props = call(hip.hipGetDeviceProperties, i)
        lines.append(f"GPU {i}: {_text(props.name)}, {_text(props.gcnArchName)}")
    lines += _peer_matrix(count, lambda i, j: bool(call(hip.hipDeviceCanAccessPeer, i, j)))
    for i in range(count):
        for j in range(i + 1, count):
            kind, hops = call(hip.hipExtGetLinkTypeAndHopCount, i, j)
            lines.append(f"link: GPU {i} - GPU {j}: {_HSA_LINK_TYPES.get(kind, f'type {kind}')}, {hops} hop(s)")
    return title, lines
