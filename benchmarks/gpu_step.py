"""Tokens/s, step time and MFU of the training step, as the training loop runs it.

Times :func:`mini_transformer.core.train_step` (forward in bf16 autocast on CUDA, backward,
clipping, fused AdamW on CUDA) on batches drawn by :func:`mini_transformer.data.get_batch`
(pinned, non-blocking copies), for a few steps after a warm-up that absorbs compilation,
and reports

    tokens/s = B * T / step time,    MFU = tokens/s * flops_per_token / peak FLOP/s

with the peak from the data sheet of the GPU (:func:`mini_transformer.hardware.peak_flops`,
H100 SXM and PCIe told apart). On a CPU the "MFU" is a share of a matmul ceiling measured
in the same run, and is labelled so. ``--profile`` prints the torch profiler's top items.

Usage::

    python benchmarks/gpu_step.py                               # gpu preset, CUDA
    python benchmarks/gpu_step.py --compile max-autotune-no-cudagraphs --json out.json
    python benchmarks/gpu_step.py --compile reduce-overhead --profile 15
    python benchmarks/gpu_step.py --preset tiny --device cpu --steps 2   # CPU smoke test

Only the steps are timed (the clock stops after ``torch.cuda.synchronize()``); evaluation
and checkpoints are not included, so this is an upper bound for the loop's rate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from mini_transformer import checks
from mini_transformer.checkpoints import check_output_file
from mini_transformer.checks import check_device
from mini_transformer.cli import positive_int, run_cli
from mini_transformer.core import (
    COMPILE_MODES,
    PRESETS,
    configure_optimizer,
    get_preset,
    train_step,
)
from mini_transformer.data import CharTokenizer, get_batch, load_corpus
from mini_transformer.hardware import (
    PRECISIONS,
    log_label,
    measure_precision,
    peak_flops,
    resolve_precision,
    where_it_ran,
)
from mini_transformer.hardware import autocast as precision_autocast
from mini_transformer.model import TransformerLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sweep_cli import write_json  # noqa: E402  (tools/, beside the package)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python benchmarks/gpu_step.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default="gpu")
    p.add_argument("--batch-size", type=positive_int, help="default: the preset's")
    p.add_argument("--steps", type=positive_int, default=20, help="timed steps")
    p.add_argument("--warmup", type=positive_int, default=5, help="untimed steps first")
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", nargs="?", const="default", choices=COMPILE_MODES, metavar="MODE")
    p.add_argument("--precision", choices=PRECISIONS, default="auto")
    p.add_argument(
        "--profile",
        type=positive_int,
        metavar="N",
        help="also print the profiler's N most expensive operators",
    )
    p.add_argument("--json", help="write the results to this file")
    return p


def _setup(args):
    device = check_device("--device", args.device, run=True)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    cfg = get_preset(args.preset, batch_size=args.batch_size, device=str(device))
    tok = CharTokenizer.from_corpus()
    data = tok.encode(load_corpus("train")[:2_000_000])
    if device.type == "cuda":
        data = data.to(device)
    torch.manual_seed(0)
    model = TransformerLM(cfg.model).to(device)
    optimizer = configure_optimizer(model, cfg, fused=device.type == "cuda")
    step_model = torch.compile(model, mode=args.compile) if args.compile else model
    return cfg, device, data, model, optimizer, step_model


def measure(args) -> dict:
    """Run the benchmark; return the results as a dict."""
    cfg, device, data, model, optimizer, step_model = _setup(args)
    g = torch.Generator().manual_seed(0)
    B, T = cfg.batch_size, model.config.block_size
    precision = resolve_precision(args.precision, device, d_model=model.config.d_model)
    if precision is None:  # "auto" on a CPU with native bf16: as the training run decides
        precision = measure_precision(model, *get_batch(data, B, T, g, device))[0]

    def autocast():
        return precision_autocast(precision, device)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step():
        with checks.trusted():  # as the training loop: no per-step checks (ids: a host sync)
            x, y = get_batch(data, B, T, g, device)
            return train_step(
                step_model, optimizer, x, y, cfg.lr, grad_clip=cfg.grad_clip, autocast=autocast
            )

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    sync()
    warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        sync()
        t = time.perf_counter()
        loss, _ = step()
        sync()
        times.append(time.perf_counter() - t)
    step_s = statistics.median(times)
    tokens_per_s = B * T / step_s
    peak, source = peak_flops(device)
    flops = model.flops_per_token() * tokens_per_s
    result = {
        **where_it_ran(device),
        "preset": cfg.preset,
        "batch_size": B,
        "block_size": T,
        "n_parameters": model.num_parameters(),
        "dtype": log_label(precision, device),
        "compile": args.compile,
        "warmup_steps": args.warmup,
        "warmup_s": warmup_s,
        "steps": args.steps,
        "step_time_s": step_s,
        "step_time_min_s": min(times),
        "tokens_per_s": tokens_per_s,
        "achieved_flops_per_s": flops,
        "peak_flops": peak,
        "peak_flops_source": source,
        "mfu": flops / peak if peak else None,
        "mfu_basis": "data-sheet peak"
        if device.type == "cuda"
        else "measured fp32 matmul ceiling of this CPU (not a hardware peak)",
        "final_loss": float(loss),
        "command": " ".join(["python", *sys.argv]),
    }
    if args.profile:
        result["profile"] = _profile(step, device, args.profile)
    return result


def _profile(step, device, n: int) -> str:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(3):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=n)


def main(argv: list[str] | None = None) -> dict:
    p = _parser()
    args = p.parse_args(argv)

    def check() -> None:
        if args.json:
            check_output_file(args.json)
        check_device("--device", args.device, run=True)  # "tpu", no GPU: exit 2, no work

    def work(_) -> dict:
        r = measure(args)
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "unknown (no peak)"
        print(
            f"{r['device']} | preset {r['preset']} ({r['n_parameters'] / 1e6:.2f}M params), "
            f"batch {r['batch_size']} x {r['block_size']}, {r['dtype']}, compile "
            f"{r['compile']}"
        )
        print(f"  step time  {r['step_time_s'] * 1e3:9.2f} ms (median of {r['steps']})")
        print(f"  tokens/s   {r['tokens_per_s']:12,.0f}")
        print(f"  MFU        {mfu:>12} of {r['peak_flops_source']}")
        if "profile" in r:
            print(r["profile"])
        if args.json:
            write_json(r, args.json)
        return r

    return run_cli(p, check, work)


if __name__ == "__main__":
    main()
