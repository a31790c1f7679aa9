"""Evaluate the committed gpu model on the whole held-out text, on a CPU (chapter 6, review L9).

The H100 run's log evaluates on 100 random batches; chapter 6 sets that beside the cpu model's
whole-text loss. This scores every consecutive window of the held-out plays (``estimate_loss``
with ``seed=None``: each window starts without context) in float32, once with the gpu model's
own context ``T = 256`` and once with ``T = 128``, the cpu model's protocol, and stores the
per-window losses, so the chapter can give the mean with its standard error.

Run (about 15 min on 1 thread of a loaded 2-core machine)::

    python tools/gpu_whole_text.py --out mini_transformer/results/06_gpu_whole_text.json
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from sweep_cli import command_line, provenance, run_sweep_cli

from mini_transformer import data, train
from mini_transformer.cli import positive_int
from mini_transformer.hardware import where_it_ran


@torch.no_grad()
def window_losses(model, ids: torch.Tensor, T: int, batch_size: int) -> list[float]:
    """Mean loss (nats) of each consecutive window ``ids[i*T : (i+1)*T + 1]``, in order."""
    windows = ids.unfold(0, T + 1, T)  # (n_windows, T + 1)
    out = []
    for w in windows.split(batch_size):
        logits, _ = model(w[:, :-1])
        nll = F.cross_entropy(logits.float().transpose(1, 2), w[:, 1:], reduction="none")
        out += nll.mean(1).tolist()
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--T", type=positive_int, nargs="+", default=[256, 128])
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)

    def sweep(save) -> dict:
        result = provenance(
            checkpoint="gpu (mini_transformer/assets/shakespeare_char_gpu.pt)",
            precision="float32 (no autocast), weights as stored (float16) cast to float32",
            where_it_ran=where_it_ran("cpu"),
            runs={},
        )
        model, tok, _ = train.load_model(train.PRETRAINED["gpu"])
        ids = tok.encode(data.load_corpus("val"))
        t0 = time.perf_counter()
        for T in args.T:
            t1 = time.perf_counter()
            losses = window_losses(model, ids, T, args.batch_size)
            result["runs"][str(T)] = {
                "T": T,
                "n_windows": len(losses),
                "wall_time_s": round(time.perf_counter() - t1, 1),
                "window_losses": [round(v, 6) for v in losses],
            }
            save(result)
        result["wall_time_s"] = round(time.perf_counter() - t0, 1)
        return result

    command = command_line("tools/gpu_whole_text.py", argv)
    return run_sweep_cli(p, args.out, command, sweep, overwrite=args.overwrite)


if __name__ == "__main__":
    main()
