"""How close does one training step come to this machine's matmul ceiling?

Times a full training step (forward, backward, gradient clipping, AdamW update) of the
``gpu`` preset's model (d_model 384, 6 layers, 6 heads, context 256, ~10.7M parameters)
at batch size 8 on the CPU, and in the same run measures the fp32 matmul ceiling (the
best rate of a large square matmul, the most efficient thing the CPU does). The step's
useful work is ``flops_per_token * tokens`` (6N + attention, see
``TransformerLM.flops_per_token``), so

    fraction of ceiling = (step FLOPs / step time) / ceiling FLOP/s.

Usage::

    python benchmarks/train_step.py                # 1 thread (the project's rule for timings)
    python benchmarks/train_step.py --dropout 0    # without the dropout masks
    python benchmarks/train_step.py --threads 2 --steps 10 --json out.json

Timings depend on what else runs on the machine: both numbers are taken in the same
run, with the same thread count, so their ratio is less sensitive than either alone.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from mini_transformer.model import TransformerLM
from mini_transformer.train import configure_optimizer, get_preset, measure_matmul_flops


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=6, help="timed steps (after 2 warm-up steps)")
    p.add_argument("--positional", default=None, help="override the preset's scheme")
    p.add_argument("--dropout", type=float, default=None,
                   help="override the preset's dropout (0.2); on a CPU, drawing the dropout "
                   "masks costs a sixth of the step")
    p.add_argument("--matmul-n", type=int, default=2048, help="size of the ceiling matmul")
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = get_preset("gpu", batch_size=args.batch_size, positional=args.positional,
                     dropout=args.dropout)
    model = TransformerLM(cfg.model_config(vocab_size=84))
    opt = configure_optimizer(model, cfg)
    B, T = cfg.batch_size, model.config.block_size
    g = torch.Generator().manual_seed(0)
    x = torch.randint(84, (B, T), generator=g)
    y = torch.randint(84, (B, T), generator=g)

    def step() -> float:
        t0 = time.perf_counter()
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    for _ in range(2):
        step()
    times = [step() for _ in range(args.steps)]
    ceiling = measure_matmul_flops(n=args.matmul_n, repeats=5)

    step_time = statistics.median(times)
    tokens = B * T
    flops = model.flops_per_token() * tokens
    result = {
        "device": platform.processor() or platform.machine(),
        "threads": args.threads,
        "torch": torch.__version__,
        "config": model.config.to_dict(),
        "n_parameters": model.num_parameters(),
        "batch_size": B,
        "tokens_per_step": tokens,
        "step_time_s": {"median": step_time, "min": min(times), "max": max(times)},
        "tokens_per_s": tokens / step_time,
        "step_flops": flops,
        "achieved_flops_per_s": flops / step_time,
        "matmul_ceiling_flops_per_s": ceiling,
        "fraction_of_ceiling": flops / step_time / ceiling,
    }
    print(f"gpu-preset model ({result['n_parameters'] / 1e6:.2f}M parameters, "
          f"{model.config.positional}, dropout {model.config.dropout}), batch {B} x {T} tokens, "
          f"{args.threads} thread(s)")
    print(f"  step time      {step_time * 1e3:8.0f} ms  (median of {args.steps}; "
          f"min {min(times) * 1e3:.0f}, max {max(times) * 1e3:.0f})")
    print(f"  tokens/s       {result['tokens_per_s']:8.0f}")
    print(f"  achieved       {flops / step_time / 1e9:8.1f} GFLOP/s  (6N + attention per token)")
    print(f"  fp32 ceiling   {ceiling / 1e9:8.1f} GFLOP/s  ({args.matmul_n}^2 matmul)")
    print(f"  fraction       {result['fraction_of_ceiling']:8.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
