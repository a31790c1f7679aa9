"""The repository tools behind the committed results (tools/): every command stored in a
result file still runs with its tool's own argument parser and asks for the configuration
the file holds; the stability sweep's summary over seeds; the 'where it ran' record."""

from __future__ import annotations

import itertools
import json
import shlex
from pathlib import Path

import extrapolation_lab
import pytest
import score_functions
import stability_sweep

from mini_transformer import hardware, lab, scoring

DATA = Path(__file__).resolve().parents[1] / "mini_transformer" / "results"
TOOL_OF = {  # committed result file -> the tool that wrote it
    "extrapolation.json": extrapolation_lab,
    "05_stability.json": stability_sweep,
    "05_seeds_5_9.json": stability_sweep,
    "04_score_functions.json": score_functions,
}
OLD_COMMAND = {  # the tool -> the package command line it replaced on 2026-11-23
    extrapolation_lab: "python -m mini_transformer.lab",
    stability_sweep: "python -m mini_transformer.stability",
    score_functions: "python -m mini_transformer.scoring",
}


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def stored_commands(result: dict) -> list[str]:
    """Every command a result stores: ``command`` (split at ``&&``), ``commands``,
    ``merge_command``, and the same keys of a nested result (``lr_check``), in that order."""
    out: list[str] = []
    for key in ("command", "commands", "merge_command"):
        value = result.get(key)
        out += value.split(" && ") if isinstance(value, str) else (value or [])
    for key, value in result.items():
        if isinstance(value, dict) and "command" in value and key != "recorded_as":
            out += stored_commands(value)
    return out


def parse(command: str, tool):
    """``command`` parsed by ``tool``'s own parser; fails the test if the tool refuses it."""
    argv = shlex.split(command)
    assert argv[:2] == ["python", tool.PROG.split()[1]], command
    try:
        return tool.parser().parse_args(argv[2:])
    except SystemExit:  # argparse refused it (exit status 2)
        pytest.fail(f"{tool.PROG} no longer accepts the stored command {command!r}")


CASES = [(name, cmd) for name in TOOL_OF for cmd in stored_commands(load(name))]


@pytest.mark.parametrize("name,command", CASES, ids=[f"{n}:{i}" for i, (n, _) in enumerate(CASES)])
def test_every_stored_command_parses_with_its_tool(name, command):
    parse(command, TOOL_OF[name])


def test_the_stored_commands_include_every_part_and_merge():
    lab_result = load("extrapolation.json")
    assert lab_result["command"].split(" && ") == lab_result["commands"]
    assert len(stored_commands(lab_result)) == 10  # (2 parts, twice) + merge, and in lr_check
    assert all(len(stored_commands(load(n))) == 1 for n in TOOL_OF if n != "extrapolation.json")


@pytest.mark.parametrize("name", [n for n in TOOL_OF if "recorded_as" in load(n)])
def test_stored_commands_are_the_recorded_ones_with_the_flags_unchanged(name):
    result, tool = load(name), TOOL_OF[name]
    now, then = stored_commands(result), stored_commands(result["recorded_as"])
    assert len(now) == len(then) > 0
    for new, old in zip(now, then, strict=True):
        assert old.startswith(OLD_COMMAND[tool] + " ") and new.startswith(tool.PROG + " ")
        # The results moved from book/data/ into the package (mini_transformer/results/).
        old = old.replace("book/data/", "mini_transformer/results/")
        assert shlex.split(new)[2:] == shlex.split(old)[3:]
    assert "2026-11-23" in result["recorded_as"]["note"]


def test_the_stability_command_asks_for_the_stored_sweep():
    name = "05_stability.json"
    result = load(name)
    args, tr = parse(result["command"], stability_sweep), result["training"]
    assert args.out == f"mini_transformer/results/{name}" and result["complete"]
    assert (args.steps, args.lrs, args.warmups, args.seeds, args.pre_warmups) == (
        tr["steps"],
        tr["lrs"],
        tr["warmups"],
        tr["seeds"],
        tr["pre_warmups"],
    )


def test_the_scoring_command_asks_for_the_stored_runs():
    result = load("04_score_functions.json")
    args = parse(result["command"], score_functions)
    assert args.out == "mini_transformer/results/04_score_functions.json"
    stored = [(r["lr"], r["d_k"], r["kind"], r["seed"]) for r in result["runs"]]
    grid = itertools.product(args.lrs, args.d_ks, scoring.SCORE_KINDS, args.seeds)
    assert stored == list(grid)  # the tool's order: lr, d_k, kind, seed
    assert {r["steps"] for r in result["runs"]} == {args.steps}


def check_lab_parts(result: dict) -> list[str]:
    """The parts' commands ask for the stored budget and schemes; returns their ``--out``."""
    parts = [parse(c, extrapolation_lab) for c in result["commands"]]
    for args in parts:
        assert args.steps == result["steps"] and args.seeds == result["seeds"]
        cfg = lab.LabConfig(train_length=args.train_length, eval_lengths=args.eval_lengths)
        assert cfg.eval_lengths == result["eval_lengths"]
        for scheme in args.schemes:
            assert result["results"][scheme]["lr"] == dict(args.scheme_lr).get(scheme, args.lr)
    assert sorted(s for a in parts for s in a.schemes) == sorted(result["schemes"])
    return [a.out for a in parts]


def test_the_lab_commands_ask_for_the_stored_sweep_and_merge_its_parts():
    result = load("extrapolation.json")
    merge = parse(result["merge_command"], extrapolation_lab)
    assert merge.out == "mini_transformer/results/extrapolation.json"
    assert merge.merge == check_lab_parts(result)
    assert [a.split("=")[0] for a in merge.attach] == ["lr_check"]
    check = result["lr_check"]
    assert parse(check["merge_command"], extrapolation_lab).merge == check_lab_parts(check)


# ------------------------------------------------------------------ the stability summary


def run(pos, lr, w, seed, final, losses, diverged=False) -> dict:
    return dict(
        norm_position=pos,
        lr=lr,
        warmup_steps=w,
        seed=seed,
        final_loss=final,
        losses=losses,
        diverged=diverged,
    )


def test_summarize_runs_groups_seeds_and_leaves_diverged_runs_out_of_the_statistics():
    runs = [
        run("post", 1e-3, 0, 0, 0.2, [3.0, 1.0]),
        run("pre", 1e-2, 100, 0, None, [3.0], diverged=True),
        run("post", 1e-3, 0, 1, 0.7, [2.0, 0.5]),
        run("pre", 1e-2, 100, 1, 0.1, [2.5, 0.3]),
    ]
    post, pre = stability_sweep.summarize_runs(runs)  # in the order first seen
    assert (post["norm_position"], post["lr"], post["warmup_steps"]) == ("post", 1e-3, 0)
    assert post["seeds"] == [0, 1] and post["final_losses"] == [0.2, 0.7]
    assert post["mean_final_loss"] == pytest.approx(0.45)
    assert (post["min_final_loss"], post["max_final_loss"]) == (0.2, 0.7)
    assert (post["n_learned"], post["n_diverged"], post["n_seeds"]) == (1, 0, 2)  # 0.2 < 0.5
    assert post["mean_losses"] == pytest.approx([2.5, 0.75])
    assert pre["final_losses"] == [None, 0.1] and pre["mean_final_loss"] == 0.1
    assert (pre["n_learned"], pre["n_diverged"]) == (1, 1)
    assert pre["mean_losses"] is None  # a run stopped early: no mean curve
    assert stability_sweep.summarize_runs(runs, learned_below=0.05)[1]["n_learned"] == 0


def test_the_committed_summaries_are_the_summaries_of_the_committed_runs():
    training = load("05_stability.json")["training"]
    summary = stability_sweep.summarize_runs(training["runs"], training["learned_below"])
    assert summary == training["summary"]


# ------------------------------------------------------------------ where it ran


def test_the_score_tool_writes_its_runs_and_where_it_ran(tmp_path, capsys):
    out = tmp_path / "s.json"
    argv = ["--out", str(out), "--d-ks", "2", "--lrs", "0.1", "--seeds", "0", "--steps", "1"]
    result = score_functions.main(argv)
    capsys.readouterr()
    assert json.loads(out.read_text()) == result and result["complete"] is True
    assert [r["kind"] for r in result["runs"]] == list(scoring.SCORE_KINDS)
    assert result["runs"][0] == scoring.train_scores("additive", 2, 0.1, seed=0, steps=1)
    assert result["command"] == f"{score_functions.PROG} {shlex.join(argv)}"
    assert result["where_it_ran"] == json.loads(json.dumps(hardware.where_it_ran("cpu")))


# ------------------------------------------------------------------ issue 35's measure


def test_one_cli_training_step_stays_within_its_reading_path():
    """tools/step_lines.py, in a fresh process: the package lines one `--preset tiny --steps 1`
    run goes through (1,477 at the 2026-11-28 review, 1,340 after issue 35); a new check inside
    the loop, or a helper on the step path, shows here."""
    import subprocess
    import sys

    tool = Path(__file__).resolve().parent.parent / "tools" / "step_lines.py"
    out = subprocess.run(
        [sys.executable, str(tool), "--verbose"], capture_output=True, text=True, check=True
    ).stdout
    total = int(out.split(": ")[1].split(" lines")[0])
    names = {line.split()[-1] for line in out.splitlines()[1:]}
    assert total <= 1350, out.splitlines()[0]
    assert {"train", "train_step", "get_batch", "estimate_loss", "forward"} <= names
    assert "check_tensor" not in names  # nothing in the loop re-checks the ids it made
