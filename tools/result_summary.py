"""The small summaries the package ships of two large results in ``benchmarks/results/``
(chapter 6), so that the chapter's cells print the numbers its prose quotes, on Colab too.

- ``gap-split``: appendix A.3's split of the cpu model's held-out gap
  (``tools/gap_split.py``'s full result, about 470 KB, every window's start and loss), summarised
  by :func:`gap_split.summarise`;
- ``recipe-sweep``: the sweep that chose the ``cpu`` preset's recipe
  (``benchmarks/cpu_recipe_sweep.py``), summarised by :func:`recipe_summary`: the scored runs, the
  chosen one and the equal-budget runs it beat.

Each summary names its full result, that result's command(s), date and device, and the command
that wrote the summary. ``tests/test_book_ch6.py`` recomputes every summarised number from the
full result. Run::

    python tools/result_summary.py gap-split benchmarks/results/06_gap_split.json \\
        --out mini_transformer/results/06_gap_split.json
    python tools/result_summary.py recipe-sweep benchmarks/results/cpu_recipe_sweep.json \\
        --out mini_transformer/results/06_cpu_recipe_sweep.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
from pathlib import Path

import gap_split
from sweep_cli import command_line, write_json

from mini_transformer.checkpoints import check_output_file
from mini_transformer.cli import run_cli

PROG = "python tools/result_summary.py"
ROOT = Path(__file__).resolve().parents[1]


def committed(path: str | Path) -> dict:
    """The last commit that changed ``path`` and its date (UTC): when a result that stores no
    date of its own was committed."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%H %ct", "--",
         str(Path(path).resolve().relative_to(ROOT))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    commit, _, seconds = out.stdout.strip().partition(" ")
    if not commit:
        raise ValueError(f"{path} is not committed: its summary could not name its date")
    when = datetime.datetime.fromtimestamp(int(seconds), datetime.timezone.utc)
    return {"commit": commit, "date": when.strftime("%Y-%m-%d %H:%M UTC")}


def recipe_summary(full: dict, full_path: str, command: str) -> dict:
    """The recipe sweep's summary: every run scored on the whole held-out text (name, shape,
    schedule, precision, training FLOPs, loss), the lowest (the chosen recipe) and the other
    runs of its context ``T``, which it is compared with."""
    scored = [r for r in full["runs"] if r["held_out_loss"] is not None]
    chosen = min(scored, key=lambda r: r["held_out_loss"])
    T = chosen["model_config"]["block_size"]
    others = [r for r in scored if r["model_config"]["block_size"] == T and r is not chosen]
    runner_up = min(others, key=lambda r: r["held_out_loss"])
    ran_it = [c for c in full["commands"] if f'"{chosen["name"]}"' in c]
    keys = ("n_layers", "d_model", "block_size")
    return {
        "command": command,
        "what": "summary of the recipe sweep in full_result: its runs scored on the whole "
        "held-out text, the chosen (lowest) run, and the other runs of its context T",
        "full_result": str(full_path),
        "full": {
            "committed": committed(full_path),
            "held_out_loss": full["held_out_loss"],
            "device": full["device"],
            "cpu_count": full["cpu_count"],
            "torch": full["torch"],
            "note": full["note"],
            "n_commands": len(full["commands"]),
        },  # fmt: skip
        "n_runs": len(full["runs"]),
        "runs": [
            {"name": r["name"]}
            | {k: r["model_config"][k] for k in keys}
            | {k: r["train_config"][k] for k in ("batch_size", "steps", "lr", "min_lr")}
            | {k: r[k] for k in ("precision", "train_flops", "held_out_loss")}
            for r in scored
        ],  # fmt: skip
        "chosen": {
            "name": chosen["name"],
            "steps": chosen["train_config"]["steps"],
            "held_out_loss": chosen["held_out_loss"],
            "train_flops": chosen["train_flops"],
            "where_it_ran": chosen.get("where_it_ran"),
            "command": ran_it[0] if len(ran_it) == 1 else None,
        },
        "other_runs_same_T": {
            "block_size": T,
            "n": len(others),
            "train_flops_min": min(r["train_flops"] for r in others),
            "train_flops_max": max(r["train_flops"] for r in others),
            "lowest": {"name": runner_up["name"], "held_out_loss": runner_up["held_out_loss"]},
        },
    }


SUMMARISE = {"gap-split": gap_split.summarise, "recipe-sweep": recipe_summary}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("kind", choices=sorted(SUMMARISE))
    p.add_argument("full", help="the full result (benchmarks/results/...json)")
    p.add_argument("--out", required=True, help="the summary (mini_transformer/results/...)")
    p.add_argument("--overwrite", action="store_true")
    return p


def main(argv: list[str] | None = None) -> dict:
    p = parser()
    args = p.parse_args(argv)

    def check():
        if not Path(args.full).is_file():
            raise FileNotFoundError(f"no full result at {args.full}")
        return check_output_file(args.out, overwrite=args.overwrite, inputs=[args.full])

    def work(out: Path) -> dict:
        full = json.loads(Path(args.full).read_text())
        summary = SUMMARISE[args.kind](full, args.full, command_line(PROG.split()[1], argv))
        write_json(summary, out)
        print(f"wrote {out}")
        return summary

    return run_cli(p, check, work)


if __name__ == "__main__":
    main()
