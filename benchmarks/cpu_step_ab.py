"""Interleaved A/B of the training step's wall time for candidate ``cpu``-preset shapes.

Usage: ``python benchmarks/cpu_step_ab.py THREADS 'JSON list of get_preset("cpu") overrides,
each optionally with "bf16": true or "fused": true' ROUNDS``. Prints the minimum over
ROUNDS x 3 steps of each candidate (the least disturbed on a shared machine).
"""

import contextlib
import json
import sys
import time

import torch

from mini_transformer.model import TransformerLM
from mini_transformer.train import configure_optimizer, get_preset

torch.set_num_threads(int(sys.argv[1]))
cands = json.loads(sys.argv[2])
rounds = int(sys.argv[3])


def make(s):
    s = dict(s)
    fused = s.pop("fused", False)
    bf = s.pop("bf16", False)
    torch.manual_seed(0)
    cfg = get_preset("cpu", **s)
    m = TransformerLM(cfg.model_config(84))
    opt = configure_optimizer(m, cfg, fused=fused)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(84, (cfg.batch_size, m.config.block_size), generator=g)
    y = torch.randint(84, x.shape, generator=g)
    return m, opt, x, y, bf


def step(m, opt, x, y, bf16):
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    t0 = time.perf_counter()
    with ctx:
        _, loss = m(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    loss.item()
    return time.perf_counter() - t0


built = [make(s) for s in cands]
best = [9.0] * len(cands)
for _r in range(rounds):
    for i, b in enumerate(built):
        step(*b)
        best[i] = min(best[i], min(step(*b) for _ in range(3)))
for c, b, t in zip(cands, built, best, strict=False):
    m, x = b[0], b[2]
    fl = m.flops_per_token() * x.numel()
    print(
        json.dumps(c),
        f"{t * 1e3:.1f} ms/step  {x.numel() / t:.0f} tok/s  {fl / t / 1e9:.0f} GFLOP/s",
        f"N={m.num_parameters()}",
        flush=True,
    )
