"""Chapter 5's reset control on five seeds: which weights hold a damaged Post-LN run on the plateau?

Repository tooling, not reader API. Section 5.9 of ``book/05_layernorm.ipynb`` trains Post-LN
20 steps at 1e-2, then 280 at 1e-3 (its ``control_run``), and at the switch starts a fresh Adam
and puts some weights back to their initial values. This tool runs that protocol for every row
of :data:`ROWS` and every seed: :func:`control_run` is the chapter's function (same model,
batches, Adam and held-out batches as :func:`mini_transformer.stability.train_run`), so the
chapter checks its live seeds 0 and 1 against this file. Command-line rules of
:func:`mini_transformer.cli.run_cli`; the JSON is rewritten after every run.

The committed result (the command, commit, wall time and device are stored in it)::

    python tools/reset_control.py --out mini_transformer/results/05_reset.json

(30 runs of 300 steps on one thread of a 2-core CPU shared with other jobs.) The two-sided
rows (a reviewer's control: is keeping only the replayed W^2 damaged enough to stop the rescue?)::

    python tools/reset_control.py --out mini_transformer/results/05_reset_keep.json \\
        --rows "all but the embeddings and W^2 of layers 1-3" \\
        "all but the embeddings and W^1 of layers 1-3"

The direction control (a reviewer's: W^1 replays too, so the W^1 row is no non-replay control):
keep W^2 of layers 1-3 moved from its initial value as far as the 20 steps moved it (same
Frobenius norm), but in a random Gaussian direction, or by the same entries shuffled::

    python tools/reset_control.py --out mini_transformer/results/05_reset_dir.json \
        --rows "all but the embeddings and W^2 of layers 1-3" \
        "all but the embeddings; W^2 of layers 1-3 moved as far, randomly" \
        "all but the embeddings; W^2 of layers 1-3 moved by its entries shuffled"

The structure control (a reviewer's: the replayed move is nearly rank 1 with its right factor
near the all-ones vector, so a full-rank move of the same Frobenius norm is far smaller in
operator norm): its singular values with random singular vectors; a common offset ``u 1^T``;
a rank-1 ``u v^T`` that is no offset::

    python tools/reset_control.py --out mini_transformer/results/05_reset_shape.json \
        --rows "all but the embeddings; W^2 of layers 1-3 moved with its spectrum, randomly" \
        "all but the embeddings; W^2 of layers 1-3 moved as far as an offset u 1^T" \
        "all but the embeddings; W^2 of layers 1-3 moved as far at rank 1, u v^T"

The stream-matched control (a reviewer's: a random move of the real move's Frobenius norm changes
the stream 7-8 times less, so the direction rows mix direction and size): each layer's random or
offset move scaled so that it changes that layer's FFN output on the held-out batch as much as
the real move does (mean per-token ``||h M^T||``, ``h`` the layer's ReLU activations there)::

    python tools/reset_control.py --out mini_transformer/results/05_reset_stream.json \
        --rows "all but the embeddings; W^2 of layers 1-3 moved randomly, as far in the stream" \
        "all but the embeddings; W^2 of layers 1-3 as an offset u 1^T, as far in the stream"

The real offset (a reviewer's: the offset rows above are random-sign offsets of the whole move's
size, not the real move's own offset part): keep only the real move's row means ``d_bar 1^T``,
or only the rest ``d - d_bar 1^T``::

    python tools/reset_control.py --out mini_transformer/results/05_reset_offset_part.json \
        --rows "all but the embeddings; W^2 of layers 1-3 kept as its offset part only" \
        "all but the embeddings; W^2 of layers 1-3 kept without its offset part"
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sweep_cli import non_negative_int, provenance, run_rows, sweep_main, sweep_parser

from mini_transformer import stability as S
from mini_transformer.core import train_step
from mini_transformer.hardware import where_it_ran

PROG = "python tools/reset_control.py"
SWITCH_AT = 20  # steps at 1e-2 before the switch to 1e-3


def _blocks(*numbers):  # parameter names of TransformerLM's blocks, numbered from 1
    return lambda name: any(name.startswith(f"blocks.{i - 1}.") for i in numbers)


def _keep(name: str, linear: str) -> bool:  # reset unless an embedding or ffn.<linear> of 1-3
    kept = name.endswith(f"ffn.{linear}.weight") and _blocks(1, 2, 3)(name)
    return not (kept or name.endswith("emb.weight"))


def _keep_w2(name: str) -> bool:
    return _keep(name, "linear2")


def _haar(n: int, g: torch.Generator) -> torch.Tensor:  # a uniformly random orthogonal (n, n)
    q, r = torch.linalg.qr(torch.randn(n, n, generator=g))
    return q * torch.sign(torch.diagonal(r))


def redirected(d: torch.Tensor, how: str, g: torch.Generator) -> torch.Tensor:
    """The displacement ``d`` ``(out, in)`` turned ``how``: ``"random"`` (a Gaussian direction,
    ``d``'s Frobenius norm), ``"shuffled"`` (``d``'s entries permuted: same norm and magnitudes),
    ``"spectrum"`` (``d``'s singular values, random singular vectors), ``"offset"`` (``u 1^T``
    with random signs ``u``: every input unit adds the same output vector, ``d``'s Frobenius
    norm), ``"rank1"`` (``u v^T`` with random signs ``u``, ``v``: rank 1, not an offset),
    ``"offset_part"`` (``d``'s own row means, ``d_bar 1^T``) or ``"without_offset"`` (the rest)."""
    if how == "random":
        r = torch.randn(d.shape, generator=g)
        return r * d.norm() / r.norm()
    if how in ("offset_part", "without_offset"):  # the real move's row means d_bar 1^T, or the rest
        part = d.mean(dim=1, keepdim=True).expand_as(d)
        return part.clone() if how == "offset_part" else d - part
    if how == "shuffled":
        return d.flatten()[torch.randperm(d.numel(), generator=g)].view_as(d)
    if how == "spectrum":
        s = torch.linalg.svdvals(d)
        u, v = _haar(d.shape[0], g)[:, : s.numel()], _haar(d.shape[1], g)[: s.numel()]
        return u @ torch.diag(s) @ v
    u = torch.sign(torch.randn(d.shape[0], 1, generator=g))
    v = (
        torch.ones(1, d.shape[1])
        if how == "offset"
        else torch.sign(torch.randn(1, d.shape[1], generator=g))
    )
    return u @ v * d.norm() / (u @ v).norm()


# row -> (a fresh Adam at the switch, the weights reset there); "head": the output layer lm_head
ROWS = {
    "damaged, Adam kept": (False, lambda name: False),
    "no reset": (True, lambda name: False),
    "W^2 of layers 1-3": (True, lambda n: n.endswith("ffn.linear2.weight") and _blocks(1, 2, 3)(n)),
    "blocks 1-3": (True, _blocks(1, 2, 3)),
    "blocks 4-6 and the head": (True, lambda n: _blocks(4, 5, 6)(n) or n.startswith("lm_head.")),
    "all but the embeddings": (True, lambda name: not name.endswith("emb.weight")),
    # the two-sided test (a reviewer's): keep the replayed W^2 damaged, or a same-size control
    "all but the embeddings and W^2 of layers 1-3": (True, lambda n: _keep(n, "linear2")),
    "all but the embeddings and W^1 of layers 1-3": (True, lambda n: _keep(n, "linear1")),
    # the direction control (a reviewer's): W^2 of 1-3 kept as far from its start, redirected
    "all but the embeddings; W^2 of layers 1-3 moved as far, randomly": (True, _keep_w2),
    "all but the embeddings; W^2 of layers 1-3 moved by its entries shuffled": (True, _keep_w2),
    # the structure control (a reviewer's): which property of the replayed move does the damage?
    "all but the embeddings; W^2 of layers 1-3 moved with its spectrum, randomly": (True, _keep_w2),
    "all but the embeddings; W^2 of layers 1-3 moved as far as an offset u 1^T": (True, _keep_w2),
    "all but the embeddings; W^2 of layers 1-3 moved as far at rank 1, u v^T": (True, _keep_w2),
    # the stream-matched control (a reviewer's): as far in the layer's output, not in norm
    "all but the embeddings; W^2 of layers 1-3 moved randomly, as far in the stream": (
        True,
        _keep_w2,
    ),
    "all but the embeddings; W^2 of layers 1-3 as an offset u 1^T, as far in the stream": (
        True,
        _keep_w2,
    ),
    # the real offset (a reviewer's): the real move split into its row means and the rest
    "all but the embeddings; W^2 of layers 1-3 kept as its offset part only": (True, _keep_w2),
    "all but the embeddings; W^2 of layers 1-3 kept without its offset part": (True, _keep_w2),
}
REDIRECT = {  # row -> how the kept W^2's displacement d from its initial value is redirected
    "all but the embeddings; W^2 of layers 1-3 moved as far, randomly": "random",
    "all but the embeddings; W^2 of layers 1-3 moved by its entries shuffled": "shuffled",
    "all but the embeddings; W^2 of layers 1-3 moved with its spectrum, randomly": "spectrum",
    "all but the embeddings; W^2 of layers 1-3 moved as far as an offset u 1^T": "offset",
    "all but the embeddings; W^2 of layers 1-3 moved as far at rank 1, u v^T": "rank1",
    "all but the embeddings; W^2 of layers 1-3 moved randomly, as far in the stream": "random",
    "all but the embeddings; W^2 of layers 1-3 as an offset u 1^T, as far in the stream": "offset",
    "all but the embeddings; W^2 of layers 1-3 kept as its offset part only": "offset_part",
    "all but the embeddings; W^2 of layers 1-3 kept without its offset part": "without_offset",
}
STREAM_MATCHED = {row for row in REDIRECT if row.endswith("as far in the stream")}
FIRST_ROWS = tuple(ROWS)[:6]  # the rows of the first result, 05_reset.json


__all__ = ["PROG", "ROWS", "control_run", "run_all", "parser", "main"]


def switch(step: int) -> float:
    """The chapter's schedule: 20 steps at the full rate, then 1e-3."""
    return 1e-2 if step < SWITCH_AT else 1e-3


def _ffn_input(model, layer: int, idx: torch.Tensor) -> torch.Tensor:
    """``h`` ``(tokens, d_ff)``: the ReLU activations entering W^2 of ``layer`` (0-based) on
    ``idx``."""
    seen = []
    hook = model.blocks[layer].ffn.linear2.register_forward_pre_hook(
        lambda module, args: seen.append(args[0])
    )
    model(idx)
    hook.remove()
    return seen[0].flatten(0, 1)


def control_run(
    seed,
    rate=switch,
    steps=300,
    restart_at=None,
    reset=lambda name: False,
    redirect=None,
    stream_matched=False,
):
    """Section 5.9's ``control_run``: ``(held-out copy loss, training losses every 10 steps)``;
    ``redirect`` (see :func:`redirected`) turns the kept W^2 of layers 1-3 at the restart
    (generator ``77 + seed``). With ``stream_matched`` each layer's turned move ``r`` is then
    rescaled, layer 1 first (the layers below already moved), so that the mean per-token
    ``||h r^T||`` on the first held-out batch equals the real move's ``||h d^T||``."""
    cfg = S.StabilityConfig()
    torch.manual_seed(seed)
    model = S.xiong_lm(cfg, "post")
    initial = {name: w.detach().clone() for name, w in model.named_parameters()}

    def adam():
        return torch.optim.Adam(model.parameters(), lr=rate(0), betas=(0.9, 0.98), eps=1e-9)

    opt, batches, losses = adam(), torch.Generator().manual_seed(1_000 + seed), []
    turn = torch.Generator().manual_seed(77 + seed)
    for step in range(steps):
        if step == restart_at:
            with torch.no_grad():
                for name, w in model.named_parameters():
                    if reset(name):
                        w.copy_(initial[name])
                    elif (
                        redirect
                        and not stream_matched
                        and name.endswith("ffn.linear2.weight")
                        and _blocks(1, 2, 3)(name)
                    ):
                        w.copy_(initial[name] + redirected(w - initial[name], redirect, turn))
                if stream_matched:
                    idx = S.copy_task_batch(cfg, torch.Generator().manual_seed(999_999))[0]
                    for layer in range(3):
                        w = model.blocks[layer].ffn.linear2.weight
                        start = initial[f"blocks.{layer}.ffn.linear2.weight"]
                        d = w - start
                        w.copy_(start)
                        h = _ffn_input(model, layer, idx)
                        r = redirected(d, redirect, turn)
                        k = (h @ d.T).norm(dim=-1).mean() / (h @ r.T).norm(dim=-1).mean()
                        w.copy_(start + k * r)
            opt = adam()
        loss, _ = train_step(model, opt, *S.copy_task_batch(cfg, batches), rate(step))
        if step % 10 == 0:
            losses.append(round(loss.item(), 5))
    held_out = torch.Generator().manual_seed(999_999)
    with torch.no_grad():
        final = np.mean([model(*S.copy_task_batch(cfg, held_out))[1].item() for _ in range(4)])
    return round(float(final), 5), losses


def run_all(seeds=(0, 1, 2, 3, 4), verbose=True, on_progress=None, rows=FIRST_ROWS) -> dict:
    """Every row of ``rows`` (names in :data:`ROWS`) for every seed; the JSON-ready result."""
    t0, head, runs = time.perf_counter(), provenance(), []

    def result(complete: bool) -> dict:
        return head | {
            "what": "xiong_lm Post-LN on the copy task, Adam(betas=(0.9, 0.98), eps=1e-9), no "
            f"clipping: {SWITCH_AT} steps at 1e-2, then 1e-3 to step 300; at the switch a fresh "
            "Adam (except 'damaged, Adam kept') and the row's weights back to their initial "
            "values; final_loss: held-out copy loss (stability.train_run's 4 batches); losses: "
            "training loss every 10 steps",
            "seeds": list(seeds),
            "rows": list(rows),
            "learned_below": S.LEARNED_BELOW,
            "runs": runs,
            "complete": complete,
            "wall_time_s": round(time.perf_counter() - t0, 1),
            "where_it_ran": where_it_ran("cpu"),
        }

    def run_one(seed: int, row: str):
        fresh, reset = ROWS[row]
        restart_at, how = SWITCH_AT if fresh else None, REDIRECT.get(row)
        return control_run(seed, restart_at=restart_at, reset=reset, redirect=how,
                           stream_matched=row in STREAM_MATCHED)  # fmt: skip

    return run_rows(seeds, rows, run_one, result, runs, verbose, on_progress)


def parser() -> argparse.ArgumentParser:
    """The tool's arguments (also used by the tests to parse the command stored in the JSON)."""
    p = sweep_parser(PROG, __doc__)
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(FIRST_ROWS))
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run every row for every seed and write ``--out``; bad input exits with status 2 first."""
    return sweep_main(
        PROG,
        parser(),
        argv,
        lambda a, save: run_all(tuple(a.seeds), on_progress=save, rows=tuple(a.rows)),
    )


if __name__ == "__main__":
    main()
