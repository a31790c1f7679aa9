"""Benchmark: multi-head self-attention, from scratch vs fused vs ``nn.MultiheadAttention``.

For each sequence length T this measures, for one forward + backward pass of causal
self-attention on a batch ``(B, T, d_model)``:

- time: the median and the quartiles (the inter-quartile range, IQR) over ``--repeats`` runs
  after ``--warmup`` runs, and the quartiles of from scratch's time over fused's within each
  repeat (``scratch_over_fused_paired``: the spread of the ratio itself);
- peak memory: the peak of bytes allocated by torch's CPU allocator during the pass, above
  what was allocated before it (from the profiler's allocation events, ``profile_memory=True``;
  measured in a separate, untimed pass). It counts every tensor the pass creates: projections,
  scores and weights kept for backward, gradients.

Variants:

- ``scratch``: ``MultiHeadAttention(fused_attention=False)``: scores, softmax and weights are
  materialised as ``(B, h, T, T)`` tensors and saved for backward.
- ``fused``: ``MultiHeadAttention(fused_attention=True)``: ``F.scaled_dot_product_attention`` (a
  flash-attention style kernel on CPU: no ``(T, T)`` tensor is kept).
- ``fused-qkv``: the fused path with q, k and v from one matmul with the three weights
  concatenated (as ``nn.MultiheadAttention`` does) instead of ``MultiHeadAttention``'s three.
- ``torch``: ``nn.MultiheadAttention(batch_first=True)`` with the same weights,
  ``need_weights=False``, ``is_causal=True``.

Run (takes a few minutes on 1 CPU thread)::

    .venv/bin/python benchmarks/attention.py
    .venv/bin/python benchmarks/attention.py --T 64 128 --repeats 3 --json out.json
    python benchmarks/attention.py --device cuda --dtype bfloat16 --T 1024 2048 4096 8192

On CUDA the peak is ``torch.cuda.max_memory_allocated`` above the memory in use before the
pass, and each timed run is bracketed by ``torch.cuda.synchronize()``.

Timings on a shared machine are noisy: compare ratios within one run, not across runs, and
only where the IQRs do not overlap. The result records the command, the git commit (and whether
the tree had uncommitted changes), the date, the load average before and after, and
:func:`~mini_transformer.hardware.where_it_ran`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from mini_transformer.attention import MultiHeadAttention
from mini_transformer.checkpoints import check_output_file
from mini_transformer.checks import check_device
from mini_transformer.cli import positive_int, run_cli
from mini_transformer.hardware import cpu_name, where_it_ran

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sweep_cli import command_line, non_negative_int, write_json  # noqa: E402  (tools/)

ROOT = Path(__file__).resolve().parents[1]


class ConcatQKVMHA(MultiHeadAttention):
    """The fused path, with q, k and v from one matmul with the concatenated weights (plain
    self-attention only; anything else runs the parent's forward). It overrides ``forward``:
    ``MultiHeadAttention`` has no projection hook to override (the stored runs of 22 Nov
    used one, ``_project``, since removed; tests/test_benchmarks.py holds that it packs)."""

    def forward(self, x, memory=None, mask=None, causal=False, score_bias=None, **kw):
        if memory is not None or mask is not None or score_bias is not None or kw:
            return super().forward(x, memory, mask, causal, score_bias, **kw)
        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        b = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        B, T, _ = x.shape
        qkv = F.linear(x, w, b).view(B, T, 3, self.n_heads, self.d_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, h, T, d_head)
        p = self.dropout_p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, self.d_model)), None


def make_variants(
    d_model: int, n_heads: int, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> dict[str, tuple[nn.Module, callable]]:
    torch.manual_seed(0)
    ours = MultiHeadAttention(d_model, n_heads)
    concat = ConcatQKVMHA(d_model, n_heads)
    concat.load_state_dict(ours.state_dict())
    ref = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
        )
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.load_state_dict(ours.out_proj.state_dict())
    scratch = MultiHeadAttention(d_model, n_heads, fused_attention=False)
    scratch.load_state_dict(ours.state_dict())
    for m in (ours, concat, ref, scratch):
        m.to(device=device, dtype=dtype)
    masks: dict[int, torch.Tensor] = {}

    def torch_call(x, causal):
        T = x.shape[1]
        if not causal:
            return ref(x, x, x, need_weights=False)[0]
        if T not in masks:  # nn.MultiheadAttention wants the mask as a hint; True = blocked
            masks[T] = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        return ref(x, x, x, need_weights=False, attn_mask=masks[T], is_causal=True)[0]

    return {
        "scratch": (scratch, lambda x, causal: scratch(x, causal=causal)[0]),
        "fused": (ours, lambda x, causal: ours(x, causal=causal)[0]),
        "fused-qkv": (concat, lambda x, causal: concat(x, causal=causal)[0]),
        "torch": (ref, torch_call),
    }


def sync(x: torch.Tensor) -> None:
    if x.is_cuda:
        torch.cuda.synchronize(x.device)


def step(module: nn.Module, call, x: torch.Tensor, causal: bool) -> None:
    module.zero_grad(set_to_none=True)
    x.grad = None
    call(x, causal).float().sum().backward()


def time_steps(variants, x, causal, warmup: int, repeats: int) -> dict[str, list[float]]:
    """The seconds per forward + backward of each variant, one entry per repeat.

    The variants take turns within each repeat (round robin), so a burst of load from other
    processes on a shared machine slows all of them alike instead of one.
    """
    for _ in range(warmup):
        for module, call in variants.values():
            step(module, call, x, causal)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, (module, call) in variants.items():
            sync(x)
            t0 = time.perf_counter()
            step(module, call, x, causal)
            sync(x)
            times[name].append(time.perf_counter() - t0)
    return times


def peak_bytes(module, call, x, causal) -> int:
    """Peak bytes allocated (above the starting point) during one forward + backward."""
    module.zero_grad(set_to_none=True)
    x.grad = None
    if x.is_cuda:
        sync(x)
        torch.cuda.reset_peak_memory_stats(x.device)
        before = torch.cuda.memory_allocated(x.device)
        step(module, call, x, causal)
        sync(x)
        return torch.cuda.max_memory_allocated(x.device) - before
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call(x, causal).sum().backward()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    current = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        current += e.nbytes()  # positive for an allocation, negative for a free
        peak = max(peak, current)
    return peak


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--T", type=positive_int, nargs="+", default=[64, 128, 256, 512, 1024])
    p.add_argument("--B", type=positive_int, default=8)
    p.add_argument("--d-model", type=positive_int, default=256)
    p.add_argument("--heads", type=positive_int, default=4)
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--warmup", type=non_negative_int, default=2)
    p.add_argument("--repeats", type=positive_int, default=7)
    p.add_argument("--no-causal", action="store_true", help="unmasked self-attention")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--overwrite", action="store_true", help="--json may be a committed result")
    return p


def measure_row(variants: dict, T: int, args, dtype: torch.dtype, causal: bool) -> dict:
    """Median times and their IQRs (ms) and allocator peaks (MiB) of every variant at ``T``."""
    g = torch.Generator().manual_seed(T)
    x = torch.randn(args.B, T, args.d_model, generator=g).to(args.device, dtype)
    x.requires_grad_(True)
    times = time_steps(variants, x, causal, args.warmup, args.repeats)
    quartiles = {n: [float(v) for v in np.percentile(t, [25, 50, 75])] for n, t in times.items()}
    # the ratio within each repeat (the variants ran back to back), so its spread is the ratio's
    ratio = np.percentile(np.array(times["scratch"]) / np.array(times["fused"]), [25, 50, 75])
    ms = {n: 1e3 * q[1] for n, q in quartiles.items()}
    mib = {n: peak_bytes(m, c, x, causal) / 2**20 for n, (m, c) in variants.items()}
    return {
        "T": T,
        "ms": ms,
        "ms_iqr": {n: [1e3 * q[0], 1e3 * q[2]] for n, q in quartiles.items()},
        "peak_mib": mib,
        "fused_over_torch": ms["fused"] / ms["torch"],
        "fusedqkv_over_torch": ms["fused-qkv"] / ms["torch"],
        "scratch_over_fused": ms["scratch"] / ms["fused"],
        "scratch_over_fused_paired": [float(v) for v in ratio],  # quartiles of per-repeat ratios
        "mem_scratch_over_fused": mib["scratch"] / mib["fused"],
    }


def print_header(names: list[str], args, causal: bool, gpu: str | None) -> None:
    print(
        f"torch {torch.__version__} | threads {torch.get_num_threads()} | CPU: {cpu_name()}"
        + (f" | GPU: {gpu}" if gpu else "")
        + f" | {args.dtype}"
    )
    print(
        f"{'causal ' if causal else ''}self-attention, forward + backward, B={args.B}, "
        f"d_model={args.d_model}, n_heads={args.heads}; time = median of {args.repeats} "
        f"(variants in turn) after {args.warmup} warm-up runs; "
        "peak = allocator peak during one pass"
    )
    header = (
        f"{'T':>5} | "
        + " | ".join(f"{n + ' ms':>12}" for n in names)
        + " | fused/torch | qkv/torch | scratch/fused | "
        + " | ".join(f"{n + ' MiB':>12}" for n in names)
        + " | mem scratch/fused"
    )
    print(header)
    print("-" * len(header))


def print_row(row: dict, names: list[str]) -> None:
    ms, mib = row["ms"], row["peak_mib"]
    print(
        f"{row['T']:>5} | "
        + " | ".join(f"{ms[n]:>12.2f}" for n in names)
        + f" | {row['fused_over_torch']:>11.2f} | {row['fusedqkv_over_torch']:>9.2f}"
        + f" | {row['scratch_over_fused']:>13.2f} | "
        + " | ".join(f"{mib[n]:>12.1f}" for n in names)
        + f" | {row['mem_scratch_over_fused']:>17.1f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> dict:
    p = parser()
    args = p.parse_args(argv)

    def check() -> None:
        check_device("--device", args.device)  # "tpu" or a missing GPU: exit 2, no work
        if args.json:
            check_output_file(args.json, overwrite=args.overwrite)

    return run_cli(p, check, lambda _: _run(args, command_line("benchmarks/attention.py", argv)))


def git_commit() -> str:
    """The commit the benchmark ran from, with ``+uncommitted`` when the tree differed from it."""
    try:
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "-uno"], capture_output=True, text=True
        )
    except OSError:
        return "unknown (no git)"
    return head.stdout.strip() + ("+uncommitted" if dirty.stdout.strip() else "") or "unknown"


def _run(args, command: str) -> dict:
    load_before, commit = os.getloadavg(), git_commit()  # the code that runs, before it runs
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    torch.set_num_threads(args.threads)
    causal = not args.no_causal
    dtype = getattr(torch, args.dtype)
    variants = make_variants(args.d_model, args.heads, args.device, dtype)
    gpu = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else None
    names = list(variants)
    print_header(names, args, causal, gpu)
    rows = []
    for T in args.T:
        rows.append(measure_row(variants, T, args, dtype, causal))
        print_row(rows[-1], names)
    result = {
        "command": command,
        "commit": commit,
        "date": date,
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": cpu_name(),
        "gpu": gpu,
        "dtype": args.dtype,
        "B": args.B,
        "d_model": args.d_model,
        "n_heads": args.heads,
        "causal": causal,
        "repeats": args.repeats,
        "rows": rows,
        "where_it_ran": where_it_ran(args.device),
    }
    if args.json:
        write_json(result, args.json)
    return result


if __name__ == "__main__":
    main()
