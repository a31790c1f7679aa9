"""Chapter 3's shifted-positions control: new positions, or a longer input?

Past ``L`` the learned and sinusoidal models meet two things at once: positions training never
reached, and a longer input (more keys, longer offsets). This tool separates them. The sweep's
models, retrained by ``tools/code_spacing.py``'s path (``retrain``: each run stores
``max_accuracy_difference`` against the sweep's stored accuracies, 0 when reproduced to the
stored four decimals), read the sweep's length-``L`` evaluation sequences (generator
``10_000 + seed``) at positions ``p0 .. p0 + L - 1`` instead of ``0 .. L - 1``: the model's
position module is called with ``offset=p0`` (the model's own forward always starts at 0).
Length, keys and offsets stay those of training; only the absolute positions move. Accuracy
is over the scored queries ``t >= offset`` (the task's copy distance), as in chapter 3, so
``p0 = 0`` reproduces the sweep's accuracy at ``T = L``. Each run also keeps the accuracy of
every scored query (mean over the evaluation sequences): ``per_position_by_start[p0]`` for
``t = offset .. L - 1``, and ``per_position_2L`` for ``t = offset .. 2L - 1`` of the sweep's
length-``2L`` sequences read from position 0 (whose queries ``t >= L`` average to the sweep's
``accuracy_beyond`` at ``2L``).

- ``learned``: rows ``p0 ..``; rows ``>= L`` never received a gradient. ``p0 + L`` is at most
  ``block_size`` (the table's rows).
- ``sinusoidal``: the encoding's rows ``p0 ..``.
- ``rope`` (the harness's control): every attention layer rotates queries and keys from
  ``p0``; scores depend on positions only through their difference, so the accuracy must not
  move (beyond float rounding).

Run (about 200 wall-seconds a model on one thread)::

    python tools/shifted_positions.py --runs learned/0 learned/1 learned/2 rope/0 \\
        --out mini_transformer/results/03_shifted.json

``--position-lists`` (a reviewer's control: which positions before the untrained ones sink
them?) reads the same sequences at arbitrary positions, each list ``L`` long, given as comma-
separated inclusive ranges (``0-15,32-47``); only for the added encodings (learned, sinusoidal)::

    python tools/shifted_positions.py --runs sinusoidal/0 sinusoidal/1 sinusoidal/2 --starts 16 \
        --position-lists 16-31,32-47 0-15,32-47 200-215,32-47 8-23,32-47 0-7,24-31,32-47 \
        16-31,200-215 232-247,200-215 0-15,48-63 16-31,48-63 \
        --out mini_transformer/results/03_position_lists.json

Chapter 3's file merges that run with ``--runs sinusoidal/0 sinusoidal/1 sinusoidal/2``, made
side by side with its own ``--out``; ``added_runs`` lists the second (command, runs, machine
and wall time).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from code_spacing import retrain, the_sweep
from sweep_cli import command_line, non_negative_int, provenance, run_sweep_cli

from mini_transformer.hardware import where_it_ran

PROG = "python tools/shifted_positions.py"
SCHEMES = ("learned", "sinusoidal", "rope")


class _From(torch.nn.Module):
    """``module(x, offset=start)``: a position module whose positions start at ``start``."""

    def __init__(self, module: torch.nn.Module, start: int) -> None:
        super().__init__()
        self.module, self.start = module, start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x, offset=self.start)


@contextlib.contextmanager
def positions_from(model, start: int):
    """Within the block, ``model`` numbers its positions from ``start``: its added encoding
    (learned, sinusoidal) or every layer's rotary module (RoPE) is called with that offset."""
    if model.pos_emb is not None:
        owners, name = [model], "pos_emb"
    else:
        owners, name = [block.attn for block in model.blocks], "rotary"
    kept = [getattr(o, name) for o in owners]
    try:
        for o, m in zip(owners, kept, strict=True):
            setattr(o, name, _From(m, start))
        yield model
    finally:
        for o, m in zip(owners, kept, strict=True):
            setattr(o, name, m)


class _At(torch.nn.Module):
    """An added encoding (learned, sinusoidal) read at the positions ``pos`` ``(T,)``:
    ``x + table[pos]`` where the module itself adds ``x + table[offset : offset + T]``."""

    def __init__(self, module: torch.nn.Module, pos: list[int]) -> None:
        super().__init__()
        self.module, self.pos = module, torch.as_tensor(pos)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        table = self.module.pe if hasattr(self.module, "pe") else self.module.weight
        return x + table[self.pos].to(x.dtype)


def position_list(spec: str) -> list[int]:
    """``"0-15,32-47"`` -> ``[0, ..., 15, 32, ..., 47]`` (comma-separated inclusive ranges)."""
    try:
        ranges = [tuple(int(v) for v in part.split("-")) for part in spec.split(",")]
        if any(len(r) != 2 or not 0 <= r[0] <= r[1] for r in ranges):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"{spec!r} is not ranges like 0-15,32-47") from None
    return [p for a, b in ranges for p in range(a, b + 1)]


@torch.no_grad()
def listed_correct(model, idx, targets, pos: list[int], offset: int) -> torch.Tensor:
    """As :func:`shifted_correct`, the encoding read at the positions ``pos`` instead."""
    kept = model.pos_emb
    try:
        model.pos_emb = _At(kept, pos)
        logits = model(idx)[0]
    finally:
        model.pos_emb = kept
    return (logits.argmax(-1) == targets)[:, offset:].float()


@torch.no_grad()
def shifted_accuracy(model, idx, targets, start: int, offset: int) -> float:
    """Accuracy on the queries ``t >= offset`` of ``idx`` read at positions ``start ..``."""
    return float(shifted_correct(model, idx, targets, start, offset).mean())


@torch.no_grad()
def shifted_correct(model, idx, targets, start: int, offset: int) -> torch.Tensor:
    """``(n, T - offset)`` float: 1 where the query ``t >= offset`` of ``idx`` read at
    positions ``start ..`` is answered correctly."""
    with positions_from(model, start):
        logits = model(idx)[0]
    return (logits.argmax(-1) == targets)[:, offset:].float()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--runs", nargs="+", default=[f"{s}/0" for s in SCHEMES], help="scheme/seed")
    p.add_argument("--starts", type=non_negative_int, nargs="+", default=[0, 16, 32, 64, 128, 224])
    p.add_argument("--position-lists", nargs="+", default=[], help="e.g. 0-15,32-47")
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    sweep_result, cfg = the_sweep()
    L, offset = cfg.train_length, cfg.offset
    runs = [tuple(r.partition("/")[::2]) for r in args.runs]
    if any(s not in SCHEMES or not seed.isdigit() or int(seed) not in sweep_result["seeds"]
           for s, seed in runs):  # fmt: skip
        p.error(
            f"--runs: scheme/seed with a scheme of {SCHEMES}, a seed of {sweep_result['seeds']}"
        )
    try:
        lists = {spec: position_list(spec) for spec in args.position_lists}
    except argparse.ArgumentTypeError as e:
        p.error(f"--position-lists: {e}")
    if lists and (any(len(v) != L or max(v) >= cfg.block_size for v in lists.values())
                  or any(s == "rope" for s, _ in runs)):  # fmt: skip
        p.error(f"--position-lists: each list {L} positions below {cfg.block_size}; no rope runs")
    if max(args.starts) + L > cfg.block_size:
        p.error(f"--starts: p0 + L = p0 + {L} must be at most block_size = {cfg.block_size}")

    def sweep(save) -> dict:
        result = provenance(
            lab=sweep_result["config"],
            offset=offset,
            train_length=L,
            starts=args.starts,
            positions="p0 .. p0 + L - 1 (the sweep's length-L sequences, generator 10_000 + seed)",
            per_position=(
                "per_position_by_start[p0][i]: accuracy (mean over the eval_samples sequences) "
                "of the query at t = offset + i, i.e. at absolute position p0 + offset + i; "
                "per_position_2L[i]: the same at t = offset + i of the sweep's length-2L "
                "sequences (generator 10_000 + seed, restarted) read from position 0; "
                "per_position_by_list[spec][i]: as by_start, the sequences read at the positions "
                "of spec (comma-separated inclusive ranges)"
            ),
            where_it_ran=where_it_ran("cpu"),
            runs={},
        )
        t0 = time.perf_counter()
        for scheme, seed in runs:
            model, (idx, targets), diff = retrain(scheme, int(seed), sweep_result, cfg)
            correct = {p0: shifted_correct(model, idx, targets, p0, offset) for p0 in args.starts}
            g = torch.Generator().manual_seed(10_000 + int(seed))
            idx_2L, targets_2L = cfg.batch(cfg.eval_samples, 2 * L, g)
            listed = {k: listed_correct(model, idx, targets, v, offset) for k, v in lists.items()}
            for k, c in listed.items():  # a contiguous list must reproduce its start
                if lists[k] == list(range(lists[k][0], lists[k][0] + L)) and lists[k][0] in correct:
                    if not torch.equal(c, correct[lists[k][0]]):
                        raise RuntimeError(f"{k} does not reproduce p0 = {lists[k][0]}")
            result["runs"][f"{scheme}/{seed}"] = {
                "max_accuracy_difference": diff,
                "by_start": {str(p0): round(float(c.mean()), 4) for p0, c in correct.items()},
                "per_position_by_start": {
                    str(p0): [round(float(a), 4) for a in c.mean(0)] for p0, c in correct.items()
                },
                "per_position_by_list": {
                    k: [round(float(a), 4) for a in c.mean(0)] for k, c in listed.items()
                },
                "per_position_2L": [
                    round(float(a), 4)
                    for a in shifted_correct(model, idx_2L, targets_2L, 0, offset).mean(0)
                ],
            }
            save(result)
        result["wall_time_s"] = round(time.perf_counter() - t0, 1)
        return result

    return run_sweep_cli(p, args.out, command_line(PROG, argv), sweep, overwrite=args.overwrite)


if __name__ == "__main__":
    main()
