"""Chapter 3's length-extrapolation sweep: train every scheme with every seed, merge parts.

Repository tooling, not reader API: the experiment itself (configuration, model, training,
evaluation) is :mod:`mini_transformer.lab`; this tool runs it over schemes and seeds,
summarises the runs and writes the JSON the chapter loads, with the package's command-line
rules (:func:`mini_transformer.cli.run_cli`): every argument and ``--out`` checked before any
training, the JSON rewritten after every run (``"complete": false`` until the end), exit
status 2 with a usage message for bad input, 1 for a failure while running, 130 for Ctrl-C.

Usage::

    python tools/extrapolation_lab.py --out FILE [--seeds 0 1 2] [--steps N] [--schemes ...]
    python tools/extrapolation_lab.py --merge A.json B.json [--attach KEY=C.json] --out FILE

``--scheme-lr alibi=0.01`` gives one scheme its own learning rate; ``--eval-lengths`` sets
the evaluation lengths (and the model's ``block_size``, the longest). A quick run:
``--steps 100 --seeds 0``. The committed ``mini_transformer/results/extrapolation.json`` came
from two processes side by side, a one-seed learning-rate check in two runs and a merge, then
a merge that attached the check (``--overwrite``: the output is a committed result)::

    python tools/extrapolation_lab.py --steps 10000 --schemes none learned sinusoidal \\
        --eval-lengths 32 48 64 128 256 --out runs/part1.json
    python tools/extrapolation_lab.py --steps 10000 --schemes memn2n rope alibi \\
        --eval-lengths 32 48 64 128 256 --out runs/part2.json
    python tools/extrapolation_lab.py --steps 10000 --seeds 0 --schemes memn2n \\
        --scheme-lr memn2n=0.01 --out runs/lr1.json
    python tools/extrapolation_lab.py --steps 10000 --seeds 0 --schemes none alibi \\
        --scheme-lr none=0.01 alibi=0.01 --out runs/lr2.json
    python tools/extrapolation_lab.py --merge runs/lr1.json runs/lr2.json --out runs/lr_check.json
    python tools/extrapolation_lab.py --merge runs/part1.json runs/part2.json --overwrite \\
        --attach lr_check=runs/lr_check.json --out mini_transformer/results/extrapolation.json

(the commands are stored in the file, the check's without the ``runs/`` folder; the sweep ran
as ``python -m mini_transformer.lab`` with the same flags before the command line moved here
on 2026-11-23). The input-scale control of chapter 3 (``results/03_scale_control.json``: the
sinusoidal model with its tokens times 36, not 8, so that token and encoding rows are equally
long at initialisation) is one run::

    python tools/extrapolation_lab.py --steps 10000 --schemes sinusoidal --embed-scale 36 \\
        --eval-lengths 32 48 64 128 256 --out mini_transformer/results/03_scale_control.json

Chapter 3's longer ALiBi run (``results/03_alibi_long.json``: seed 0 at three times the steps;
5.6 CPU-minutes, 16 minutes wall beside other jobs on 2 cores) is one run, written to a scratch
folder and copied (the file stores the command as run)::

    python tools/extrapolation_lab.py --steps 30000 --seeds 0 --schemes alibi \\
        --eval-lengths 32 48 64 128 256 --out mini_transformer/results/03_alibi_long.json

Chapter 3's second input-scale control (``results/03_pos_scale.json``: the sinusoidal encoding
times 8/36, tokens kept times 8, so that the two rows are equally long at initialisation without
faster token updates) is one run, written to a scratch folder and copied::

    python tools/extrapolation_lab.py --steps 10000 --schemes sinusoidal --pos-scale 0.2222 \\
        --eval-lengths 32 48 64 128 256 --out mini_transformer/results/03_pos_scale.json

Chapter 3's third input-scale control (``results/03_token_std.json``: the token rows drawn with
std ``d_model**-0.5`` = 0.125, tensor2tensor's draw, then times 8 as before; a reviewer's
control: Vaswani et al.'s times sqrt(d_model) goes with that draw, not with 0.02)::

    python tools/extrapolation_lab.py --steps 10000 --schemes sinusoidal --token-std 0.125 \\
        --eval-lengths 32 48 64 128 256 --out mini_transformer/results/03_token_std.json

(its config names the option ``sinusoidal_token_std``, as the tool did then; now ``token_std``).
The same draw for the learned model (``results/03_learned_std.json``; a reviewer's control, s71:
is the learned model's failure past L also the 0.02 draw's?) is one run, copied as above::

    python tools/extrapolation_lab.py --steps 10000 --schemes learned --token-std 0.125 \\
        --eval-lengths 32 48 64 128 256 --out mini_transformer/results/03_learned_std.json

Two controls of 2026-12-01 (a reviewer's, s81), each written to ``runs/`` and copied: MemN2N
with ``J`` fixed at the block size, prefix-stable, against the book's ``J = T``
(``results/03_memn2n_fixed_j.json``), and RoPE and ALiBi with their tokens drawn at std 0.125
like the std-0.125 sinusoidal and learned rows (``results/03_rope_alibi_std.json``, two processes
side by side and a merge)::

    python tools/extrapolation_lab.py --steps 10000 --schemes memn2n --memn2n-fixed-j 256 \\
        --eval-lengths 32 48 64 128 256 --out runs/memn2n_fixed_j.json
    python tools/extrapolation_lab.py --steps 10000 --schemes rope --token-std 0.125 \\
        --eval-lengths 32 48 64 128 256 --out runs/rope_std.json
    python tools/extrapolation_lab.py --steps 10000 --schemes alibi --token-std 0.125 \\
        --eval-lengths 32 48 64 128 256 --out runs/alibi_std.json
    python tools/extrapolation_lab.py --merge runs/rope_std.json runs/alibi_std.json \\
        --out runs/03_rope_alibi_std.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict

import torch
from sweep_cli import command_line, non_negative_int, write_json

from mini_transformer import lab
from mini_transformer.checkpoints import check_output_file
from mini_transformer.cli import positive_float, positive_int, printable, run_cli
from mini_transformer.data import SYNTHETIC_TASKS
from mini_transformer.hardware import where_it_ran
from mini_transformer.lab import LabConfig
from mini_transformer.memn2n import memn2n_encoding
from mini_transformer.model import POSITIONAL_SCHEMES as SCHEMES

PROG = "python tools/extrapolation_lab.py"

__all__ = ["PROG", "loss_curve", "run_lab", "merge_results", "parser", "main"]


def _mean(values: list[float]) -> float | None:
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else None


def _clean(v: float) -> float | None:
    return None if math.isnan(v) else round(v, 4)


def loss_curve(losses: list[float], every: int) -> list[float]:
    """Mean of ``losses`` over consecutive windows of ``every`` steps (drops a partial one)."""
    n = len(losses) // every
    return [round(sum(losses[i * every : (i + 1) * every]) / every, 4) for i in range(n)]


def _learned_info(w_init: torch.Tensor, w: torch.Tensor, seed: int, L: int) -> dict:
    """What training did to a learned position table ``(block_size, d_model)``."""
    return {
        "seed": seed,
        "max_len": int(w.shape[0]),
        "train_length": L,
        "init_std": round(float(w_init.std()), 4),
        "untrained_rows_max_change": float((w[L:] - w_init[L:]).abs().max())
        if w.shape[0] > L
        else None,
        "trained_rows_mean_change": round(float((w[:L] - w_init[:L]).norm(dim=1).mean()), 4),
        "cosine_similarity": [
            [round(float(v), 4) for v in row] for row in lab.cosine_similarity_matrix(w)
        ],
    }


class FixedJMemN2N(torch.nn.Module):
    r"""MemN2N's $x \odot l_j$ with $J$ fixed (not $J = T$): position $j$ gets the same code in
    every sequence, so the codes are prefix-stable; ``(B, T, d) -> (B, T, d)``, ``T <= J``."""

    def __init__(self, d_model: int, J: int) -> None:
        super().__init__()
        self.J = J
        self.register_buffer("l", torch.from_numpy(memn2n_encoding(J, d_model)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        if T > self.J:
            raise ValueError(f"sequence length {T} exceeds the fixed J = {self.J}")
        return x * self.l[:T].to(dtype=x.dtype)  # the first T rows of the J-word code


def _train_and_evaluate(scheme: str, cfg: LabConfig, seed: int) -> tuple[dict, dict | None]:
    """One run: ``({accuracy, accuracy_beyond, final_loss, train_seconds, loss_curve}, info)``.

    ``info`` describes the trained learned position table (``None`` for other schemes).
    """
    t0 = time.perf_counter()
    model = lab.make_model(scheme, cfg, seed)
    scale = cfg.extra.get("sinusoidal_embed_scale")
    if scheme == "sinusoidal" and scale is not None:  # the input-scale control (--embed-scale)
        model.embed_scale = scale
    pos_scale = cfg.extra.get("sinusoidal_pos_scale")
    if scheme == "sinusoidal" and pos_scale is not None:  # the other control (--pos-scale)
        model.pos_emb.pe.mul_(pos_scale)
    token_std = cfg.extra.get("token_std", cfg.extra.get("sinusoidal_token_std"))  # old name
    if token_std is not None:  # third control (--token-std; any scheme since 2026-12-01)
        with torch.no_grad():  # the same N(0, 0.02^2) draw, rescaled (the tied head with it)
            model.tok_emb.weight.mul_(token_std / 0.02)
    fixed_j = cfg.extra.get("memn2n_fixed_j")
    if scheme == "memn2n" and fixed_j is not None:  # the prefix-stable control (--memn2n-fixed-j)
        model.pos_emb = FixedJMemN2N(cfg.d_model, fixed_j)
    w_init = lab.learned_position_weight(model) if scheme == "learned" else None
    losses = lab.train_model(model, cfg, seed)
    seconds = time.perf_counter() - t0
    tail = losses[-50:]
    run = lab.accuracy_by_length(model, cfg, seed) | {
        "final_loss": round(sum(tail) / len(tail), 4),
        "train_seconds": round(seconds, 1),
        "loss_curve": loss_curve(losses, cfg.curve_every),
    }
    if w_init is None:
        return run, None
    w = lab.learned_position_weight(model)
    return run, _learned_info(w_init, w, seed, cfg.train_length)


def _summarise(cfg: LabConfig, scheme: str, runs: list[dict]) -> dict:
    """Per-length accuracies (mean over seeds and per seed) and the per-seed training facts."""
    out = {}
    for key in ("accuracy", "accuracy_beyond"):
        out[key] = {}
        for T in cfg.eval_lengths:
            vals = [r[key][T] for r in runs]
            mean = _mean(vals)
            out[key][str(T)] = {
                "mean": _clean(mean) if mean is not None else None,
                "per_seed": [_clean(v) for v in vals],
            }
    out["lr"] = cfg.lr_for(scheme)
    for key in ("final_loss", "train_seconds", "loss_curve"):
        out[key] = [r[key] for r in runs]
    return out


def _result(cfg: LabConfig, seeds: list[int], runs: dict, learned, start, complete) -> dict:
    """The JSON-ready result of the runs so far (``complete``: every run finished)."""
    return {
        "lab": "length extrapolation (mini_transformer.lab)",
        "config": asdict(cfg) | {"block_size": cfg.block_size},
        "seeds": list(seeds),
        "steps": cfg.steps,
        "schemes": list(runs),
        "eval_lengths": list(cfg.eval_lengths),
        "chance_accuracy": round(1.0 / cfg.vocab_size, 4),
        "results": {s: _summarise(cfg, s, r) for s, r in runs.items()},
        "learned_embedding": learned,
        "complete": complete,
        "wall_time_s": round(time.perf_counter() - start, 1),
        "torch_version": torch.__version__,
        "device": f"cpu ({platform.machine()}, {os.cpu_count()} cores, "
        f"{torch.get_num_threads()} torch thread(s))",
        "where_it_ran": where_it_ran("cpu"),
        "python_version": platform.python_version(),
    }


def run_lab(
    cfg: LabConfig,
    seeds: list[int],
    schemes: tuple[str, ...] | list[str] = SCHEMES,
    verbose: bool = True,
    on_progress: Callable[[dict], None] | None = None,
) -> dict:
    """Train and evaluate every scheme with every seed; return the JSON-ready result dict.

    Per scheme the result holds the accuracies (mean and per seed), the learning rate used,
    the final training loss (mean of the last 50 steps) and the loss curve of every seed
    (see :func:`loss_curve`), so that one can check that training had levelled off.
    ``on_progress`` is called with the result so far (``"complete": False``) after every
    run, so that a caller can save it: an interrupted sweep keeps what it finished.
    """
    start = time.perf_counter()
    runs: dict[str, list[dict]] = {}
    learned = None
    for scheme in schemes:
        runs[scheme] = []
        for seed in seeds:
            run, info = _train_and_evaluate(scheme, cfg, seed)
            runs[scheme].append(run)
            learned = learned or info
            if verbose:
                accs = " ".join(f"T={T}:{run['accuracy'][T]:.3f}" for T in cfg.eval_lengths)
                print(
                    f"{scheme:>10} seed {seed}: loss {run['final_loss']:.3f} {accs} "
                    f"({run['train_seconds']:.0f}s)",
                    flush=True,
                )
            if on_progress is not None:
                on_progress(_result(cfg, seeds, runs, learned, start, complete=False))
    return _result(cfg, seeds, runs, learned, start, complete=True)


def _shared(part: dict) -> dict:
    """What parts must agree on to be merged; per-scheme learning rates may differ."""
    config = {k: v for k, v in part["config"].items() if k != "scheme_lr"}
    keys = ("seeds", "steps", "eval_lengths", "torch_version")
    return {k: part[k] for k in keys} | {"config": config}


#: What a result of this tool holds, and a part given to :func:`merge_results` must.
LAB_RESULT_KEYS = (
    "config",
    "seeds",
    "steps",
    "eval_lengths",
    "torch_version",
    "schemes",
    "results",
    "learned_embedding",
    "command",
    "wall_time_s",
)


def merge_results(parts: list[dict]) -> dict:
    """Merge lab results that ran the same configuration on disjoint sets of schemes.

    The sweep can be split across processes (``--schemes``) and merged afterwards
    (``--merge``). Schemes come out in the order of
    :data:`mini_transformer.model.POSITIONAL_SCHEMES`;
    ``commands`` lists the command of every part; ``wall_time_s`` is the longest part (the
    parts ran side by side) and ``cpu_time_s`` their sum.
    """
    if not parts:
        raise ValueError("parts must hold at least one lab result, got none")
    for i, part in enumerate(parts):
        missing = [k for k in LAB_RESULT_KEYS if not isinstance(part, dict) or k not in part]
        if missing or not isinstance(part["config"], dict) or not isinstance(part["results"], dict):
            raise ValueError(
                f"parts[{i}] is not a lab result (a file this tool wrote): it lacks "
                f"{', '.join(missing) or 'a config and results dict'}"
            )
    base = parts[0]
    for part in parts[1:]:
        for key, value in _shared(part).items():
            if value != _shared(base)[key]:
                raise ValueError(f"cannot merge lab results that differ in {key!r}")
    for i, part in enumerate(parts):
        if set(part["schemes"]) - set(part["results"]):
            raise ValueError(f"parts[{i}] lists schemes it holds no results for")
    seen = [s for part in parts for s in part["schemes"]]
    if len(seen) != len(set(seen)):
        raise ValueError(f"parts must hold disjoint schemes, got {seen}")
    results = {s: part["results"][s] for part in parts for s in part["schemes"]}
    schemes = [s for s in SCHEMES if s in results]
    learned = [p["learned_embedding"] for p in parts if p["learned_embedding"] is not None]
    scheme_lr = {
        s: lr
        for p in parts
        for s, lr in p["config"].get("scheme_lr", {}).items()
        if s in p["schemes"]
    }
    return dict(base) | {
        "config": base["config"] | {"scheme_lr": scheme_lr},
        "command": " && ".join(p["command"] for p in parts),
        "commands": [p["command"] for p in parts],
        "schemes": schemes,
        "results": {s: results[s] for s in schemes},
        "learned_embedding": learned[0] if learned else None,
        "wall_time_s": max(p["wall_time_s"] for p in parts),
        "cpu_time_s": round(sum(p.get("cpu_time_s", p["wall_time_s"]) for p in parts), 1),
        "parts": len(parts),
    }


def _scheme_lr(text: str) -> tuple[str, float]:
    """argparse type: ``SCHEME=LR`` with a scheme of the lab and a finite ``LR > 0``."""
    scheme, sep, value = text.partition("=")
    if not sep or scheme not in SCHEMES:
        raise argparse.ArgumentTypeError(
            f"expected SCHEME=LR with SCHEME in {SCHEMES}, got {text!r}"
        )
    try:
        lr = float(value)
    except ValueError:
        lr = math.nan
    if not (lr > 0 and math.isfinite(lr)):
        raise argparse.ArgumentTypeError(
            f"expected SCHEME=LR with a positive number LR, got {text!r}"
        )
    return scheme, lr


def parser() -> argparse.ArgumentParser:
    """The tool's arguments (also used by the tests to parse the commands stored in JSON)."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="write the JSON results here (default: print only)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --out (a committed result too)",
    )
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=positive_int, default=LabConfig.steps)
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES)
    p.add_argument("--task", default=LabConfig.task, choices=sorted(SYNTHETIC_TASKS))
    p.add_argument("--train-length", type=positive_int, default=LabConfig.train_length)
    p.add_argument("--offset", type=positive_int, default=LabConfig.offset)
    p.add_argument("--vocab-size", type=positive_int, default=LabConfig.vocab_size)
    p.add_argument("--batch-size", type=positive_int, default=LabConfig.batch_size)
    p.add_argument("--lr", type=positive_float, default=LabConfig.lr)
    p.add_argument("--eval-samples", type=positive_int, default=LabConfig.eval_samples)
    p.add_argument(
        "--eval-lengths",
        type=positive_int,
        nargs="+",
        default=None,
        metavar="T",
        help="lengths to evaluate at (default: L, 1.5 L, 2 L); the model's "
        "block_size becomes the longest, so a learned table gets that many rows",
    )
    p.add_argument(
        "--scheme-lr",
        type=_scheme_lr,
        nargs="+",
        default=[],
        metavar="SCHEME=LR",
        help="per-scheme peak learning rates, e.g. alibi=0.01 (others use --lr)",
    )
    p.add_argument(
        "--embed-scale",
        type=positive_float,
        default=None,
        metavar="S",
        help="multiply the sinusoidal model's token embeddings by S instead of sqrt(d_model) "
        "(a control: S = 36 makes token and encoding rows equally long at initialisation)",
    )
    p.add_argument(
        "--pos-scale",
        type=positive_float,
        default=None,
        metavar="S",
        help="multiply the sinusoidal encoding by S (a control: S = 8/36 makes encoding rows as "
        "long as the sqrt(d_model)-scaled token rows at initialisation)",
    )
    p.add_argument(
        "--token-std",
        type=positive_float,
        default=None,
        metavar="S",
        help="draw the sinusoidal or learned model's token embeddings (tied to its output layer) "
        "with std S instead of 0.02 (the sinusoidal model's still times sqrt(d_model); a control: "
        "S = d_model**-0.5, the draw that tensor2tensor pairs with Vaswani et al.'s sqrt(d_model))",
    )
    p.add_argument(
        "--memn2n-fixed-j",
        type=positive_int,
        default=None,
        metavar="J",
        help="give the memn2n scheme a fixed J (e.g. the block size, 256) instead of J = T, so its "
        "codes are prefix-stable (a control for chapter 3's J = T adaptation)",
    )
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads (1 = bit-stable)")
    p.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="JSON",
        help="merge these result files (disjoint schemes) instead of training",
    )
    p.add_argument(
        "--attach",
        nargs="+",
        default=[],
        metavar="KEY=JSON",
        help="with --merge: also store these result files under KEY "
        "(e.g. lr_check=lr.json, a side experiment)",
    )
    return p


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError (a binary file)
        raise ValueError(f"{path} is not a JSON file ({err})") from None


def _merge(args: argparse.Namespace, command: str) -> dict:
    result = merge_results([_read_json(path) for path in args.merge])
    result["merge_command"] = command
    for item in args.attach:
        key, sep, path = item.partition("=")
        if not sep or not key or key in result:
            raise ValueError(f"--attach expects KEY=JSON with a new KEY, got {item!r}")
        result[key] = _read_json(path)
    return result


def _config(args: argparse.Namespace) -> LabConfig:
    return LabConfig(
        task=args.task,
        vocab_size=args.vocab_size,
        offset=args.offset,
        train_length=args.train_length,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        eval_samples=args.eval_samples,
        scheme_lr=dict(args.scheme_lr),
        eval_lengths=args.eval_lengths,
        extra=({} if args.embed_scale is None else {"sinusoidal_embed_scale": args.embed_scale})
        | ({} if args.pos_scale is None else {"sinusoidal_pos_scale": args.pos_scale})
        | ({} if args.token_std is None else {"token_std": args.token_std})
        | ({} if args.memn2n_fixed_j is None else {"memn2n_fixed_j": args.memn2n_fixed_j}),
    )


def _sweep(args: argparse.Namespace, cfg: LabConfig, command: str) -> dict:
    torch.set_num_threads(args.threads)
    head = {"command": command}
    save = (lambda partial: write_json(head | partial, args.out)) if args.out else None
    cpu0 = time.process_time()
    result = head | run_lab(cfg, args.seeds, args.schemes, on_progress=save)
    result["cpu_time_s"] = round(time.process_time() - cpu0, 1)
    return result


def main(argv: list[str] | None = None) -> dict:
    """Run the sweep (or ``--merge`` parts) and write ``--out``; return the result.

    Every argument and ``--out`` are checked before any training (exit 2 with usage; an
    existing file only with ``--overwrite``, an input never); a failure once training began exits
    with 1. The JSON is rewritten after every run (``"complete": false`` until the end).
    """
    p = parser()
    args = p.parse_args(argv)
    command = command_line(PROG, argv)

    def check():
        if args.out:  # never over one of the files it reads
            inputs = [*(args.merge or []), *(a.partition("=")[2] for a in args.attach)]
            check_output_file(args.out, overwrite=args.overwrite, inputs=inputs)
        if args.attach and not args.merge:
            raise ValueError("--attach only works together with --merge")
        if args.merge:  # reading and merging the parts is the check; nothing runs
            return _merge(args, command)
        cfg = _config(args)
        if args.memn2n_fixed_j is not None and args.memn2n_fixed_j < cfg.block_size:
            raise ValueError(
                f"--memn2n-fixed-j must be at least the longest evaluation length "
                f"{cfg.block_size}, got {args.memn2n_fixed_j}"
            )
        return cfg

    def work(checked) -> dict:
        result = checked if args.merge else _sweep(args, checked, command)
        if args.out:
            write_json(result, args.out)
            print(printable(f"wrote {args.out} ({result['wall_time_s']} s)"))
        return result

    return run_cli(p, check, work)


if __name__ == "__main__":
    main()
