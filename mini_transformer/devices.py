r"""Where a run happens: the device, its peak FLOP/s, and one record of where it ran.

Shared by the training command line, the repository's sweeps behind the committed results
(``tools/``: the chapter-3 lab, the chapter-4 score functions, the chapter-5 sweep) and the
benchmarks that write a result, so that every result file says where it ran in the same
words (:func:`where_it_ran`).

MFU (model FLOPs utilisation) divides the FLOP/s a run achieves by the device's peak. On a
GPU the peak is the vendor's data sheet (dense bf16 tensor cores, :data:`GPU_PEAK_FLOPS`;
the H100 SXM and PCIe differ by a third, so the name decides). A CPU has no comparable
number, so there the ratio is taken against a *measured* ceiling, the best rate of a large
fp32 matmul on the same threads (:func:`measure_matmul_flops`): a share of what this CPU's
best kernel reaches, not a fraction of a hardware peak.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path

import torch

from .checks import check_float

__all__ = [
    "GPU_PEAK_FLOPS",
    "gpu_peak_flops",
    "measure_matmul_flops",
    "peak_flops",
    "resolve_device",
    "device_name",
    "where_it_ran",
]

#: Dense bf16 tensor-core peaks (FLOP/s, without sparsity) from the vendors' data sheets.
#: ``"H100"`` is the SXM part (the one the committed model trained on).
GPU_PEAK_FLOPS = {
    "H100": 989e12,
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H200": 989e12,
    "H200 NVL": 835e12,
    "GH200": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L40": 181e12,
    "L4": 121e12,
    "A10": 125e12,
}

# (substrings that must all occur in the device name, key of GPU_PEAK_FLOPS), most specific
# first: "NVIDIA H100 PCIe" must not match the SXM entry, nor "NVIDIA L40S" the L4's.
_GPU_NAMES = (
    (("GH200",), "GH200"),
    (("H100", "PCIe"), "H100 PCIe"),
    (("H100", "NVL"), "H100 NVL"),
    (("H100",), "H100"),
    (("H200", "NVL"), "H200 NVL"),
    (("H200",), "H200"),
    (("A100",), "A100"),
    (("L40S",), "L40S"),
    (("L40",), "L40"),
    (("L4",), "L4"),
    (("A10",), "A10"),
)


def gpu_peak_flops(name: str) -> tuple[float | None, str]:
    """Data-sheet bf16 peak of the GPU called ``name`` and which entry matched.

    >>> gpu_peak_flops("NVIDIA H100 PCIe")
    (756000000000000.0, 'data sheet, bf16 dense (H100 PCIe)')
    >>> gpu_peak_flops("NVIDIA H100 80GB HBM3")[1]
    'data sheet, bf16 dense (H100)'
    >>> gpu_peak_flops("Tesla T4")
    (None, "unknown GPU 'Tesla T4': pass --peak-tflops")
    """
    for parts, key in _GPU_NAMES:
        if all(p.lower() in name.lower() for p in parts):
            return GPU_PEAK_FLOPS[key], f"data sheet, bf16 dense ({key})"
    return None, f"unknown GPU {name!r}: pass --peak-tflops"


def measure_matmul_flops(
    n: int = 1024, repeats: int = 5, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> float:
    """The machine's matmul ceiling: best FLOP/s of ``repeats`` timed ``n x n`` products.

    A square matmul is the most efficient thing a CPU or GPU does, so its rate is a
    realistic ceiling to measure a training step against. Uses the current
    ``torch.get_num_threads()`` and a private random generator (the global RNG, which
    drives dropout, is left alone).
    """
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    inner = max(1, int(2e9 // (2 * n**3)))  # about 2 GFLOP per timing
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            a @ b
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 * inner / best


def peak_flops(device: torch.device, given: float | None = None) -> tuple[float | None, str]:
    """Peak FLOP/s of one device for MFU, and where the number comes from.

    ``given``: a known peak (a finite number > 0), used as it is; ``None`` looks it up or
    measures it.
    """
    if given is not None:
        return check_float("given", given, low=0, low_open=True), "given"
    if device.type == "cuda":
        return gpu_peak_flops(torch.cuda.get_device_name(device))
    return measure_matmul_flops(), (
        f"measured: fp32 1024x1024 matmul, {torch.get_num_threads()} thread(s); the 'mfu' "
        "of a CPU run is a share of this measured ceiling, not of a hardware peak; "
        "re-measured at each evaluation, the best so far is used (a shared CPU's rate "
        "varies with its load)"
    )


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``"auto"`` (CUDA if available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` as a device."""
    if not isinstance(name, str):
        raise TypeError(f"device must be a str, got {type(name).__name__}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {name!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} requested but CUDA is not available")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device


def device_name(device: torch.device | str = "cpu") -> str:
    """``"NVIDIA H100 80GB HBM3"`` or ``"CPU (<model name>, <n> cores)"``."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return f"CPU ({name}, {os.cpu_count()} cores)"


def where_it_ran(device: torch.device | str = "cpu") -> dict:
    """The record every result file carries: device, threads, library versions, platform."""
    device = torch.device(device)
    return {
        "device": device_name(device),
        "device_type": device.type,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
