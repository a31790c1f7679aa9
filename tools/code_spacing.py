"""Chapter 3's code-spacing intervention: which change in MemN2N-style codes costs t < L accuracy.

With ``J = T`` (chapter 3's adaptation) a length-``T`` input gives position ``t`` (1-based
``j = t + 1``) the code ``l_j`` at fraction ``j/T``. By the causal mask, the first ``L`` outputs of
a length-``J`` input are those of a length-``L`` input whose codes are the length-``J`` ones, so
this tool feeds the retrained sweep model length-``L`` evaluation sequences with replaced
fractions and scores the queries ``t < L`` (``t >= offset``):

- ``trained``: ``j/L``, the codes of a length-``L`` input (checked equal to the model's own);
- ``a``: ``j/J``, the codes the first ``L`` positions get at length ``J``;
- ``b`` (spacing only): ``q/L + (j - q)/J`` with ``q = offset + 1``: neighbours ``1/J`` apart as
  in ``a``, but every fraction in training's range ``[1/L, 1]`` and every scored query's
  (``j >= q``) at least ``q/L``, the least a scored training query had;
- ``c`` (shift only): the trained spacing ``1/L``, shifted down so that ``j = offset + 1`` gets
  ``(offset + 1)/J`` as in ``a`` (fractions below 0, keys ``j <= offset`` only, clipped at 0).

The models are retrained exactly as the sweep did (``tools/lab_attention.py``'s path: the
configuration, seeds and steps of ``mini_transformer/results/extrapolation.json``), and each
run stores ``max_accuracy_difference`` against the sweep's stored accuracies (0 when reproduced
to the stored four decimals). Evaluation sequences: the sweep's generator for the seed
(``10_000 + seed``) at length ``L``.

Run (about 100 CPU-seconds a model on one thread)::

    python tools/code_spacing.py --seeds 0 --out mini_transformer/results/03_code_spacing.json

Variant ``d`` (added later) is in ``03_spacing_end``, made the same way with all four
variants (its ``a``-``c`` reproduce ``03_code_spacing``). Chapter 3's file merges three runs
made side by side, ``--seeds 0``, ``--seeds 1`` and
``--seeds 2``, each with its own ``--out``; ``added_runs`` lists the later two (command, runs,
machine and wall time).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sweep_cli import command_line, non_negative_int, run_sweep_cli

from mini_transformer import data, lab
from mini_transformer.cli import positive_int
from mini_transformer.hardware import where_it_ran

PROG = "python tools/code_spacing.py"


def fractions(variant: str, J: int, L: int, offset: int) -> np.ndarray:
    """The fractions ``(L,)`` that replace ``j/T`` for ``j = 1..L`` in ``variant``."""
    j = np.arange(1, L + 1)
    if variant == "trained":
        return j / L
    if variant == "a":
        return j / J
    if variant == "b":
        q = offset + 1
        return q / L + (j - q) / J
    if variant == "c":
        q = offset + 1
        return np.clip(j / L - (q / L - q / J), 0.0, None)
    if variant == "d":
        return 1 - (L - j) / J
    raise ValueError(variant)


def the_sweep() -> tuple[dict, lab.LabConfig]:
    """The sweep's stored result (``extrapolation.json``) and its lab configuration."""
    sweep_result = data.load_result("extrapolation")
    stored = sweep_result["config"]
    return sweep_result, lab.LabConfig(**{k: v for k, v in stored.items() if k != "block_size"})


def retrain(scheme: str, seed: int, sweep_result: dict, cfg: lab.LabConfig):
    """The sweep's ``scheme`` model for ``seed`` retrained as the sweep did, the evaluation
    batch ``(idx, targets)`` at length ``L`` (the sweep's generator ``10_000 + seed``), and the
    largest difference of its accuracies from the stored ones (0 when reproduced to the stored
    four decimals)."""
    model = lab.make_model(scheme, cfg, seed=seed)
    lab.train_model(model, cfg, seed=seed)
    acc = lab.accuracy_by_length(model, cfg, seed=seed)["accuracy"]
    per_seed = sweep_result["results"][scheme]["accuracy"]
    i = sweep_result["seeds"].index(seed)
    diff = max(abs(round(a, 4) - per_seed[str(T)]["per_seed"][i]) for T, a in acc.items())
    g = torch.Generator().manual_seed(10_000 + seed)
    return model, cfg.batch(cfg.eval_samples, cfg.train_length, g), round(diff, 4)


@torch.no_grad()
def accuracy_with_fractions(model, idx, targets, frac: np.ndarray, offset: int) -> float:
    """Accuracy on the scored positions of ``idx`` with MemN2N codes at ``frac`` (1-based j)."""
    d = model.config.d_model
    k = torch.arange(1, d + 1, dtype=torch.float64)[None, :]
    f = torch.as_tensor(frac, dtype=torch.float64)[:, None]
    codes = ((1 - k / d) + f * (2 * k / d - 1)).float()  # (L, d): section 3.1, grouped by j/J
    x = model.tok_emb(idx) * codes
    for block in model.blocks:
        x = block(x)
    logits = model.lm_head(model.ln_f(x))
    return float((logits.argmax(-1) == targets)[:, offset:].float().mean())


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--lengths", type=positive_int, nargs="+", default=[48, 64, 256])
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    sweep_result, cfg = the_sweep()
    stored = sweep_result["config"]
    L, offset = cfg.train_length, cfg.offset
    missing = [s for s in args.seeds if s not in sweep_result["seeds"]]
    if missing or any(J <= L for J in args.lengths):
        p.error(f"--seeds must be among {sweep_result['seeds']} and --lengths above {L}")

    def sweep(save) -> dict:
        result = {
            "lab": stored,
            "scheme": "memn2n",
            "offset": offset,
            "train_length": L,
            "lengths": args.lengths,
            "variants": {
                "trained": "j/L",
                "a": "j/J",
                "b": "q/L + (j - q)/J, q = offset + 1",
                "c": "j/L - (q/L - q/J), q = offset + 1, clipped at 0",
                "d": "1 - (L - j)/J",
            },
            "where_it_ran": where_it_ran("cpu"),
            "runs": {},
        }
        t0 = time.perf_counter()
        for seed in args.seeds:
            model, (idx, targets), diff = retrain("memn2n", seed, sweep_result, cfg)
            with torch.no_grad():
                own = model(idx)[0]
            mine = accuracy_with_fractions(
                model, idx, targets, fractions("trained", L, L, offset), offset
            )
            own_acc = float((own.argmax(-1) == targets)[:, offset:].float().mean())
            if abs(mine - own_acc) > 1e-9:
                raise RuntimeError(f"replaced codes at j/L score {mine}, the model {own_acc}")
            run = {"max_accuracy_difference": diff, "trained": round(mine, 4), "by_J": {}}
            for J in args.lengths:
                run["by_J"][str(J)] = {
                    v: round(
                        accuracy_with_fractions(
                            model, idx, targets, fractions(v, J, L, offset), offset
                        ),
                        4,
                    )
                    for v in ("a", "b", "c", "d")
                }
            result["runs"][f"memn2n/{seed}"] = run
            save(result)
        result["wall_time_s"] = round(time.perf_counter() - t0, 1)
        return result

    command = command_line(PROG, argv)
    return run_sweep_cli(p, args.out, command, sweep, overwrite=args.overwrite)


if __name__ == "__main__":
    main()
