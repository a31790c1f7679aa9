r"""Where a run happens (chapter 6): the device, its number format, its threads and its peak.

- **Precision.** ``"bf16"`` runs the forward pass under ``torch.autocast(dtype=bfloat16)``:
  products take bf16 inputs and accumulate in float32; weights, gradients, optimizer state
  and loss stay float32 (bf16 keeps float32's exponent, so no loss scaling). It pays only
  where the hardware multiplies bf16 natively (CUDA Ampere+; AVX-512 BF16 or AMX on x86).
- **Threads.** One per physical core on the command line: a core's hardware threads share
  its vector units. The notebooks keep one, as float32 sums round differently with two.
- **MFU** divides the achieved FLOP/s by a peak: a GPU's data sheet, or on a CPU, which has
  no comparable number, a *measured* fp32 matmul ceiling.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path

import torch

from .checks import check_float, check_int

__all__ = [
    "GPU_PEAK_FLOPS",
    "ddp_ranks",
    "resolve_device",
    "resolve_precision",
    "log_label",
    "cpu_name",
    "cpu_bf16_features",
    "autocast",
    "physical_cores",
    "measure_matmul_flops",
    "peak_flops",
    "where_it_ran",
]

#: Dense bf16 tensor-core peaks (FLOP/s) from the data sheets; ``"H100"`` is the SXM part. A
#: GPU takes the first entry whose words all occur in its name: the most specific come first.
GPU_PEAK_FLOPS = {
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,
    "H200 NVL": 835e12,
    "H200": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L40": 181e12,
    "L4": 121e12,
    "A10": 125e12,  # after A100, which contains "A10"
}

PRECISIONS = ("auto", "fp32", "bf16")

#: ``"auto"`` on a CPU with native bf16 picks bf16 from this width up. On an AMD EPYC (Zen 5,
#: AVX-512 BF16) bf16 made a step 1.22x faster at d_model 128 on 2 threads
#: (``benchmarks/results/cpu_step_ab_2threads.json``) and 1.86x at d_model 384 on one
#: (``train_step_1thread_cpuclock.json``). Narrower models (``tiny``, the chapters'
#: experiments) stay float32: not measured there, and stored outputs must not change.
CPU_BF16_MIN_D_MODEL = 128


def ddp_ranks() -> tuple[int, int, int]:
    """``(rank, local_rank, world_size)`` from torchrun's environment; ``(0, 0, 1)`` without it."""
    env = {k: os.environ.get(k, "0") for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    if bad := next((k for k, v in env.items() if not v.strip().isdecimal()), None):
        raise ValueError(f"environment variable {bad} must be an integer >= 0, got {env[bad]!r}")
    rank, local_rank, world = (int(v) for v in env.values())
    return (rank, local_rank, world) if world > 1 else (0, 0, 1)


def resolve_device(
    device: str | torch.device, local_rank: int = 0, *, here: bool = True
) -> torch.device:
    """A run's device, ``"auto"``, ``"cpu"``, ``"cuda"`` (``cuda:<local_rank>``) or ``"cuda:N"``;
    ``checks.check_device`` takes any device a tensor may go to, but not ``"auto"`` or a rank.
    ``here=False`` only parses (a config may name a GPU this machine lacks)."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str, got {type(device).__name__}")
    name = device
    if device == "auto":
        device = "cuda" if here and torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {str(name)!r}")
    if here and device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(name)!r} requested but CUDA is not available")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device


def _cpuinfo() -> str:
    """The text of ``/proc/cpuinfo`` (empty where there is none): the one reader."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_name() -> str:
    """The CPU's model name, e.g. ``"AMD EPYC 9B45"``."""
    lines = _cpuinfo().splitlines()
    names = [s.partition(":")[2].strip() for s in lines if s.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def cpu_bf16_features() -> dict[str, bool]:
    """The CPU's native bf16 instructions as PyTorch detects them (False where it cannot ask)."""

    def ask(name: str) -> bool:  # a private function some torch versions lack
        return bool(getattr(torch.cpu, name, lambda: False)())

    return {"avx512_bf16": ask("_is_avx512_bf16_supported"), "amx": ask("_is_amx_tile_supported")}


def native_bf16(device: str | torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 in hardware (CUDA Ampere+; AVX-512 BF16 or AMX)."""
    if resolve_device(device, here=False).type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return any(cpu_bf16_features().values())


def resolve_precision(
    precision: str, device: str | torch.device, d_model: int | None = None, native=None
) -> str:
    """``"fp32"`` or ``"bf16"``. ``"auto"`` picks bf16 only where it is native, and on a CPU
    only from ``CPU_BF16_MIN_D_MODEL`` up. A forced ``"bf16"`` runs where a CPU emulates
    it (slowly), not on a CUDA GPU without it. ``native`` overrides the detection (tests)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if d_model is not None:
        check_int("d_model", d_model, low=1, why=" or None")
    device = resolve_device(device, here=False)
    native = native_bf16(device) if native is None else native
    if precision == "bf16" and device.type == "cuda" and not native:
        raise ValueError("precision='bf16' was forced, but this CUDA GPU has no bf16 support")
    if precision != "auto":
        return precision
    narrow = device.type == "cpu" and d_model is not None and d_model < CPU_BF16_MIN_D_MODEL
    return "bf16" if native and not narrow else "fp32"


def _resolved(precision: str, device: str | torch.device) -> torch.device:
    if precision not in ("fp32", "bf16"):
        raise ValueError(
            f"precision must be a resolved precision, 'fp32' or 'bf16', got {precision!r}"
        )
    return resolve_device(device, here=False)


def autocast(precision: str, device: str | torch.device) -> contextlib.AbstractContextManager:
    """The context a forward pass runs in: bf16 autocast for ``"bf16"``, nothing for ``"fp32"``."""
    device = _resolved(precision, device)
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def log_label(precision: str, device: str | torch.device) -> str:
    """The log's ``dtype``: ``"float32"``, ``"bfloat16 autocast (avx512_bf16)"``, ..."""
    if precision == "fp32" or _resolved(precision, device).type == "cuda":
        return "float32" if precision == "fp32" else "bfloat16 autocast"
    features = [k for k, v in cpu_bf16_features().items() if v]
    return f"bfloat16 autocast ({', '.join(features) or 'emulated: no native bf16'})"


def physical_cores(cpuinfo: str | None = None) -> int:
    """Physical cores this process may run on: distinct ``(physical id, core id)`` of the
    allowed CPUs in ``/proc/cpuinfo`` (or ``cpuinfo``); without them, the logical CPUs."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        allowed = list(range(os.cpu_count() or 1))
    cores = {}
    for block in (_cpuinfo() if cpuinfo is None else cpuinfo).split("\n\n"):  # one logical CPU
        info = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in block.split("\n"))}
        if "processor" in info:
            cores[int(info["processor"])] = (info.get("physical id"), info.get("core id"))
    found = [cores[c] for c in allowed if c in cores]
    if not found or any(core is None for _, core in found):
        return max(1, len(allowed))
    return len(set(found))


def gpu_peak_flops(name: str) -> tuple[float | None, str]:
    """Data-sheet bf16 peak of the GPU called ``name`` and which entry matched.

    >>> gpu_peak_flops("NVIDIA H100 PCIe")
    (756000000000000.0, 'data sheet, bf16 dense (H100 PCIe)')
    >>> gpu_peak_flops("Tesla T4")
    (None, "unknown GPU 'Tesla T4': pass --peak-tflops")
    """
    for key, peak in GPU_PEAK_FLOPS.items():
        if all(word.lower() in name.lower() for word in key.split()):
            return peak, f"data sheet, bf16 dense ({key})"
    return None, f"unknown GPU {name!r}: pass --peak-tflops"


def measure_matmul_flops(
    n: int = 1024, repeats: int = 5, dtype: torch.dtype = torch.float32, clock=time.perf_counter
) -> float:
    """Best FLOP/s of ``repeats`` timed ``n x n`` matmuls on the CPU: the most efficient thing it
    does, so a realistic ceiling for a step. Its own generator leaves dropout's RNG alone."""
    a, b = torch.randn(2, n, n, dtype=dtype, generator=torch.Generator().manual_seed(0))
    inner = max(1, int(2e9 // (2 * n**3)))  # about 2 GFLOP per timing
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        for _ in range(inner):
            a @ b
        best = min(best, clock() - t0)
    return 2 * n**3 * inner / best


def peak_flops(device: torch.device, given: float | None = None) -> tuple[float | None, str]:
    """Peak FLOP/s of one device for MFU, and where the number comes from (``given``: the run's
    ``peak_flops`` setting, as is)."""
    if given is not None:
        return check_float("peak_flops", given, low=0, low_open=True), "given"
    if device.type == "cuda":
        return gpu_peak_flops(torch.cuda.get_device_name(device))
    return measure_matmul_flops(), (
        f"measured: fp32 1024x1024 matmul, {torch.get_num_threads()} thread(s); the 'mfu' "
        "of a CPU run is a share of this measured ceiling, not of a hardware peak; "
        "measured once, at the start of the run (a shared CPU's rate varies with its load)"
    )


def where_it_ran(device: torch.device | str = "cpu") -> dict:
    """The record every result file carries: device, threads, library versions, platform."""
    device = torch.device(device)
    cpu = f"CPU ({cpu_name()}, {os.cpu_count()} cores)"
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu,
        "device_type": device.type,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
