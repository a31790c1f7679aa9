"""Interleaved A/B of the training step's wall time for candidate ``cpu``-preset shapes.

Usage: ``python benchmarks/cpu_step_ab.py THREADS 'JSON list of get_preset("cpu") overrides,
each optionally with "bf16": true or "fused": true' ROUNDS``. Prints the minimum over
ROUNDS x 3 steps of each candidate (the least disturbed on a shared machine). The step is
the training loop's own (:func:`mini_transformer.core.train_step`), with the preset's
gradient clipping.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from mini_transformer.cli import positive_int
from mini_transformer.core import train_step
from mini_transformer.model import TransformerLM
from mini_transformer.train import configure_optimizer, get_preset


def candidates(text: str) -> list[dict]:
    """The JSON list of override dicts (argparse type: a bad one is a usage error)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from None
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise argparse.ArgumentTypeError("expected a JSON list of objects, e.g. '[{}]'")
    return value


def make(overrides: dict):
    """``(model, optimizer, x, y, bf16, grad_clip)`` for one candidate, seeded."""
    s = dict(overrides)
    fused = s.pop("fused", False)
    bf16 = s.pop("bf16", False)
    torch.manual_seed(0)
    cfg = get_preset("cpu", **s)
    m = TransformerLM(cfg.model)
    opt = configure_optimizer(m, cfg, fused=fused)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(84, (cfg.batch_size, m.config.block_size), generator=g)
    y = torch.randint(84, x.shape, generator=g)
    return m, opt, x, y, bf16, cfg.grad_clip


def step(m, opt, x, y, bf16: bool, grad_clip: float) -> float:
    bf = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else None
    t0 = time.perf_counter()
    loss, _ = train_step(m, opt, x, y, opt.param_groups[0]["lr"], grad_clip=grad_clip, autocast=bf)
    loss.item()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("threads", type=positive_int)
    p.add_argument("candidates", type=candidates)
    p.add_argument("rounds", type=positive_int)
    args = p.parse_args(argv)
    try:  # every candidate is built (and so checked) before any timing
        built = [make(c) for c in args.candidates]
    except (TypeError, ValueError) as err:
        p.error(f"argument candidates: {err}")
    torch.set_num_threads(args.threads)
    best = [float("inf")] * len(built)
    for _ in range(args.rounds):
        for i, b in enumerate(built):
            step(*b)  # warm-up
            best[i] = min(best[i], min(step(*b) for _ in range(3)))
    for c, b, t in zip(args.candidates, built, best, strict=True):
        m, x = b[0], b[2]
        flops = m.flops_per_token() * x.numel()
        print(
            json.dumps(c),
            f"{t * 1e3:.1f} ms/step  {x.numel() / t:.0f} tok/s  {flops / t / 1e9:.0f} GFLOP/s",
            f"N={m.num_parameters()}",
            flush=True,
        )


if __name__ == "__main__":
    main()
