r"""Where a run happens (chapter 6): the device, its number format, its threads and its peak.

- **Precision.** ``"bf16"`` runs the forward pass under ``torch.autocast(dtype=bfloat16)``:
  products take bf16 inputs and accumulate in float32; weights, gradients, optimizer state and
  loss stay float32 (float32's exponent: no loss scaling). It can pay only where bf16 is native
  (CUDA Ampere+; AVX-512 BF16, AMX), and on a CPU not even there: ``"auto"`` measures it.
- **Threads.** One per physical core on the command line: a core's hardware threads share
  its vector units. The notebooks keep one, as float32 sums round differently with two.
- **MFU** divides the achieved FLOP/s by a peak: a GPU's data sheet, or on a CPU, which has
  no comparable number, a *measured* fp32 matmul ceiling.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import time
from pathlib import Path

import torch

from .checks import check_float

__all__ = [
    "GPU_PEAK_FLOPS",
    "ddp_ranks",
    "resolve_precision",
    "measure_precision",
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

#: ``"auto"`` on a CPU with native bf16 measures from this width up; narrower models (``tiny``,
#: the chapters') run float32 unmeasured: too small to gain, and no timing race in the book.
CPU_BF16_MIN_D_MODEL = 128


def ddp_ranks() -> tuple[int, int, int]:
    """``(rank, local_rank, world_size)`` from torchrun's environment; ``(0, 0, 1)`` without it."""
    env = {k: os.environ.get(k, "0") for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    if bad := next((k for k, v in env.items() if not v.strip().isdecimal()), None):
        raise ValueError(f"environment variable {bad} must be an integer >= 0, got {env[bad]!r}")
    rank, local_rank, world = (int(v) for v in env.values())
    return (rank, local_rank, world) if world > 1 else (0, 0, 1)


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


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 in hardware (CUDA Ampere+; AVX-512 BF16 or AMX)."""
    cuda = device.type == "cuda"  # is_bf16_supported(): False without CUDA
    return torch.cuda.is_bf16_supported() if cuda else any(cpu_bf16_features().values())


def resolve_precision(
    precision: str, device: torch.device, d_model: int | None = None
) -> str | None:
    """``"fp32"``, ``"bf16"``, or ``None`` where only :func:`measure_precision` can tell: ``"auto"``
    on a CPU with native bf16 from ``CPU_BF16_MIN_D_MODEL`` up; elsewhere bf16 on a CUDA GPU with
    it, else fp32. A forced ``"bf16"`` runs where a CPU emulates it (slowly), not on a CUDA GPU
    without it. ``precision``: as ``TrainConfig`` checked it; ``device``: resolved."""
    native = native_bf16(device)
    if precision == "bf16" and device.type == "cuda" and not native:
        raise ValueError("precision='bf16' was forced, but this CUDA GPU has no bf16 support")
    if precision != "auto":
        return precision
    if device.type == "cuda" or not native:
        return "bf16" if native else "fp32"
    return None if d_model is None or d_model >= CPU_BF16_MIN_D_MODEL else "fp32"


def measure_precision(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, clock=time.perf_counter
) -> tuple[str, dict[str, float]]:
    """The faster precision for a forward and backward pass of ``model(x, y)``, and each one's
    best time (s) of 3, interleaved, after an untimed pass each: 8 passes (the ``cpu`` preset:
    0.7 s of one core). Flags do not tell: bf16 made it 1.29x faster on an AMD EPYC and 1.46x
    slower on an Intel Xeon with AMX (issue 37). Near ties (3%): float32. Keeps RNG and weights."""
    device, rng, times = x.device, torch.get_rng_state(), {"fp32": math.inf, "bf16": math.inf}
    order = ["fp32", "bf16"] + ["fp32", "bf16", "bf16", "fp32", "fp32", "bf16"]  # each goes first
    for i, precision in enumerate(order):
        t0 = clock()
        with autocast(precision, device):
            loss = model(x, y)[1]
        loss.backward()
        if i >= 2:  # not the first pass of each (kernel choice, allocation)
            times[precision] = min(times[precision], clock() - t0)
    model.zero_grad(set_to_none=True)
    torch.set_rng_state(rng)  # dropout's draws: the run's stream is untouched
    bf16 = torch.tensor([float(times["bf16"] < 0.97 * times["fp32"])], device=device)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.broadcast(bf16, 0)  # under torchrun, rank 0's choice holds
    return ("bf16" if bf16.item() else "fp32"), times


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context a forward pass runs in: bf16 autocast for ``"bf16"``, nothing for ``"fp32"``."""
    if precision == "bf16":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def log_label(precision: str, device: torch.device) -> str:
    """The log's ``dtype``: ``"float32"``, ``"bfloat16 autocast (avx512_bf16)"``, ..."""
    if precision == "fp32" or torch.device(device).type == "cuda":
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
