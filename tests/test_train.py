"""Tests of mini_transformer.train: schedule, optimizer groups, loop, checkpoints, CLI, DDP."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mini_transformer import checkpoints, cli
from mini_transformer import train as T
from mini_transformer.core import TrainConfig
from mini_transformer.model import TransformerConfig, TransformerLM

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]


def tiny(**overrides):
    base = dict(threads=1, progress=False, peak_flops=1e11, device="cpu")
    base.update(overrides)
    return T.get_preset("tiny", **base)


def small_model(**kw):
    torch.manual_seed(0)
    return TransformerLM(
        TransformerConfig(vocab_size=84, block_size=8, d_model=16, n_heads=2, n_layers=1, **kw)
    )


# ------------------------------------------------------------------ configuration


def test_unknown_preset_is_an_error():
    match = r"unknown preset 'huge'; choose one of \['cpu', 'gpu', 'tiny'\]"
    with pytest.raises(ValueError, match=match):
        T.get_preset("huge")


def test_presets_route_model_and_training_overrides():
    cfg = T.get_preset("gpu", positional="alibi", steps=7)
    assert cfg.model.positional == "alibi" and cfg.steps == 7
    assert cfg.model.d_model == 384 and cfg.model.n_layers == 6 and cfg.batch_size == 64
    assert cfg.model.vocab_size == 84  # the bundled corpus tokenizer's


def test_gpu_preset_is_nanogpt_shakespeare_char_scale():
    model = TransformerLM(T.get_preset("gpu").model)
    assert 10.5e6 < model.num_parameters() < 11e6


def test_warmup_is_linear_and_the_cosine_ends_at_min_lr():
    schedule = TrainConfig(steps=100, warmup_steps=10, lr=1.0, min_lr=0.1).schedule()
    assert [schedule(s) for s in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert schedule(9) == pytest.approx(1.0)
    assert schedule(55) == pytest.approx(0.55)  # halfway through the cosine
    assert schedule(100) == pytest.approx(0.1)
    after = [schedule(s) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(after[:-1], after[1:], strict=True))


def test_only_linear_weight_matrices_are_decayed():
    model = small_model(positional="learned")
    opt = T.configure_optimizer(model, TrainConfig(weight_decay=0.1))
    decay, other = opt.param_groups
    assert decay["weight_decay"] == 0.1 and other["weight_decay"] == 0.0
    ids = lambda ps: {id(p) for p in ps}  # noqa: E731
    assert ids(decay["params"]) == {
        id(m.weight) for m in model.blocks.modules() if isinstance(m, torch.nn.Linear)
    }
    assert id(model.tok_emb.weight) in ids(other["params"])
    assert id(model.pos_emb.weight) in ids(other["params"])
    assert len(decay["params"]) + len(other["params"]) == len(list(model.parameters()))


def test_train_config_rejects_min_lr_above_lr():
    with pytest.raises(ValueError, match="min_lr must be <= lr"):
        TrainConfig(lr=1e-3, min_lr=1e-2)


def test_get_preset_rejects_unknown_settings():
    with pytest.raises(ValueError, match=r"unknown setting 'n_embd'"):
        T.get_preset("tiny", n_embd=3)


# ------------------------------------------------------------------ the loop


def test_a_tiny_run_lowers_the_loss_and_writes_its_log(tmp_path):
    result = T.train(tiny(steps=40), tmp_path, argv=["test"])
    log = T.read_log(tmp_path / "metrics.jsonl")
    start, evals, end = log[0], [r for r in log if r["event"] == "eval"], log[-1]
    assert start["event"] == "start" and start["device"].startswith("CPU")
    assert start["preset"] == "tiny" and start["command"] == "test" and start["seed"] == 0
    for key in ("torch", "python", "model_config", "train_config", "peak_flops"):
        assert key in start
    assert [r["step"] for r in evals] == [0, 20, 40]
    assert evals[0]["val_loss"] == pytest.approx(math.log(84), abs=0.1)
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] - 1.0
    assert evals[-1]["tokens_per_s"] > 0 and 0 < evals[-1]["mfu"] < 1
    assert end["event"] == "end" and end["reason"] == "completed" and end["wall_time_s"] > 0
    assert result["step"] == 40 and len(result["losses"]) == 40
    assert (tmp_path / "last.pt").is_file() and (tmp_path / "best.pt").is_file()


def test_a_new_run_refuses_a_folder_with_a_checkpoint(tmp_path):
    T.train(tiny(steps=1, eval_interval=1), tmp_path)
    with pytest.raises(ValueError, match="already holds a run"):
        T.train(tiny(steps=1, eval_interval=1), tmp_path)


def _interrupt_at(step):
    """A setup hook raising KeyboardInterrupt at the start of training step ``step``."""

    def hook(model):
        calls = {"n": 0}

        def pre(module, args):
            if module.training:
                if calls["n"] == step:
                    raise KeyboardInterrupt
                calls["n"] += 1

        model.register_forward_pre_hook(pre)

    return hook


def test_an_immediate_interrupt_keeps_the_last_checkpoint_and_resumes_identically(tmp_path):
    # A KeyboardInterrupt raised inside a step (a second Ctrl-C) saves nothing: last.pt
    # stays the one of the last evaluation, and resuming from it is still exact.
    cfg = tiny(steps=6, eval_interval=3, dropout=0.1)  # dropout: the RNG state must be restored
    straight = T.train(cfg, tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        T.train(cfg, tmp_path / "b", setup_hook=_interrupt_at(4))
    assert T.load_checkpoint(tmp_path / "b" / "last.pt")["step"] == 3
    resumed = T.train(cfg, tmp_path / "b", resume=True)
    assert resumed["losses"] == straight["losses"][3:]  # bit for bit
    a = T.load_checkpoint(tmp_path / "a" / "last.pt")["model"]
    b = T.load_checkpoint(tmp_path / "b" / "last.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    events = [r["event"] for r in T.read_log(tmp_path / "b" / "metrics.jsonl")]
    assert events[0] == "start" and "resume" in events and events[-1] == "end"


# ------------------------------------------------------------------ checkpoints


def test_checkpoint_round_trip_is_exact(tmp_path):
    model = small_model(positional="alibi", dropout=0.1)
    opt = T.configure_optimizer(model, TrainConfig())
    model(torch.randint(84, (2, 8)), torch.randint(84, (2, 8)))[1].backward()
    opt.step()
    path = T.save_checkpoint(tmp_path / "c.pt", model, opt, step=3, best_val_loss=2.5)
    raw = torch.load(path, weights_only=True)  # no pickled code needed
    assert raw["model_config"] == model.config.to_dict() and raw["step"] == 3
    twin = small_model(positional="alibi", dropout=0.1)
    opt2 = T.configure_optimizer(twin, TrainConfig())
    T.load_checkpoint(path, twin, opt2)
    for (k, a), (_, b) in zip(model.state_dict().items(), twin.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert all(torch.equal(s1[i]["exp_avg"], s2[i]["exp_avg"]) for i in s1)
    assert not (tmp_path / "c.pt.tmp").exists()


def test_loading_a_missing_checkpoint_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint not found: .*nope.pt"):
        T.load_checkpoint(tmp_path / "nope.pt")


def test_loading_a_corrupt_checkpoint_says_so(tmp_path):
    path = T.save_checkpoint(tmp_path / "c.pt", small_model())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated, as by a crash mid-copy
    with pytest.raises(ValueError, match="corrupt or not a torch checkpoint"):
        T.load_checkpoint(path)


def test_loading_a_foreign_file_says_it_is_not_a_checkpoint(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a mini_transformer checkpoint"):
        T.load_checkpoint(tmp_path / "other.pt")


def test_loading_into_a_model_of_another_config_lists_the_difference(tmp_path):
    path = T.save_checkpoint(tmp_path / "c.pt", small_model(positional="rope"))
    with pytest.raises(ValueError, match=r"different model config .*positional: 'rope' vs 'alibi'"):
        T.load_checkpoint(path, small_model(positional="alibi"))


def test_exported_weights_are_half_precision_and_load_back(tmp_path):
    T.train(tiny(steps=2, eval_interval=2), tmp_path / "run")
    out = checkpoints.prepare_export(
        tmp_path / "run" / "best.pt", tmp_path / "w.pt", log_path=tmp_path / "run" / "metrics.jsonl"
    )()
    raw = torch.load(out, weights_only=True)
    assert raw["format"] == "mini_transformer.weights" and "optimizer" not in raw
    assert raw["model"]["tok_emb.weight"].dtype == torch.float16
    assert raw["model"]["lm_head.weight"].data_ptr() == raw["model"]["tok_emb.weight"].data_ptr()
    assert out.with_suffix(".jsonl").is_file() and out.with_suffix(".json").is_file()
    full, tok, _ = T.load_model(tmp_path / "run" / "best.pt")
    model, tok2 = T.load_pretrained(out)
    assert tok == tok2 and not model.training
    idx = tok.encode("ROMEO:")[None]
    torch.testing.assert_close(model(idx)[0], full(idx)[0], rtol=0, atol=2e-2)  # fp16 weights


def test_estimate_loss_is_deterministic_and_near_log_vocab_untrained():
    model = small_model()
    ids = torch.randint(84, (500,), generator=torch.Generator().manual_seed(0))
    whole = [T.estimate_loss(model, ids, n_batches=None, batch_size=b, seed=None) for b in (4, 7)]
    assert whole[0] == pytest.approx(whole[1], rel=1e-6)  # same windows, different batching
    assert whole[0] == pytest.approx(math.log(84), abs=0.1)
    sampled = [T.estimate_loss(model, ids, n_batches=3, batch_size=4, seed=s) for s in (1, 1, 2)]
    assert sampled[0] == sampled[1] != sampled[2]  # the same windows for the same seed
    assert sampled[0] == pytest.approx(math.log(84), abs=0.1)


# ------------------------------------------------------------------ command line and DDP


def _run(*args, timeout=120):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "mini_transformer.train", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )


def test_cli_rejects_an_unknown_preset_in_a_subprocess():
    proc = _run("--preset", "huge", "--out", "unused")
    assert proc.returncode == 2
    assert "invalid choice: 'huge'" in proc.stderr


def test_cli_resume_without_a_checkpoint_is_an_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--out", str(tmp_path), "--resume"])
    assert exc.value.code == 2
    assert "cannot resume: checkpoint not found" in capsys.readouterr().err


def test_cli_resume_with_another_preset_is_an_error(tmp_path, capsys):
    T.train(tiny(steps=1, eval_interval=1), tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main(["--preset", "cpu", "--out", str(tmp_path), "--resume"])
    assert exc.value.code == 2
    assert "different model config" in capsys.readouterr().err


def test_cli_sample_with_a_missing_checkpoint_is_an_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["sample", "--ckpt", str(tmp_path / "missing.pt")])
    assert exc.value.code == 2
    assert "checkpoint not found" in capsys.readouterr().err


def test_cli_samples_reproducibly_from_a_checkpoint(tmp_path, capsys):
    T.train(tiny(steps=2, eval_interval=2), tmp_path)
    args = ["sample", "--ckpt", str(tmp_path / "last.pt"), "--prompt", "KING", "--tokens", "20"]
    cli.main(args)
    first = capsys.readouterr().out
    cli.main(args)
    assert first == capsys.readouterr().out and first.startswith("KING") and len(first) == 25


def test_ddp_with_two_cpu_processes(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "mini_transformer.train",
        "--preset",
        "tiny",
        "--steps",
        "2",
        "--eval-interval",
        "2",
        "--eval-batches",
        "1",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--no-progress",
        "--peak-tflops",
        "0.1",
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert log[0]["world_size"] == 2 and log[0]["tokens_per_step"] == 2 * 8 * 32
    assert log[-1]["reason"] == "completed" and log[-1]["step"] == 2
    assert len([r for r in log if r["event"] == "start"]) == 1  # rank 0 alone writes
    assert T.load_checkpoint(tmp_path / "last.pt")["step"] == 2


# ------------------------------------------------------------------ the committed models


@pytest.mark.parametrize("which", ["cpu", "gpu"])
def test_committed_models_load_and_beat_chance_on_held_out_plays(which):
    from mini_transformer.data import load_corpus

    model, tok = T.load_pretrained(which)
    assert not model.training and tok.vocab_size == 84
    val = tok.encode(load_corpus("val")[100_000:110_000])  # inside Hamlet
    loss = T.estimate_loss(model, val, n_batches=1, batch_size=4, seed=None)
    # chance is ln 84 = 4.43 nats; character frequencies alone give 3.32 nats
    assert loss < 2.0


def test_committed_logs_say_where_and_how_long_they_ran():
    cpu, gpu = T.read_log("cpu"), T.read_log("gpu")
    assert cpu[0]["device"].startswith("CPU") and "H100" in gpu[0]["device"]
    for log in (cpu, gpu):
        assert log[0]["event"] == "start" and log[-1]["event"] == "end"
        assert log[-1]["reason"] == "completed" and log[-1]["wall_time_s"] > 0
        evals = [r for r in log if r["event"] == "eval"]
        assert evals[-1]["val_loss"] < evals[0]["val_loss"] - 2
        assert all(r["mfu"] is None or 0 < r["mfu"] < 1 for r in evals)


def test_the_log_records_the_precision_the_run_used(tmp_path):
    T.train(tiny(steps=1, eval_interval=1, precision="fp32"), tmp_path)
    start = T.read_log(tmp_path / "metrics.jsonl")[0]
    assert start["precision"] == "fp32" and start["dtype"] == "float32"


@pytest.mark.parametrize(
    "kwargs,name,error",
    [
        ({"ids": [1, 2, 3]}, "ids", TypeError),
        ({"ids": torch.arange(50).float()}, "ids", TypeError),
        ({"ids": torch.arange(5)}, "ids", ValueError),
        ({"batch_size": 2.5}, "batch_size", TypeError),
        ({"n_batches": 0}, "n_batches", ValueError),
        ({"n_batches": None, "seed": 0}, "n_batches", TypeError),
        ({"seed": -1}, "seed", ValueError),
    ],
)
def test_estimate_loss_names_a_bad_argument(kwargs, name, error):
    args = {"model": small_model(), "ids": torch.arange(50), "n_batches": 1, "batch_size": 2}
    with pytest.raises(error, match=name):
        T.estimate_loss(**(args | {"seed": None} | kwargs))


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"device": "tpu"}, ValueError),
        ({"threads": True}, TypeError),
        ({"steps": 2.0}, TypeError),
        ({"lr": float("nan")}, ValueError),
        ({"compile_mode": "fast"}, ValueError),
        ({"precision": "fp8"}, ValueError),
    ],
)
def test_train_config_names_a_bad_setting(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        TrainConfig(**kwargs)


# ------------------------------------------------- issue 35.3: the step path trimmed


def test_a_cpu_run_measures_its_matmul_ceiling_once(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(T.hardware, "measure_matmul_flops", lambda **kw: calls.append(kw) or 1e11)
    T.train(tiny(steps=3, eval_interval=1, peak_flops=None), tmp_path)  # 4 evaluations
    assert len(calls) == 1
    start, *_ = T.read_log(tmp_path / "metrics.jsonl")
    assert start["peak_flops"] == 1e11 and "measured once" in start["peak_flops_source"]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--steps", "0"], "steps must be a positive integer, got 0"),
        (["--lr", "nan"], "lr must be a finite number >= 0, got nan"),
        (["--threads", "0"], "threads must be an integer in [1, 1024] or None, got 0"),
        (["--seed", "-1"], "seed must be an integer in [0, 18446744073709551615], got -1"),
    ],
)
def test_the_train_command_refuses_numbers_with_train_configs_message(
    tmp_path, capsys, argv, message
):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--preset", "tiny", "--out", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and "usage:" in err
    assert not (tmp_path / "r").exists()


def test_checkpoints_are_version_3_and_a_version_2_file_loads_but_does_not_resume(
    tmp_path, monkeypatch
):
    model = small_model()
    opt = T.configure_optimizer(model, TrainConfig())
    assert torch.load(T.save_checkpoint(tmp_path / "v3.pt", model, opt))["version"] == 3
    monkeypatch.setattr(checkpoints, "VERSION", 2)  # a file of the version before
    path = T.save_checkpoint(tmp_path / "v2.pt", model, opt)
    twin = small_model()
    torch.nn.init.zeros_(twin.tok_emb.weight)
    T.load_checkpoint(path, twin)  # the weights load
    pairs = zip(model.parameters(), twin.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert T.load_model(path)[0].config == model.config
    with pytest.raises(ValueError, match="is of an older version: it cannot be resumed"):
        T.load_checkpoint(path, twin, T.configure_optimizer(twin, TrainConfig()))
