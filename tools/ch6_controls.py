"""Chapter 6's four heaviest control cells, run once and stored (``book/06_training.ipynb``).

Repository tooling, not reader API. Each ``--part`` is the computation one folded or appendix
cell of the chapter used to run live on the committed ``cpu`` model (float32, the stored float16
weights cast to float32, one thread); the cell now loads the stored file and prints the same
lines. Command-line rules of :func:`mini_transformer.cli.run_cli` (``--out`` refused if it
exists, unless ``--overwrite``; bad arguments exit 2 before any work).

- ``full-context`` (section 6.5's dropdown, "the full-context control"): 4,096 held-out
  characters spread evenly over the whole windows, each scored after a full 128 characters of
  context and in its restarting window, against the interpolated Kneser-Ney 6-gram
  (:func:`kneser_ney_loss`, the chapter's function) on the same characters;
- ``more-samples`` (section 6.5's dropdown, "30 more samples"): 30 samples of 200 characters
  after ``"KING.\\n"`` at temperature 0.8, one batched call with generator seed 1, and each
  sample's share of real words (words of the training works);
- ``sample-seeds`` (appendix A.1): the sampled estimate's 128 windows (8 batches of 16) drawn
  with seeds 1000 to 1029, each seed's mean window loss and its s / sqrt(128);
- ``rope-pairs`` (appendix A.4): the cost on 128 spaced held-out windows of taking the rotation
  off each RoPE pair alone (unrotated, or zeroed), and off the groups of pairs by how far they
  turn within T.

The committed results (the command, commit, wall time and device are stored in each)::

    python tools/ch6_controls.py --part full-context \\
        --out mini_transformer/results/06_full_context.json
    python tools/ch6_controls.py --part more-samples \\
        --out mini_transformer/results/06_more_samples.json
    python tools/ch6_controls.py --part sample-seeds \\
        --out mini_transformer/results/06_sample_seeds.json
    python tools/ch6_controls.py --part rope-pairs \\
        --out mini_transformer/results/06_rope_pairs.json

(72, 11, 11 and 43 s on one thread of a 2-core CPU shared with other jobs, load average 4.)
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import torch
import torch.nn.functional as F
from sweep_cli import provenance, sweep_main, sweep_parser

from mini_transformer import data, positional, train
from mini_transformer.hardware import where_it_ran

PROG = "python tools/ch6_controls.py"
PARTS = ("full-context", "more-samples", "sample-seeds", "rope-pairs")
CHUNK = 512  # full-context: characters per stored chunk (a test reruns the first)
GROUPS = ("at least one turn", "45 degrees to one turn", "less than 45 degrees")

__all__ = ["PROG", "PARTS", "kneser_ney_loss", "full_context", "more_samples",
           "window_losses", "sample_seeds", "PartialRotary", "spaced_windows", "rope_pairs",
           "parser", "main"]  # fmt: skip


# ------------------------------------------------------------------ full-context (section 6.5)
def kneser_ney_loss(train_ids, val_ids, n, D=0.75, V=84) -> np.ndarray:
    """The chapter's ``kneser_ney_loss`` (section 6.5's folded cell), with the ids as arguments:
    interpolated Kneser-Ney of order ``n`` fitted on ``train_ids``, the loss (nats) of each
    held-out character from character ``n - 1`` on."""

    def codes(ids, k):  # each k-gram as one integer in base V
        ids = ids.numpy().astype(np.int64)
        return sum(ids[j : len(ids) - k + 1 + j] * V ** (k - 1 - j) for j in range(k))

    def lookup(keys, uniq, vals):  # vals at keys in the sorted table uniq, 0 where absent
        at = np.searchsorted(uniq, keys).clip(max=len(uniq) - 1)
        return np.where(uniq[at] == keys, vals[at], 0)

    held, tables = codes(val_ids, n), {n: np.unique(codes(train_ids, n), return_counts=True)}
    for k in range(n - 1, 0, -1):  # distinct (k+1)-grams ending in each k-gram
        tables[k] = np.unique(tables[k + 1][0] % V**k, return_counts=True)
    p = np.full(len(held), 1.0 / V)
    for k in range(1, n + 1):
        uniq, count = tables[k]
        ctx, first = np.unique(uniq // V, return_index=True)
        total, types = np.add.reduceat(count, first), np.diff(np.append(first, len(uniq)))
        keys = held % V**k
        seen = lookup(keys // V, ctx, total)
        mix = np.maximum(lookup(keys, uniq, count) - D, 0) + D * lookup(keys // V, ctx, types) * p
        p = np.where(seen > 0, mix / np.maximum(seen, 1), p)
    return -np.log(p)


def spread_targets(n_val: int, T: int, n: int = 4096) -> torch.Tensor:
    """The ``n`` held-out characters, evenly spaced (integer spacing) inside the whole windows."""
    step = ((n_val - 1) // T * T - T) // (n - 1)
    return T + step * torch.arange(n)


@torch.no_grad()
def _losses_of(model, ids, starts, targets) -> torch.Tensor:  # target t from ids[s:s + T]
    T = model.config.block_size
    x = torch.stack([ids[s : s + T] for s in starts])
    logits, _ = model(x)
    return F.cross_entropy(
        logits[torch.arange(len(x)), targets - starts - 1], ids[targets], reduction="none"
    ).double()


def full_context(model, val_ids, targets) -> dict[str, torch.Tensor]:
    """Each target character's loss after a full ``T`` characters of context (a window of its
    own) and in the restarting windows (the consecutive windows of ``T``), batches of 512."""
    T = model.config.block_size
    parts = targets.split(512)
    return {
        "full": torch.cat([_losses_of(model, val_ids, t - T, t) for t in parts]),
        "restart": torch.cat([_losses_of(model, val_ids, (t - 1) // T * T, t) for t in parts]),
    }


def _paired(d) -> dict:
    d = np.asarray(d, dtype=np.float64)
    return {"mean": float(d.mean()), "se": float(d.std(ddof=1) / math.sqrt(len(d)))}


def run_full_context(model, train_ids, val_ids) -> dict:
    T = model.config.block_size
    targets = spread_targets(len(val_ids), T)
    scored = full_context(model, val_ids, targets)
    kn6 = kneser_ney_loss(train_ids, val_ids, 6)[targets.numpy() - 5]
    full, restart = scored["full"].numpy(), scored["restart"].numpy()
    return {
        "what": "4,096 held-out characters spread evenly (every step-th from T), each scored by "
        "the cpu model after a full T = 128 characters of context and in its restarting window "
        "(consecutive windows of T), and by the Kneser-Ney 6-gram (D = 0.75); nats",
        "n_characters": len(targets),
        "spacing": int(targets[1] - targets[0]),
        "means": {
            "full": float(full.mean()),
            "restart": float(restart.mean()),
            "kn6": float(kn6.mean()),
        },
        "restart_minus_full": _paired(restart - full),
        "full_minus_kn6": _paired(full - kn6),
        "chunk": CHUNK,
        "chunk_means": [
            {
                "full": float(full[i : i + CHUNK].mean()),
                "restart": float(restart[i : i + CHUNK].mean()),
                "kn6": float(kn6[i : i + CHUNK].mean()),
            }
            for i in range(0, len(targets), CHUNK)
        ],
    }


# ------------------------------------------------------------------ more-samples (section 6.5)
def words_of(text: str) -> list[str]:
    """The runs of letters, the last one dropped when the text stops inside it (the chapter's)."""
    words = re.findall(r"[A-Za-z]+", text)
    return words[:-1] if text[-1].isalpha() else words


def more_samples(model, tok, n_samples=30, n_new=200, seed=1, prompt="KING.\n") -> list[str]:
    """``n_samples`` samples of ``n_new`` characters after ``prompt`` at temperature 0.8, one
    batched call with generator ``seed``; the new characters of each."""
    start = tok.encode(prompt)[None, :]
    out = model.generate(start.repeat(n_samples, 1), max_new_tokens=n_new, temperature=0.8,
                         generator=torch.Generator().manual_seed(seed))  # fmt: skip
    return [tok.decode(row[start.shape[1] :]) for row in out]


def run_more_samples(model, tok, train_text) -> dict:
    texts = more_samples(model, tok)
    known = set(re.findall(r"[A-Za-z]+", train_text))
    shares = [float(np.mean([w in known for w in words_of(t)])) for t in texts]
    return {
        "what": "30 samples of 200 characters after 'KING.\\n', temperature 0.8, one batched "
        "generate call with torch.Generator().manual_seed(1); real_word_share: complete words "
        "(runs of letters) that occur in the training works",
        "n_samples": len(texts),
        "n_new": 200,
        "texts": texts,
        "real_word_share": shares,
    }


# ------------------------------------------------------------------ sample-seeds (appendix A.1)
@torch.no_grad()
def window_losses(model, ids, n_batches=8, batch_size=16, seed=1234) -> torch.Tensor:
    """The loss of each window apart: ``estimate_loss``'s seeded windows (the chapter's)."""
    g, T = torch.Generator().manual_seed(seed), model.config.block_size
    out = []
    for _ in range(n_batches):
        xs, ys = data.get_batch(ids, batch_size, T, generator=g)
        logits, _ = model(xs)
        out.append(F.cross_entropy(logits.transpose(1, 2), ys, reduction="none").mean(1))
    return torch.cat(out).double()


def sample_seeds(model, val_ids, seeds) -> list[dict]:
    """Per seed: the mean of its 128 window losses and s / sqrt(128)."""
    rows = []
    for s in seeds:
        w = window_losses(model, val_ids, seed=s)
        rows.append({"seed": s, "mean": float(w.mean()), "se": float(w.std() / math.sqrt(len(w)))})
    return rows


def run_sample_seeds(model, val_ids) -> dict:
    return {
        "what": "the sampled held-out estimate (8 batches of 16 windows of T, data.get_batch "
        "with torch.Generator().manual_seed(seed)) for seeds 1000 to 1029: mean window loss "
        "(nats) and s / sqrt(128) over its windows",
        "seeds": list(range(1000, 1030)),
        "runs": sample_seeds(model, val_ids, range(1000, 1030)),
    }


# ------------------------------------------------------------------ rope-pairs (appendix A.4)
class PartialRotary(torch.nn.Module):
    """RoPE on the pairs where ``rotate`` is True; the other pairs left unrotated, or set to
    zero (``zero=True``), which removes them from q.k (the chapter's)."""

    def __init__(self, rotary, rotate, zero=False):
        super().__init__()
        self.rotary, self.zero = rotary, zero
        self.register_buffer("rotate", rotate.repeat_interleave(2))

    def forward(self, t, offset=0):
        return torch.where(self.rotate, self.rotary(t, offset), 0.0 if self.zero else t)


def use_rotary(model, rotary) -> None:
    for block in model.blocks:
        block.attn.rotary = rotary


def spaced_windows(val_ids, T: int) -> torch.Tensor:
    """Every 30th of the held-out text's consecutive windows of ``T``: (128, T + 1)."""
    return val_ids.unfold(0, T + 1, T)[::30]


@torch.no_grad()
def spaced_losses(model, spaced) -> torch.Tensor:
    logits, _ = model(spaced[:, :-1])
    return F.cross_entropy(logits.transpose(1, 2), spaced[:, 1:], reduction="none").mean(1).double()


def pair_groups(d_head: int, T: int) -> dict[str, np.ndarray]:
    """The pairs by the degrees they turn within ``T``: the chapter's three groups."""
    turn_deg = 360 * T / (2 * np.pi / positional.sinusoidal_frequencies(d_head))
    return dict(
        zip(
            GROUPS,
            (turn_deg >= 360, (turn_deg >= 45) & (turn_deg < 360), turn_deg < 45),
            strict=True,
        )
    )


def ablation_change(model, spaced, base, rotate, zero=False) -> torch.Tensor:
    """Each spaced window's loss change with RoPE only on the pairs in ``rotate``."""
    rope = model.rotary
    use_rotary(model, PartialRotary(rope, rotate, zero=zero))
    try:
        return spaced_losses(model, spaced) - base
    finally:
        use_rotary(model, rope)


def _stats(change: torch.Tensor) -> dict:
    return {"mean": float(change.mean()), "se": float(change.std() / math.sqrt(len(change)))}


def rope_pairs(model, val_ids) -> dict:
    T, n_pairs = model.config.block_size, model.config.d_head // 2
    spaced = spaced_windows(val_ids, T)
    base = spaced_losses(model, spaced)
    pairs = torch.arange(n_pairs)
    single = {kind: [_stats(ablation_change(model, spaced, base, pairs != i, zero=kind == "zeroed"))
                     for i in range(n_pairs)] for kind in ("unrotated", "zeroed")}  # fmt: skip
    groups = pair_groups(model.config.d_head, T)
    removed = {name: ~torch.from_numpy(members) for name, members in groups.items()}
    removed["all pairs"] = torch.zeros(n_pairs, dtype=torch.bool)
    variants = [(name, False) for name in removed] + [(name, True) for name in groups]
    rows = []
    for name, zero in variants:
        change = ablation_change(model, spaced, base, removed[name], zero=zero)
        rows.append({"group": name, "zeroed": zero, "n_pairs": int((~removed[name]).sum())}
                    | _stats(change) | {"window_changes": change.tolist()})  # fmt: skip
    return {
        "what": "the cpu model on every 30th of the held-out text's 3,833 consecutive windows "
        "of T (128 windows): the change in each window's mean loss (nats) when one RoPE pair, "
        "or a group of pairs, is left unrotated or zeroed in every layer; se: the changes' "
        "s / sqrt(128)",
        "n_windows": len(base),
        "base": _stats(base),
        "single_pairs": single,
        "groups": rows,
    }


# ------------------------------------------------------------------ command line
def parser():
    """The tool's arguments (also used by the tests to parse the command stored in the JSON)."""
    p = sweep_parser(PROG, __doc__)
    p.add_argument("--part", required=True, choices=PARTS)
    return p


def run_part(part: str) -> dict:
    """One part on the committed cpu model: the JSON-ready result with its provenance."""
    head = provenance(
        checkpoint="cpu (mini_transformer/assets)",
        precision="float32 (no autocast), weights as stored (float16) cast to float32",
        part=part,
    )
    model, tok, _ = train.load_model(train.PRETRAINED["cpu"])
    train_text = data.load_corpus("train")
    train_ids, val_ids = tok.encode(train_text), tok.encode(data.load_corpus("val"))
    t0 = time.perf_counter()
    if part == "full-context":
        body = run_full_context(model, train_ids, val_ids)
    elif part == "more-samples":
        body = run_more_samples(model, tok, train_text)
    elif part == "sample-seeds":
        body = run_sample_seeds(model, val_ids)
    else:
        body = rope_pairs(model, val_ids)
    return (
        head
        | body
        | {
            "complete": True,
            "wall_time_s": round(time.perf_counter() - t0, 1),
            "where_it_ran": where_it_ran("cpu"),
        }
    )


def main(argv: list[str] | None = None) -> dict:
    """Run one part and write ``--out``; bad input exits with status 2 first."""
    return sweep_main(PROG, parser(), argv, lambda a, save: run_part(a.part))


if __name__ == "__main__":
    main()
