"""Issue 26, command lines and files: the last ways a run or a tool lost work, overwrote a
committed result or broke the exit-code contract (2: bad input, before any work; 1: a
failure while running, one line; 130: Ctrl-C). Each test failed before its fix."""

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import extrapolation_lab
import pytest
import score_functions
import stability_sweep
import sweep_cli
import torch
from test_cli import exit_code  # the same exit-status helper as the CLI tests

from mini_transformer import checkpoints, cli
from mini_transformer import train as T
from mini_transformer.model import TransformerConfig, TransformerLM

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "mini_transformer" / "results"


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def no_work(*args, **kwargs):
    raise AssertionError("the tool started working")


# ------------------------------------------------------------------ 4: committed results


@pytest.mark.parametrize("tool", [stability_sweep, score_functions])
def test_a_sweep_without_out_exits_2_with_usage(tool, capsys, monkeypatch):
    monkeypatch.setattr(tool, "run_sweep", no_work)
    code, err = exit_code(tool.main, ["--steps", "1"], capsys)
    assert code == 2 and "usage:" in err and "--out" in err


@pytest.mark.parametrize(
    "tool,name",
    [
        (stability_sweep, "05_stability.json"),
        (score_functions, "04_score_functions.json"),
        (extrapolation_lab, "extrapolation.json"),
    ],
)
def test_a_tool_refuses_to_overwrite_a_committed_result(tool, name, capsys, monkeypatch):
    committed = RESULTS / name
    before = committed.read_bytes()
    monkeypatch.setattr(tool, "run_lab" if tool is extrapolation_lab else "run_sweep", no_work)
    code, err = exit_code(tool.main, ["--steps", "1", "--out", str(committed)], capsys)
    assert code == 2 and "usage:" in err and "committed result" in err and "--overwrite" in err
    assert committed.read_bytes() == before


def test_overwrite_lets_a_sweep_replace_a_committed_result(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(checkpoints, "COMMITTED_DIRS", (tmp_path,))
    out = tmp_path / "05_stability.json"
    out.write_text("{}")
    monkeypatch.setattr(stability_sweep, "run_sweep", lambda **kw: {"wall_time_s": 0})
    code, _ = exit_code(stability_sweep.main, ["--out", str(out)], capsys)
    assert code == 2  # refused without --overwrite
    stability_sweep.main(["--out", str(out), "--overwrite"])
    assert json.loads(out.read_text())["wall_time_s"] == 0


def test_export_refuses_to_replace_the_committed_model_by_default(tmp_path, capsys):
    committed = checkpoints.PRETRAINED["cpu"]
    before = committed.stat().st_mtime_ns
    ckpt = T.save_checkpoint(tmp_path / "c.pt", _small_model())
    code, err = exit_code(cli.main, ["export", "--ckpt", str(ckpt)], capsys)
    assert code == 2 and "committed" in err and "--overwrite" in err
    assert committed.stat().st_mtime_ns == before


# ------------------------------------------------------------------ 5: exit codes


def test_a_failure_once_the_lab_is_running_exits_1_with_one_line(tmp_path, capsys, monkeypatch):
    def fails_while_running(*args, **kwargs):
        raise ValueError("a length the task cannot build, found while evaluating")

    monkeypatch.setattr(extrapolation_lab, "run_lab", fails_while_running)
    argv = ["--steps", "1", "--out", str(tmp_path / "lab.json")]
    code, err = exit_code(extrapolation_lab.main, argv, capsys)
    assert code == 1 and "usage:" not in err
    assert err.strip().splitlines() == [
        f"{extrapolation_lab.PROG}: error: a length the task cannot build, found while evaluating"
    ]


def test_a_run_into_a_folder_with_a_non_utf8_name_completes(tmp_path):
    out = os.fsencode(tmp_path) + b"/caf\xe9/run"  # a Latin-1 name
    argv = ["--preset", "tiny", "--steps", "1", "--eval-interval", "1", "--no-progress"]
    argv += ["--device", "cpu", "--peak-tflops", "0.1", "--threads", "1"]
    env = os.environ | {"PYTHONIOENCODING": "utf-8:strict", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "mini_transformer.train", *argv, "--out", out],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-500:]
    assert b"checkpoints in" in proc.stdout and os.path.isfile(out + b"/last.pt")


def test_merging_a_json_that_is_no_lab_result_exits_2(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    code, err = exit_code(extrapolation_lab.main, ["--merge", str(other)], capsys)
    assert code == 2 and "parts[0] is not a lab result" in err and "config" in err


@pytest.mark.parametrize(
    "bench,argv,message",
    [
        ("cpu_preset", ["--runs", "0"], "expected a positive integer, got '0'"),
        ("train_step", ["--dropout", "2"], "expected a probability in [0, 1), got '2'"),
        ("attention", ["--device", "tpu"], "--device"),
    ],
)
def test_benchmarks_refuse_bad_arguments_with_exit_2(bench, argv, message, capsys):
    code, err = exit_code(load_benchmark(bench).main, argv, capsys)
    assert code == 2 and "usage:" in err and message in err


# ------------------------------------------------------------------ 6: files


def _small_model():
    torch.manual_seed(0)
    return TransformerLM(
        TransformerConfig(vocab_size=84, block_size=8, d_model=16, n_heads=2, n_layers=1)
    )


def test_a_failed_export_leaves_no_file_behind(tmp_path, monkeypatch):
    ckpt = T.save_checkpoint(tmp_path / "c.pt", _small_model(), train_config={})
    (tmp_path / "log.jsonl").write_text('{"event": "start"}\n')

    def full_disk(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full_disk)
    out = tmp_path / "w" / "weights.pt"
    out.parent.mkdir()
    with pytest.raises(OSError, match="could not write"):
        checkpoints.prepare_export(ckpt, out, tmp_path / "log.jsonl")()
    assert list(out.parent.iterdir()) == []


def test_export_with_a_log_that_does_not_exist_exits_2(tmp_path, capsys):
    ckpt = T.save_checkpoint(tmp_path / "c.pt", _small_model(), train_config={})
    argv = ["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "w.pt")]
    code, err = exit_code(cli.main, [*argv, "--log", str(tmp_path / "missing.jsonl")], capsys)
    assert code == 2 and "missing.jsonl" in err and not (tmp_path / "w.pt").exists()


def test_out_given_a_fifo_is_refused_and_left_alone(tmp_path, capsys, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(score_functions, "run_sweep", no_work)
    code, err = exit_code(score_functions.main, ["--out", str(fifo)], capsys)
    assert code == 2 and "not a regular file" in err
    assert fifo.is_fifo()


def test_a_symlinked_temporary_is_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "c.pt.tmp").symlink_to(victim)
    (tmp_path / "r.json.tmp").symlink_to(victim)
    T.save_checkpoint(tmp_path / "c.pt", _small_model())
    sweep_cli.write_json({"a": 1}, tmp_path / "r.json")
    assert victim.read_text() == "precious"
    assert T.load_checkpoint(tmp_path / "c.pt")["step"] == 0
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": 1}


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON token {name}")

    return json.loads(text, parse_constant=refuse)


def test_nan_is_written_as_null_never_a_bare_token(tmp_path):
    checkpoints.write_record(
        tmp_path / "m.jsonl", {"val_loss": math.nan, "mfu": math.inf, "step": 1}
    )
    assert _strict((tmp_path / "m.jsonl").read_text()) == {
        "val_loss": None,
        "mfu": None,
        "step": 1,
    }
    sweep_cli.write_json({"losses": [1.0, math.nan]}, tmp_path / "r.json")
    assert _strict((tmp_path / "r.json").read_text()) == {"losses": [1.0, None]}


def test_a_copied_pre_checksum_file_with_a_flipped_bit_is_refused(tmp_path):
    data = bytearray(checkpoints.PRETRAINED["gpu"].read_bytes())
    intact = tmp_path / "gpu_copy.pt"
    intact.write_bytes(data)
    T.load_model(intact)  # a committed model, known by its digest wherever it lies
    data[len(data) // 2] ^= 0x10
    flipped = tmp_path / "flipped.pt"
    flipped.write_bytes(data)
    with pytest.raises(ValueError, match="before checkpoints carried a checksum"):
        T.load_model(flipped)


def test_a_lab_length_its_task_cannot_build_is_refused_before_training(capsys, monkeypatch):
    """``--train-length 3 --offset 2``: the shortest training length (1) holds no target to
    copy; the run is refused as a bad argument (exit 2) instead of failing mid-sweep."""
    monkeypatch.setattr(extrapolation_lab, "run_lab", no_work)
    argv = ["--train-length", "3", "--offset", "2", "--steps", "1"]
    code, err = exit_code(extrapolation_lab.main, argv, capsys)
    assert code == 2 and "min_train_length must be an integer in [3, 3]" in err
    assert "longer than offset=2" in err


# ------------------------------------------ issue 36: a run never touches what it did not write

TINY = ["--preset", "tiny", "--steps", "2", "--eval-interval", "1", "--device", "cpu"]
TINY += ["--no-progress", "--peak-tflops", "0.1", "--threads", "1"]


def _files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_run_refuses_a_folder_of_the_users_files_and_changes_none(tmp_path, capsys, overwrite):
    """The red-team repro: the run replaced the user's config.json and deleted metrics.jsonl."""
    (tmp_path / "config.json").write_text('{"my": 1}')
    (tmp_path / "metrics.jsonl").write_text("my notes\n")
    before = _files(tmp_path)
    code, err = exit_code(cli.main, [*TINY, "--out", str(tmp_path), *overwrite], capsys)
    assert code == 2 and "holds files of no run" in err and "config.json, metrics.jsonl" in err
    assert _files(tmp_path) == before


def test_a_folder_holding_only_an_earlier_best_pt_is_left_alone(tmp_path, capsys):
    T.save_checkpoint(tmp_path / "best.pt", _small_model())
    before = _files(tmp_path)
    code, err = exit_code(cli.main, [*TINY, "--out", str(tmp_path)], capsys)
    assert code == 2 and "best.pt" in err and _files(tmp_path) == before


def test_a_run_that_fails_before_its_first_checkpoint_deletes_nothing(tmp_path):
    """No clean-up: with ``--out .`` the clean-up of a fresh run deleted the folder's files."""
    (tmp_path / "notes.txt").write_text("mine")
    T.train(T.get_preset("tiny", steps=1, progress=False, device="cpu", threads=1), tmp_path / "r")
    (tmp_path / "r" / "notes.txt").write_text("mine too")  # beside a run of ours: never touched

    def fail(model):
        raise RuntimeError("setup failed")

    cfg = T.get_preset("tiny", steps=1, progress=False, device="cpu", threads=1)
    with pytest.raises(RuntimeError, match="setup failed"):
        T.train(cfg, tmp_path / "r", overwrite=True, setup_hook=fail)
    assert (tmp_path / "r" / "notes.txt").read_text() == "mine too"
    assert (tmp_path / "r" / "config.json").exists() and (tmp_path / "r" / "last.pt").exists()
    with pytest.raises(ValueError, match="holds files of no run"):
        T.train(cfg, tmp_path, overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def _logged_events(path):
    """The ``event`` of every complete line of a run's metrics log (a line being written is
    skipped)."""
    events = set()
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            events.add(json.loads(line).get("event"))
        except json.JSONDecodeError:
            continue
    return events


def test_a_second_run_into_a_folder_in_use_exits_2_and_the_lock_is_cleared(tmp_path, capsys):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    argv = [*TINY, "--steps", "100000", "--eval-interval", "100000", "--out", str(run)]
    first = subprocess.Popen(
        [sys.executable, "-m", "mini_transformer.train", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(3000):  # the first run is training once its log has an eval record
            if _logged_events(run / "metrics.jsonl") & {"eval"}:  # not the start record's
                break  # "eval_interval": Ctrl-C before the loop's handler would save nothing
            assert first.poll() is None, first.stderr.read()
            time.sleep(0.1)
        lock = (run / "run.lock").read_text().split()
        assert lock == [str(first.pid)]
        code, err = exit_code(cli.main, [*TINY, "--out", str(run), "--overwrite"], capsys)
        assert code == 2 and f"in use by another run (PID {first.pid})" in err
        first.send_signal(signal.SIGINT)  # Ctrl-C: saves last.pt, exits 130
        assert first.wait(timeout=300) == 130, first.stderr.read()
    finally:
        first.kill()
    assert not (run / "run.lock").exists()  # cleared on exit
    assert T.load_checkpoint(run / "last.pt")["step"] >= 0  # step 0 if Ctrl-C came that early


def test_a_lock_left_by_a_killed_run_is_stale_and_taken_over(tmp_path):
    cfg = T.get_preset("tiny", steps=1, progress=False, device="cpu", threads=1)
    T.train(cfg, tmp_path)
    (tmp_path / "run.lock").write_text("999999999\n")  # a SIGKILLed run's: no process holds it
    T.train(
        T.get_preset("tiny", steps=2, progress=False, device="cpu", threads=1),
        tmp_path,
        resume=True,
    )
    assert T.load_checkpoint(tmp_path / "last.pt")["step"] == 2
    assert not (tmp_path / "run.lock").exists()


def test_export_never_writes_over_its_input_or_an_existing_file(tmp_path, capsys):
    run = tmp_path / "run"
    T.train(T.get_preset("tiny", steps=1, progress=False, device="cpu", threads=1), run)
    before = _files(run)
    for out, extra, message in [
        ("last.pt", ["--overwrite"], "is also an input of this command"),
        ("config.pt", [], "config.json already exists; choose another path, or pass --overwrite"),
        ("metrics.pt", ["--overwrite"], "metrics.jsonl is also an input"),  # the log beside it
    ]:
        argv = ["export", "--ckpt", str(run / "last.pt"), "--out", str(run / out), *extra]
        code, err = exit_code(cli.main, argv, capsys)
        assert code == 2 and message in err, err
    assert _files(run) == before
    cli.main(["export", "--ckpt", str(run / "last.pt"), "--out", str(tmp_path / "w.pt")])
    code, err = exit_code(
        cli.main,
        ["export", "--ckpt", str(run / "last.pt"), "--out", str(tmp_path / "w.pt")],
        capsys,
    )
    assert code == 2 and "w.pt already exists" in err


def test_a_tool_refuses_an_existing_out_and_its_own_inputs(tmp_path, capsys, monkeypatch):
    mine = tmp_path / "mine.json"
    mine.write_text('{"my": 1}')
    monkeypatch.setattr(score_functions, "run_sweep", no_work)
    code, err = exit_code(score_functions.main, ["--out", str(mine)], capsys)
    assert code == 2 and "mine.json already exists" in err
    argv = ["--merge", str(mine), "--out", str(mine), "--overwrite"]
    code, err = exit_code(extrapolation_lab.main, argv, capsys)
    assert code == 2 and "is also an input of this command" in err
    assert mine.read_text() == '{"my": 1}'


# --------------------------------------- issue 36: crafted checkpoints, torchrun, messages


def _crafted(path: Path, **changes) -> None:
    """``path`` rewritten with ``changes`` and a valid checksum (the checksum is not keyed)."""
    ckpt = torch.load(path, weights_only=True)
    ckpt = {k: v for k, v in ckpt.items() if k != "checksum"} | changes
    torch.save(ckpt | {"checksum": checkpoints.checksum(ckpt)}, path)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"best_val_loss": math.nan}, "best_val_loss=nan, not a loss (>= 0, inf)"),
        ({"best_val_loss": -math.inf}, "best_val_loss=-inf"),
        ({"step": 200.0}, "step=200.0, not an integer >= 0"),
    ],
)
def test_a_crafted_last_pt_is_refused_on_resume(tmp_path, capsys, changes, message):
    T.train(T.get_preset("tiny", steps=1, progress=False, device="cpu", threads=1), tmp_path)
    _crafted(tmp_path / "last.pt", **changes)
    code, err = exit_code(cli.main, [*TINY, "--out", str(tmp_path), "--resume"], capsys)
    assert code == 2 and "cannot resume" in err and message in err


@pytest.mark.parametrize("key", ["format", "model_config", "rng", "checksum"])
def test_save_checkpoint_refuses_extra_keys_that_replace_its_own(tmp_path, key):
    with pytest.raises(ValueError, match=f"extra keys \\['{key}'\\] would replace its own"):
        T.save_checkpoint(tmp_path / "c.pt", _small_model(), **{key: 1})
    assert not (tmp_path / "c.pt").exists()


@pytest.mark.parametrize(
    "env,name", [({"WORLD_SIZE": "abc"}, "WORLD_SIZE"), ({"WORLD_SIZE": "2", "RANK": "x"}, "RANK")]
)
def test_a_malformed_torchrun_environment_exits_2_naming_the_variable(
    tmp_path, capsys, monkeypatch, env, name
):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code, err = exit_code(cli.main, [*TINY, "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and f"environment variable {name} must be an integer >= 0" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--prompt", ""], "--prompt must hold at least one character"),
        (["--top-k", "85"], "--top-k must be at most the model's vocab_size 84"),
        (["--tokens", "100000000"], "--tokens must be at most 100000, got 100000000"),
        (["--prompt", "a\udc80"], "U+DC80) at position 1 is not in the tokenizer's vocabulary"),
    ],
)
def test_sample_refuses_bad_arguments_before_sampling(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(TransformerLM, "generate", no_work)
    code, err = exit_code(cli.main, ["sample", *argv], capsys)
    assert code == 2 and message in err and "usage:" in err


def test_a_binary_log_or_merge_file_is_named_in_the_refusal(tmp_path, capsys, monkeypatch):
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"\x80\xff\x00PK")
    ckpt = T.save_checkpoint(tmp_path / "c.pt", _small_model(), train_config={})
    argv = ["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "w.pt"), "--log", str(binary)]
    code, err = exit_code(cli.main, argv, capsys)
    assert code == 2 and f"log_path {binary} is not a metrics log" in err
    argv = ["--merge", str(binary), "--out", str(tmp_path / "m.json")]
    code, err = exit_code(extrapolation_lab.main, argv, capsys)
    assert code == 2 and f"{binary} is not a JSON file" in err


def test_a_last_pt_without_a_best_loss_resumes_and_keeps_saving_its_best(tmp_path):
    cfg = T.get_preset("tiny", steps=1, progress=False, device="cpu", threads=1)
    T.train(cfg, tmp_path)
    _crafted(tmp_path / "last.pt", best_val_loss=None)
    (tmp_path / "best.pt").unlink()
    T.train(
        T.get_preset("tiny", steps=2, eval_interval=1, progress=False, device="cpu", threads=1),
        tmp_path,
        resume=True,
    )
    assert T.load_checkpoint(tmp_path / "best.pt")["step"] == 2


def test_a_folders_lock_is_exclusive_and_gone_after_the_run(tmp_path):
    with checkpoints.output_lock(tmp_path):
        assert (tmp_path / "run.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(checkpoints.RunFolderInUse, match=f"PID {os.getpid()}"):
            with checkpoints.output_lock(tmp_path):  # a second open file: flock refuses it
                pass
        assert (tmp_path / "run.lock").exists()  # the refused one left the holder's lock alone
    assert not (tmp_path / "run.lock").exists()
    with checkpoints.output_lock(tmp_path):  # free again
        pass
