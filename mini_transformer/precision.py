r"""Which number format a training step computes in, and on how many CPU threads.

Two choices, made once per run by :mod:`mini_transformer.train`:

- **Precision.** ``"fp32"`` computes everything in float32. ``"bf16"`` runs the forward
  pass under ``torch.autocast(dtype=torch.bfloat16)``: matrix products (linear layers,
  attention) take bfloat16 inputs and accumulate in float32, while the weights, the
  gradients, the optimizer state and the loss stay float32 (bf16 keeps float32's 8-bit
  exponent, so unlike float16 it needs no loss scaling). It pays only where the hardware
  multiplies bfloat16 natively: tensor cores on a CUDA GPU (Ampere and later); on x86
  CPUs the AVX-512 BF16 instructions (``vdpbf16ps``, Intel Cooper Lake / Sapphire Rapids,
  AMD Zen 4 and later) or AMX tiles (Intel Sapphire Rapids and later). Without them the
  bf16 products are computed through software conversions, so float32 is the safe choice
  there. ``"auto"`` picks bf16 where it is native *and* the matrices are large enough for
  the faster multiply to outweigh the casts (see :data:`CPU_BF16_MIN_D_MODEL`), float32
  elsewhere.
- **Threads.** The command line uses one thread per physical core
  (:func:`physical_cores`): the hardware threads of one core share its vector units, the
  resource a training step is limited by. The notebooks keep one thread, because large
  float32 reductions round differently with 1 and 2 threads and their stored outputs
  must be bit-stable.

Example::

    >>> from mini_transformer.precision import resolve_precision, autocast
    >>> p = resolve_precision("auto", "cpu", d_model=128)   # "fp32" or "bf16"
    >>> with autocast(p, "cpu"):
    ...     pass                                             # forward pass here
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

__all__ = [
    "PRECISIONS",
    "CPU_BF16_MIN_D_MODEL",
    "cpu_bf16_features",
    "native_bf16",
    "resolve_precision",
    "autocast",
    "describe",
    "physical_cores",
]

#: Accepted values of ``--precision`` / ``TrainConfig.precision``.
PRECISIONS = ("auto", "fp32", "bf16")

#: ``"auto"`` on a CPU with native bf16 picks bf16 from this width up. On an AMD EPYC
#: (Zen 5, AVX-512 BF16, no AMX), bf16 made a training step faster at every width measured:
#: on 2 threads 1.22x (d_model 128, 2 layers) and 1.24x (d_model 128, 4 layers), minimum
#: wall times of interleaved runs (``benchmarks/results/cpu_step_ab_2threads.json``); on one
#: thread, by CPU time, 1.23x at d_model 128 and 1.86x at the ``gpu`` preset's d_model 384
#: (``benchmarks/results/train_step_1thread_cpuclock.json``). Narrower models (the ``tiny``
#: preset, the chapters' small experiments) stay float32: bf16 was not measured there,
#: and the notebooks' stored outputs must not change.
CPU_BF16_MIN_D_MODEL = 128


def cpu_bf16_features() -> dict[str, bool]:
    """The CPU's native bf16 instructions, as PyTorch detects them.

    Returns ``{"avx512_bf16": ..., "amx": ...}`` (AMX: the tile registers of Intel
    Sapphire Rapids and later, whose ``TDPBF16PS`` multiplies bf16 tiles). A PyTorch too
    old to ask reports ``False``.
    """
    cpu = torch.cpu

    def ask(name: str) -> bool:
        fn = getattr(cpu, name, None)
        return bool(fn()) if callable(fn) else False

    return {"avx512_bf16": ask("_is_avx512_bf16_supported"), "amx": ask("_is_amx_tile_supported")}


def _device(device: str | torch.device) -> torch.device:
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {str(device)!r}")
    return device


def native_bf16(device: str | torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 in hardware.

    CUDA: Ampere or later; CPU: AVX-512 BF16 or AMX (see :func:`cpu_bf16_features`).
    """
    device = _device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return any(cpu_bf16_features().values())


def resolve_precision(
    precision: str,
    device: str | torch.device,
    d_model: int | None = None,
    native: bool | None = None,
) -> str:
    """The precision a run uses: ``"fp32"`` or ``"bf16"``.

    Args:
        precision: ``"auto"``, ``"fp32"`` or ``"bf16"`` (forced: bf16 runs even where the
            CPU emulates it, slowly; on a CUDA GPU without bf16 it is an error).
        device: where the step runs.
        d_model: the model's width; on a CPU, ``"auto"`` picks bf16 only from
            :data:`CPU_BF16_MIN_D_MODEL` up (``None``: no width rule).
        native: override the hardware detection (for tests); ``None`` asks
            :func:`native_bf16`.

    Raises:
        ValueError: ``precision`` is not one of :data:`PRECISIONS`, ``d_model`` is not a
            positive integer, or bf16 is forced on a CUDA GPU that lacks it.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if d_model is not None and (
        isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1
    ):
        raise ValueError(f"d_model must be a positive integer or None, got {d_model!r}")
    device = _device(device)
    if native is None:
        native = native_bf16(device)
    if precision == "fp32":
        return "fp32"
    if precision == "bf16":
        if device.type == "cuda" and not native:
            raise ValueError("precision='bf16' was forced, but this CUDA GPU has no bf16 support")
        return "bf16"
    if not native:
        return "fp32"
    if device.type == "cpu" and d_model is not None and d_model < CPU_BF16_MIN_D_MODEL:
        return "fp32"
    return "bf16"


def autocast(precision: str, device: str | torch.device) -> contextlib.AbstractContextManager:
    """The context a forward pass runs in: bf16 autocast for ``"bf16"``, nothing for ``"fp32"``."""
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision must be 'fp32' or 'bf16' (resolved), got {precision!r}")
    device = _device(device)
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def describe(precision: str, device: str | torch.device) -> str:
    """A line for the metrics log: what ran, and on a CPU which bf16 instructions it had.

    E.g. ``"float32"``, ``"bfloat16 autocast (avx512_bf16)"``. ``precision`` is a resolved
    one (:func:`resolve_precision`): ``"fp32"`` or ``"bf16"``.
    """
    if precision not in ("fp32", "bf16"):
        raise ValueError(
            f"precision must be a resolved precision, 'fp32' or 'bf16', got {precision!r}"
        )
    device = _device(device)
    if precision == "fp32":
        return "float32"
    if device.type == "cuda":
        return "bfloat16 autocast"
    features = [k for k, v in cpu_bf16_features().items() if v]
    return f"bfloat16 autocast ({', '.join(features) or 'emulated: no native bf16'})"


def physical_cores(cpuinfo: str | None = None) -> int:
    """Physical cores this process may run on (hardware threads of one core count once).

    Reads the ``(physical id, core id)`` pairs of ``/proc/cpuinfo`` (or the text given) for
    the logical CPUs in this process's affinity mask; falls back to the number of logical
    CPUs where that information is missing (other systems, some containers).
    """
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        allowed = list(range(os.cpu_count() or 1))
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return max(1, len(allowed))
    cores, cpu = {}, None
    physical = core = None
    for line in cpuinfo.splitlines() + [""]:
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            cpu = int(value)
        elif key == "physical id":
            physical = value
        elif key == "core id":
            core = value
        elif not key and cpu is not None:  # a blank line ends one logical CPU's block
            cores[cpu] = (physical, core) if core is not None else None
            cpu = physical = core = None
    if not cores or any(cores.get(c) is None for c in allowed if c in cores):
        return max(1, len(allowed))
    found = {cores[c] for c in allowed if c in cores}
    return max(1, len(found)) if found else max(1, len(allowed))
