"""Command lines (train; the tools of the lab, the stability sweep and the score functions):
bad input exits 2 before any work, runtime failures exit 1 with one line and no temporary
files, sweeps save as they go."""

import json

import extrapolation_lab
import pytest
import score_functions
import stability_sweep
import torch
from tiny_runs import TINY_LAB

from mini_transformer import cli, scoring
from mini_transformer import stability as S
from mini_transformer import train as T

torch.set_num_threads(1)


def exit_code(main, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return exc.value.code, err


# ------------------------------------------------------------------ train


def test_train_refuses_an_out_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    code, err = exit_code(cli.main, ["--preset", "tiny", "--out", str(f)], capsys)
    assert code == 2 and "is a file, not a folder" in err and "usage:" in err


@pytest.mark.parametrize("device", ["tpu", "cuda:x"])
def test_train_refuses_an_unknown_device(tmp_path, capsys, device):
    code, err = exit_code(
        cli.main, ["--preset", "tiny", "--out", str(tmp_path / "r"), "--device", device], capsys
    )
    assert code == 2 and "device must be 'auto', 'cpu', 'cuda' or 'cuda:N'" in err
    assert not (tmp_path / "r").exists()  # refused before any work


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_the_gpu_preset_on_a_cpu_is_refused_with_an_estimate_and_an_alternative(tmp_path, capsys):
    code, err = exit_code(cli.main, ["--preset", "gpu", "--out", str(tmp_path / "r")], capsys)
    assert code == 2
    assert "needs a CUDA GPU" in err and "hours" in err and "--preset cpu" in err
    assert "sample --ckpt gpu" in err and "--allow-cpu" in err
    assert not (tmp_path / "r").exists()


def test_allow_cpu_lifts_the_gpu_refusal():
    assert cli.gpu_preset_refusal(T.get_preset("tiny")) is None
    if not torch.cuda.is_available():
        assert cli.gpu_preset_refusal(T.get_preset("gpu")) is not None
        assert cli.gpu_preset_refusal(T.get_preset("gpu", device="cuda")) is None  # asked for


def test_a_full_disk_exits_1_with_one_line_and_no_temporary_file(tmp_path, capsys, monkeypatch):
    def full_disk(obj, f, *args, **kwargs):
        f.write(b"partial")  # what torch reports when the disk fills up:
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full_disk)
    argv = [
        "--preset",
        "tiny",
        "--out",
        str(tmp_path),
        "--steps",
        "2",
        "--eval-interval",
        "1",
        "--device",
        "cpu",
        "--no-progress",
        "--peak-tflops",
        "0.1",
        "--overwrite",
    ]
    code, err = exit_code(cli.main, argv, capsys)
    assert code == 1
    err = err.strip().splitlines()
    assert len(err) == 1 and "could not write" in err[0] and "file write failed" in err[0]
    assert not list(tmp_path.glob("*.tmp"))
    # its own files stay and say why it ended (issue 36: no clean-up that could delete a user's
    # file); the folder's lock is gone
    assert T.read_log(tmp_path / "metrics.jsonl")[-1]["reason"] == "error"
    assert not (tmp_path / "run.lock").exists()


def test_export_refuses_an_out_that_would_be_overwritten_by_its_json(tmp_path, capsys):
    T.train(
        T.get_preset(
            "tiny", steps=1, eval_interval=1, progress=False, device="cpu", peak_flops=1e11
        ),
        tmp_path,
    )
    code, err = exit_code(
        cli.main,
        ["export", "--ckpt", str(tmp_path / "last.pt"), "--out", str(tmp_path / "weights.json")],
        capsys,
    )
    assert code == 2 and "must end in '.pt'" in err


# ------------------------------------------------------------------ lab and stability


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--steps", "0"], "expected a positive integer, got '0'"),
        (["--lr", "nan"], "expected a positive number, got 'nan'"),
        (["--scheme-lr", "alibi=-1"], "positive number LR"),
        (["--seeds", "-1"], "expected an integer >= 0"),
        (["--out", "/nonexistent/folder/x.json"], "the folder /nonexistent/folder does not exist"),
        (["--offset", "40"], "offset"),
    ],
)
def test_lab_refuses_bad_input_before_training(argv, message, capsys):
    code, err = exit_code(extrapolation_lab.main, argv, capsys)
    assert code == 2 and message in err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--steps", "0"], "expected a positive integer, got '0'"),
        (["--lrs", "1e-3", "inf"], "expected a positive number, got 'inf'"),
        (["--warmups", "-5"], "expected an integer >= 0"),
        (["--out", "/nonexistent/folder/x.json"], "the folder /nonexistent/folder does not exist"),
    ],
)
def test_stability_refuses_bad_input_before_training(argv, message, capsys, tmp_path):
    code, err = exit_code(stability_sweep.main, argv, capsys)
    assert code == 2 and message in err


def test_an_interrupted_lab_sweep_keeps_the_runs_it_finished(tmp_path, capsys, monkeypatch):
    out = tmp_path / "lab.json"
    real = extrapolation_lab._train_and_evaluate
    calls = {"n": 0}

    def interrupt_third(*args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(extrapolation_lab, "_train_and_evaluate", interrupt_third)
    argv = [
        "--out",
        str(out),
        *TINY_LAB,
        "--seeds",
        "0",
        "1",
        "--schemes",
        "none",
        "rope",
    ]
    code, _ = exit_code(extrapolation_lab.main, argv, capsys)
    saved = json.loads(out.read_text())
    assert code == 130 and saved["complete"] is False
    assert saved["schemes"] == ["none"] and len(saved["results"]["none"]["final_loss"]) == 2
    assert not (tmp_path / "lab.json.tmp").exists()


def test_an_interrupted_stability_sweep_keeps_the_runs_it_finished(tmp_path, capsys, monkeypatch):
    out = tmp_path / "s.json"
    real = S.train_run
    calls = {"n": 0}

    def interrupt_second(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(S, "train_run", interrupt_second)
    monkeypatch.setattr(S, "grad_norms_at_init", lambda *a, **k: [0.0])
    code, _ = exit_code(
        stability_sweep.main,
        ["--out", str(out), "--steps", "2", "--lrs", "1e-3", "--seeds", "0", "1", "--warmups", "0"],
        capsys,
    )
    saved = json.loads(out.read_text())
    assert code == 130 and saved["complete"] is False and len(saved["training"]["runs"]) == 1
    assert saved["command"].startswith("python tools/stability_sweep.py --out")
    assert saved["where_it_ran"]["device_type"] == "cpu" and saved["where_it_ran"]["threads"] == 1


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--steps", "0"], "expected a positive integer, got '0'"),
        (["--d-ks", "16", "0"], "expected a positive integer, got '0'"),
        (["--lrs", "nan"], "expected a positive number, got 'nan'"),
        (["--seeds", "-1"], "expected an integer >= 0"),
        (["--out", "/nonexistent/folder/x.json"], "the folder /nonexistent/folder does not exist"),
    ],
)
def test_score_functions_refuses_bad_input_before_training(argv, message, capsys, monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("trained before checking its input")

    monkeypatch.setattr(scoring, "train_scores", no_training)
    code, err = exit_code(score_functions.main, argv, capsys)
    assert code == 2 and message in err and "usage:" in err


def test_an_interrupted_score_sweep_keeps_the_runs_it_finished(tmp_path, capsys, monkeypatch):
    out = tmp_path / "s.json"
    calls = {"n": 0}

    def interrupt_second(kind, d_k, lr, seed=0, steps=200):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return {"kind": kind, "d_k": d_k, "lr": lr, "seed": seed, "accuracy": 0.5, "loss": 1.0}

    monkeypatch.setattr(scoring, "train_scores", interrupt_second)
    argv = ["--out", str(out), "--d-ks", "4", "--lrs", "0.01", "--seeds", "0", "--steps", "1"]
    code, _ = exit_code(score_functions.main, argv, capsys)
    saved = json.loads(out.read_text())
    assert code == 130 and saved["complete"] is False and saved["runs"][0]["kind"] == "additive"
    assert len(saved["runs"]) == 1 and not (tmp_path / "s.json.tmp").exists()


def test_command_line_records_the_arguments_as_a_shell_would_need_them():
    from sweep_cli import command_line

    assert command_line("python t.py", ["--out", "a b.json"]) == "python t.py --out 'a b.json'"
