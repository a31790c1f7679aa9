"""What attention reads in chapter 3's sweep models: each head's weight on the key ``offset`` back.

Chapter 3 explains the lab's accuracies past the trained length ``L`` by where attention looks.
The sweep (``tools/extrapolation_lab.py``) stores no models, so this tool retrains the models it
is asked for exactly as the sweep did (the configuration, seeds and steps stored in
``mini_transformer/results/extrapolation.json``), checks that each retrained model scores the
stored accuracies (``max_accuracy_difference``, 0 when the run is reproduced to the stored four
decimals), and stores, per layer and head, the mean attention weight that a query at position
``t`` puts on the key at ``t - offset``, over the queries ``t < L`` and ``t >= L`` of the
sweep's own evaluation sequences at each length in ``--lengths``. For the learned scheme it also
stores the cosines between the trained rows ``0..L-1`` of the position table (``(L, L)``, four
decimals), the input of chapter 3's permutation test.

Run (about 100 CPU-seconds a model on one thread)::

    python tools/lab_attention.py --schemes learned rope --seeds 0 \\
        --out mini_transformer/results/03_lab_attention.json

Chapter 3's file also holds the runs of two later invocations, each with its own ``--out``
(``--schemes sinusoidal --seeds 0``; ``--schemes learned sinusoidal rope --seeds 1 2``), merged
into it by hand; ``added_runs`` lists each one's command, runs, machine and wall time.
"""

from __future__ import annotations

import argparse
import time

import torch
from sweep_cli import command_line, non_negative_int, run_sweep_cli

from mini_transformer import data, lab
from mini_transformer.cli import positive_int
from mini_transformer.hardware import where_it_ran
from mini_transformer.model import POSITIONAL_SCHEMES

PROG = "python tools/lab_attention.py"


@torch.no_grad()
def weight_on_offset(model, idx: torch.Tensor, offset: int, L: int) -> list[dict]:
    """Per layer, each head's mean weight on key ``t - offset``: queries ``t < L``, ``t >= L``."""
    t = torch.arange(offset, idx.shape[1])  # queries that have a key `offset` back
    out = []
    for w in model.attention_weights(idx):  # (B, heads, T, T) per layer
        on = w[:, :, t, t - offset]  # (B, heads, queries)
        out.append(
            {
                "before_L": [round(v, 4) for v in on[:, :, t < L].mean(dim=(0, 2)).tolist()],
                "from_L": [round(v, 4) for v in on[:, :, t >= L].mean(dim=(0, 2)).tolist()],
            }
        )
    return out


def trained_rows_cosine(model, L: int) -> list[list[float]]:
    """``cos(W_i, W_j)`` between the learned position table's rows ``i, j < L``: ``(L, L)``."""
    w = lab.learned_position_weight(model)[:L]
    return [[round(float(v), 4) for v in row] for row in lab.cosine_similarity_matrix(w)]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--schemes", nargs="+", choices=POSITIONAL_SCHEMES, default=["learned", "rope"])
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--lengths", type=positive_int, nargs="+", default=[64, 256])
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    sweep_result = data.load_result("extrapolation")
    stored = sweep_result["config"]
    cfg = lab.LabConfig(**{k: v for k, v in stored.items() if k != "block_size"})
    missing = [s for s in args.seeds if s not in sweep_result["seeds"]]
    if missing or any(T > cfg.block_size or T <= cfg.offset for T in args.lengths):
        p.error(
            f"--seeds must be among {sweep_result['seeds']} and --lengths in "
            f"{cfg.offset + 1}..{cfg.block_size}"
        )

    def sweep(save) -> dict:
        result = {
            "lab": stored,
            "offset": cfg.offset,
            "train_length": cfg.train_length,
            "lengths": args.lengths,
            "where_it_ran": where_it_ran("cpu"),
            "runs": {},
        }
        t0 = time.perf_counter()
        for scheme in args.schemes:
            for seed in args.seeds:
                model = lab.make_model(scheme, cfg, seed=seed)
                lab.train_model(model, cfg, seed=seed)
                acc = lab.accuracy_by_length(model, cfg, seed=seed)["accuracy"]
                per_seed = sweep_result["results"][scheme]["accuracy"]
                i = sweep_result["seeds"].index(seed)
                diff = max(
                    abs(round(a, 4) - per_seed[str(T)]["per_seed"][i]) for T, a in acc.items()
                )
                run = {"max_accuracy_difference": round(diff, 4), "layers": {}}
                if scheme == "learned":  # chapter 3's permutation test
                    run["trained_rows_cosine"] = trained_rows_cosine(model, cfg.train_length)
                for T in args.lengths:
                    gen = torch.Generator().manual_seed(10_000 + seed)  # the sweep's evaluation
                    idx, _ = cfg.batch(cfg.eval_samples, T, gen)
                    run["layers"][str(T)] = weight_on_offset(
                        model, idx, cfg.offset, cfg.train_length
                    )
                result["runs"][f"{scheme}/{seed}"] = run
                save(result)
        result["wall_time_s"] = round(time.perf_counter() - t0, 1)
        return result

    command = command_line(PROG, argv)
    return run_sweep_cli(p, args.out, command, sweep, overwrite=args.overwrite)


if __name__ == "__main__":
    main()
