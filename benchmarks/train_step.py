"""How fast is one training step on this CPU, in float32 and in bf16, against the matmul ceiling?

Times a full training step (forward, backward, gradient clipping, AdamW update: the loop of
``mini_transformer.train``) of two shapes, each in float32 and under bf16 autocast:

- ``gpu``: the ``gpu`` preset's model (d_model 384, 6 layers, 6 heads, context 256,
  ~10.7M parameters, dropout 0.2) at batch size 8;
- ``cpu``: the ``cpu`` preset's model and batch, as shipped.

In the same run it measures the fp32 (and bf16) matmul ceiling: the best rate of a large
square matmul, the most efficient thing the CPU does. The step's useful work is
``flops_per_token * tokens`` (6N + attention, ``TransformerLM.flops_per_token``), so

    fraction of ceiling = (step FLOPs / step time) / fp32 ceiling FLOP/s

(for a bf16 step this can exceed 1: it is measured against the float32 ceiling).

Timings on a shared machine are inflated by whatever else runs: the fp32 and bf16 steps
and the ceiling are measured in interleaved rounds and the *minimum* over rounds is
reported (the least disturbed), with the median beside it and the load average before and
after. Compare numbers only from one run. On a machine too busy for that, ``--clock cpu``
(one thread only) times with the thread's CPU time instead of the wall clock: it counts
only the time the step actually ran, so it is far less sensitive to other processes
(cache sharing still inflates it a little); it cannot show what a second thread buys.

Usage::

    python benchmarks/train_step.py                       # one thread per physical core
    python benchmarks/train_step.py --threads 1 --rounds 5 --json out.json
    python benchmarks/train_step.py --shapes gpu --dropout 0
    python benchmarks/train_step.py --threads 1 --clock cpu   # on a loaded machine
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from mini_transformer.checkpoints import check_output_file
from mini_transformer.cli import positive_int, run_cli
from mini_transformer.core import train_step
from mini_transformer.hardware import (
    autocast,
    cpu_bf16_features,
    measure_matmul_flops,
    physical_cores,
    where_it_ran,
)
from mini_transformer.model import TransformerLM
from mini_transformer.train import configure_optimizer, get_preset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sweep_cli import probability, write_json  # noqa: E402  (tools/, beside the package)

CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}

SHAPES = {"gpu": dict(preset="gpu", batch_size=8), "cpu": dict(preset="cpu")}


def build(shape: str, dropout: float | None, clock):
    spec = dict(SHAPES[shape])
    torch.manual_seed(0)
    cfg = get_preset(spec.pop("preset"), dropout=dropout, **spec)
    model = TransformerLM(cfg.model)
    opt = configure_optimizer(model, cfg)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(84, (cfg.batch_size, model.config.block_size), generator=g)
    y = torch.randint(84, x.shape, generator=g)

    def step(precision: str) -> float:  # the training loop's own step (core.train_step)
        t0 = clock()
        loss, _ = train_step(
            model,
            opt,
            x,
            y,
            cfg.lr,
            grad_clip=cfg.grad_clip,
            autocast=lambda: autocast(precision, "cpu"),
        )
        loss.item()
        return clock() - t0

    return model, x, step


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--threads", type=positive_int, help="torch threads (default: one per physical core)"
    )
    p.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["gpu", "cpu"])
    p.add_argument("--rounds", type=positive_int, default=3, help="interleaved rounds")
    p.add_argument("--steps", type=positive_int, default=3, help="timed steps per round")
    p.add_argument(
        "--dropout", type=probability, default=None, help="override the presets' dropout"
    )
    p.add_argument("--matmul-n", type=positive_int, default=2048, help="ceiling matmul size")
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall clock, or the thread's CPU time (--threads 1 only)",
    )
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--overwrite", action="store_true", help="--json may be a committed result")
    return p


def measure(args, clock) -> tuple[dict, dict, dict]:
    """Interleaved rounds: ``(built shapes, step times per (shape, precision), ceilings)``."""
    built = {s: build(s, args.dropout, clock) for s in args.shapes}
    times = {(s, pr): [] for s in args.shapes for pr in ("fp32", "bf16")}
    ceilings = {"fp32": [], "bf16": []}
    for _ in range(args.rounds):
        for dtype, key in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            ceilings[key].append(measure_matmul_flops(args.matmul_n, 3, dtype=dtype, clock=clock))
        for s, (_, _, step) in built.items():
            for pr in ("fp32", "bf16"):
                step(pr)  # warm-up (allocator, autocast caches)
                times[(s, pr)] += [step(pr) for _ in range(args.steps)]
    return built, times, {k: max(v) for k, v in ceilings.items()}


def shape_record(name: str, model, x, times: dict, ceiling: float) -> dict:
    """One shape's record (fp32 and bf16 step times, rates, speed-up), printed as it goes."""
    tokens = x.numel()
    flops = model.flops_per_token() * tokens
    c = model.config
    rec = {
        "config": c.to_dict(),
        "batch_size": x.shape[0],
        "n_parameters": model.num_parameters(),
        "tokens_per_step": tokens,
        "step_flops": flops,
    }
    print(
        f"{name} shape: d_model {c.d_model}, {c.n_layers} layers, context {c.block_size}, "
        f"batch {x.shape[0]}, dropout {c.dropout} ({rec['n_parameters'] / 1e6:.2f}M params)"
    )
    for pr in ("fp32", "bf16"):
        t = times[(name, pr)]
        best, median = min(t), statistics.median(t)
        rec[pr] = {
            "step_time_s": {"min": best, "median": median, "n": len(t)},
            "tokens_per_s": tokens / best,
            "achieved_flops_per_s": flops / best,
            "fraction_of_fp32_ceiling": flops / best / ceiling,
        }
        print(
            f"  {pr}: step {best * 1e3:7.1f} ms (median {median * 1e3:.1f}), "
            f"{tokens / best:8.0f} tok/s, {flops / best / 1e9:6.1f} GFLOP/s = "
            f"{flops / best / ceiling:6.1%} of the fp32 ceiling"
        )
    rec["bf16_speedup"] = rec["fp32"]["step_time_s"]["min"] / rec["bf16"]["step_time_s"]["min"]
    print(f"  bf16 speed-up {rec['bf16_speedup']:.2f}x")
    return rec


def main(argv: list[str] | None = None) -> dict:
    p = parser()
    args = p.parse_args(argv)

    def check() -> int:
        threads = args.threads or physical_cores()
        if args.clock == "cpu" and threads != 1:
            raise ValueError(
                "--clock cpu needs --threads 1 (a second thread's time is not counted)"
            )
        if args.json:
            check_output_file(args.json, overwrite=args.overwrite)
        return threads

    return run_cli(p, check, lambda threads: _run(args, threads))


def _run(args, threads: int) -> dict:
    torch.set_num_threads(threads)
    load_before = os.getloadavg()
    built, times, ceilings = measure(args, CLOCKS[args.clock])
    result = {
        "device": platform.processor() or platform.machine(),
        "cpu_bf16": cpu_bf16_features(),
        "threads": threads,
        "clock": args.clock,
        "torch": torch.__version__,
        "loadavg_before_after": [load_before, os.getloadavg()],
        "matmul_ceiling_flops_per_s": ceilings,
        "where_it_ran": where_it_ran("cpu"),
    }
    print(
        f"{threads} thread(s), {args.clock} clock, "
        f"load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}; "
        f"native bf16: {result['cpu_bf16']}"
    )
    print(
        f"matmul ceiling ({args.matmul_n}^2): fp32 {ceilings['fp32'] / 1e9:.0f} GFLOP/s, "
        f"bf16 {ceilings['bf16'] / 1e9:.0f} GFLOP/s"
    )
    result["shapes"] = {
        s: shape_record(s, model, x, times, ceilings["fp32"]) for s, (model, x, _) in built.items()
    }
    if args.json:
        write_json(result, args.json)
    return result


if __name__ == "__main__":
    main()
