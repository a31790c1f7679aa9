"""Split the cpu model's held-out gap on thousands of windows (chapter 6, appendix A.3).

The chapter's live cell scores 512 windows per group, too few to resolve the term it calls
memorising (0.025 nats, 2.1 standard errors). This redraws the committed ``cpu`` run's batches
from its log (``seed_for(seed, rank 0, step)``, windows of ``T`` characters of the training
ids, as ``data.get_batch`` draws them), counts how often each training character was
processed, and scores the committed model on

- windows of the training works whose every character (inputs and targets) the run never
  processed, and windows whose every character it processed at least once: ``--draws`` disjoint
  sets of ``--windows`` windows per group, drawn at random from windows that share no character
  (so the windows' losses are closer to independent draws);
- the whole held-out text, every consecutive window of ``T`` (``estimate_loss`` with
  ``seed=None``, section 6.5's 1.698): no sampling error from choosing held-out windows.

It stores each window's start and mean loss, and per draw and pooled: processed minus never
processed (the memorising term) and held out minus never processed, with standard errors that
count windows as independent; and, pooled, processed minus never processed with the training
works as the units (each work's difference, averaged over the works). Float32, the stored
(float16) weights cast to float32, one thread.

The full result (every window's start and loss, about 470 KB) stays in the repository; the
package ships a summary of it (:func:`summarise`: the numbers the chapter quotes, with the
command, date and device), which ``--summary`` writes beside it, or
``tools/result_summary.py gap-split`` from a stored full result.

Run (about 2 min on 1 thread of a loaded 2-core machine)::

    python tools/gap_split.py --out benchmarks/results/06_gap_split.json \
        --summary mini_transformer/results/06_gap_split.json
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from sweep_cli import command_line, non_negative_int, provenance, run_sweep_cli, write_json

from mini_transformer import data, train
from mini_transformer.checkpoints import check_output_file
from mini_transformer.cli import positive_int, run_cli
from mini_transformer.hardware import where_it_ran


def seed_for(*keys: int) -> int:
    """The package's per-step seed (NumPy's SeedSequence), as chapter 6 writes it out."""
    return int(np.random.SeedSequence(list(keys)).generate_state(2, np.uint64)[0] >> np.uint64(1))


def times_processed(n_train: int, log: list[dict]) -> np.ndarray:
    """How often the run in ``log`` processed each of the ``n_train`` training characters."""
    start, end = log[0], log[-1]
    T, batch = start["model_config"]["block_size"], start["tokens_per_step"]
    batch //= T
    if start["world_size"] != 1:
        raise ValueError("only a single-process run's batches can be redrawn")
    coverage = np.zeros(n_train + 1, dtype=np.int64)
    for step in range(end["step"]):
        g = torch.Generator().manual_seed(seed_for(start["seed"], 0, step))
        starts = torch.randint(n_train - T, (batch,), generator=g).numpy()  # as get_batch
        np.add.at(coverage, starts, 1)  # +1 where a window starts,
        np.add.at(coverage, starts + T, -1)  # -1 just past its end
    return np.cumsum(coverage)[:-1]


def window_pools(seen: np.ndarray, T: int) -> dict[str, np.ndarray]:
    """Starts of the windows (``T`` inputs and their ``T`` targets: ``T + 1`` characters) that
    the run never processed, and those whose every character it processed."""
    run = np.concatenate([[0], np.cumsum(seen > 0)])
    starts = np.arange(len(seen) - T - 1)
    n_seen = run[starts + T + 1] - run[starts]
    return {"never processed": starts[n_seen == 0], "processed": starts[n_seen == T + 1]}


def tiling(pool: np.ndarray, T: int) -> np.ndarray:
    """The windows of ``pool`` taken from left to right, each one that shares no character
    with the last one taken: the most windows of ``pool`` that share no character."""
    taken, last = [], -(T + 1)
    for a in np.sort(pool).tolist():
        if a > last + T:
            taken.append(a)
            last = a
    return np.array(taken, dtype=np.int64)


@torch.no_grad()
def window_losses(model, ids: torch.Tensor, starts, T: int, batch_size: int) -> np.ndarray:
    """Mean loss (nats) of the window ``ids[a : a + T + 1]`` for each start ``a``, in order."""
    out = []
    for chunk in np.array_split(np.asarray(starts), max(1, math.ceil(len(starts) / batch_size))):
        w = torch.stack([ids[a : a + T + 1] for a in chunk.tolist()])
        logits, _ = model(w[:, :-1])
        nll = F.cross_entropy(logits.float().transpose(1, 2), w[:, 1:], reduction="none")
        out.append(nll.mean(1).double().numpy())
    return np.concatenate(out)


def tiles_count(tiles: dict) -> dict[str, int]:
    return {k: len(t) for k, t in tiles.items()}


def difference(a: np.ndarray, b: np.ndarray) -> dict:
    """mean(a) - mean(b), with the standard error of two independent samples' means."""
    se = math.hypot(a.std(ddof=1) / math.sqrt(len(a)), b.std(ddof=1) / math.sqrt(len(b)))
    d = float(a.mean() - b.mean())
    return {"mean": round(d, 6), "se": round(se, 6), "standard_errors": round(d / se, 2)}


def by_work(starts: dict, losses: dict, titles: list[str], work_starts: np.ndarray) -> dict:
    """Processed minus never processed with the training works, not the windows, as the units:
    each work's mean difference (works with a window in both groups), averaged unweighted."""
    work = {k: np.searchsorted(work_starts, s, side="right") - 1 for k, s in starts.items()}
    d = []
    for i in range(len(titles)):
        a, b = (losses[k][work[k] == i] for k in ("processed", "never processed"))
        if len(a) and len(b):
            d.append(a.mean() - b.mean())
    d = np.array(d)
    return {
        "n_works": len(d),
        "mean": round(float(d.mean()), 6),
        "se": round(float(d.std(ddof=1) / math.sqrt(len(d))), 6),
        "works_lower_when_processed": int((d < 0).sum()),
    }


def split_gap(model, train_ids, val_ids, log, n: int, draws: int, seed: int, batch_size: int,
              works: dict[str, str] | None = None):  # fmt: skip
    """The whole measurement: a dict of pools, draws and the pooled differences. ``works``
    (``{title: text}`` of the training works, joined as ``train_ids``) adds the difference
    with the works as the units."""
    T = model.config.block_size
    pools = window_pools(times_processed(len(train_ids), log), T)
    tiles = {k: tiling(p, T) for k, p in pools.items()}
    if min(len(t) for t in tiles.values()) < n * draws:
        raise ValueError(f"{n * draws} windows per group do not fit: {tiles_count(tiles)}")
    rng = np.random.default_rng(seed)  # in random order: draw i is picked[k][i * n: (i + 1) * n]
    picked = {k: rng.choice(t, n * draws, replace=False) for k, t in tiles.items()}
    losses = {k: window_losses(model, train_ids, s, T, batch_size) for k, s in picked.items()}
    held_starts = np.arange((len(val_ids) - 1) // T) * T  # every consecutive window
    held = window_losses(model, val_ids, held_starts, T, batch_size)
    result = {
        "pool_sizes": {k: len(p) for k, p in pools.items()},
        "disjoint_windows": tiles_count(tiles),
        "held_out": {"n_windows": len(held), "mean": round(float(held.mean()), 6)},
        "draws": [],
    }
    for i in range(draws):
        part = {k: v[i * n : (i + 1) * n] for k, v in losses.items()}
        result["draws"].append(
            {
                "starts": {k: v[i * n : (i + 1) * n].tolist() for k, v in picked.items()},
                "window_losses": {k: [round(x, 6) for x in v.tolist()] for k, v in part.items()},
                "processed_minus_never": difference(part["processed"], part["never processed"]),
                "held_out_minus_never": difference(held, part["never processed"]),
            }
        )
    result["pooled"] = {
        "n_windows_per_group": n * draws,
        "means": {k: round(float(v.mean()), 6) for k, v in losses.items()},
        "processed_minus_never": difference(losses["processed"], losses["never processed"]),
        "held_out_minus_never": difference(held, losses["never processed"]),
    }
    if works is not None:
        titles, sep = list(works), len(data.WORK_SEPARATOR)
        work_starts = np.cumsum([0] + [len(works[t]) + sep for t in titles[:-1]])
        if work_starts[-1] + len(works[titles[-1]]) != len(train_ids):
            raise ValueError("the works do not make up the training ids")
        result["pooled"]["by_work"] = by_work(picked, losses, titles, work_starts)
    return result


#: The full result's header fields a summary repeats (its provenance).
PROVENANCE = ("command", "commit", "date", "where_it_ran", "checkpoint", "precision", "seed",
              "wall_time_s")  # fmt: skip


def summarise(full: dict, full_path: str, command: str) -> dict:
    """The summary of the full result ``full`` (stored at ``full_path``) that the package ships:
    its provenance, pools, held-out mean, each draw's group means and differences, and the pooled
    differences; no window's start or loss. ``command`` is the one writing the summary."""
    draws = []
    for d in full["draws"]:
        w = d["window_losses"]
        draws.append(
            {
                "n_windows_per_group": {k: len(v) for k, v in w.items()},
                "means": {k: round(float(np.mean(v)), 6) for k, v in w.items()},
                "processed_minus_never": d["processed_minus_never"],
                "held_out_minus_never": d["held_out_minus_never"],
            }
        )
    return {
        "command": command,
        "what": "summary of the full result (each window's start and loss) in full_result",
        "full_result": str(full_path),
        "full": {k: full[k] for k in PROVENANCE},
        "pool_sizes": full["pool_sizes"],
        "disjoint_windows": full["disjoint_windows"],
        "held_out": full["held_out"],
        "draws": draws,
        "pooled": full["pooled"],
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--windows", type=positive_int, default=4096, help="per group and draw")
    p.add_argument("--draws", type=positive_int, default=2, help="disjoint draws (default 2)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="NumPy seed of the draw")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--summary", help="also write the summary the package ships to this file")
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    if args.summary:  # refused before any work (exit 2), as --out is
        run_cli(p, lambda: check_output_file(args.summary, overwrite=args.overwrite,
                                             name="--summary", inputs=[args.out]))  # fmt: skip

    def sweep(save) -> dict:
        result = provenance(
            checkpoint="cpu (mini_transformer/assets), its log's batches redrawn",
            precision="float32 (no autocast), weights as stored (float16) cast to float32",
            where_it_ran=where_it_ran("cpu"),
            seed=args.seed,
        )
        model, tok, _ = train.load_model(train.PRETRAINED["cpu"])
        train_ids = tok.encode(data.load_corpus("train"))
        val_ids = tok.encode(data.load_corpus("val"))
        works = {t: w for t, w in data.load_works().items() if t not in data.VAL_WORKS}
        t0 = time.perf_counter()
        result |= split_gap(
            model, train_ids, val_ids, train.read_log("cpu"),
            args.windows, args.draws, args.seed, args.batch_size, works,
        )  # fmt: skip
        result["wall_time_s"] = round(time.perf_counter() - t0, 1)
        return result

    command = command_line("tools/gap_split.py", argv)
    result = run_sweep_cli(p, args.out, command, sweep, overwrite=args.overwrite)
    if args.summary:
        write_json(summarise(result, args.out, command), args.summary)
        print(f"wrote {args.summary}")
    return result


if __name__ == "__main__":
    main()
