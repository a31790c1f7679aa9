"""The benchmarks that write a result record where they ran with the package's one record
(:func:`mini_transformer.hardware.where_it_ran`), run here at toy sizes on the CPU.

(``benchmarks/gpu_step.py`` is tested in ``test_gpu_step.py``; ``benchmarks/cpu_preset.py``
trains the whole ``cpu`` preset in a subprocess, too slow for the package tests.)"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from mini_transformer.hardware import where_it_ran

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expected_record() -> dict:
    return json.loads(json.dumps(where_it_ran("cpu")))


def test_the_attention_benchmark_records_where_it_ran(tmp_path, capsys):
    torch.set_num_threads(1)
    out = tmp_path / "a.json"
    argv = ["--T", "8", "--B", "1", "--d-model", "16", "--heads", "2", "--warmup", "0"]
    result = load_benchmark("attention").main([*argv, "--repeats", "1", "--json", str(out)])
    capsys.readouterr()
    assert json.loads(out.read_text())["where_it_ran"] == expected_record()
    assert result["rows"][0]["T"] == 8


def test_the_train_step_benchmark_records_where_it_ran(tmp_path, capsys, monkeypatch):
    out = tmp_path / "t.json"
    argv = ["--threads", "1", "--shapes", "cpu", "--rounds", "1", "--steps", "1"]
    argv += ["--matmul-n", "64", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", ["train_step.py", *argv])
    load_benchmark("train_step").main()
    capsys.readouterr()
    result = json.loads(out.read_text())
    assert result["where_it_ran"] == expected_record() and result["threads"] == 1
    assert set(result["shapes"]) == {"cpu"}


def test_the_recipe_sweep_records_where_each_run_ran():
    cand = {"name": "toy", "steps": 1, "eval_interval": 1, "eval_batches": 1, "held_out": False}
    rec = load_benchmark("cpu_recipe_sweep").run_one(cand, threads=1)
    assert rec["where_it_ran"] == expected_record() and rec["name"] == "toy"
    assert [c["step"] for c in rec["curve"]] == [0, 1]


def test_the_step_ab_benchmark_refuses_bad_candidates_before_timing(capsys):
    import pytest

    ab = load_benchmark("cpu_step_ab")
    for argv in (["1", '[{"n_layers": 0}]', "1"], ["1", "not json", "1"], ["0", "[{}]", "1"]):
        with pytest.raises(SystemExit) as exit_info:
            ab.main(argv)
        assert exit_info.value.code == 2
        assert "usage:" in capsys.readouterr().err


def test_the_step_ab_benchmark_times_the_loops_own_step(capsys, monkeypatch):
    ab = load_benchmark("cpu_step_ab")
    calls = []
    real = ab.train_step
    monkeypatch.setattr(ab, "train_step", lambda *a, **k: calls.append(k) or real(*a, **k))
    ab.main(["1", '[{"batch_size": 2, "block_size": 16, "d_model": 32, "n_heads": 2}]', "1"])
    assert "ms/step" in capsys.readouterr().out
    assert len(calls) == 4 and all(k["grad_clip"] > 0 for k in calls)  # warm-up + 3, clipped


def test_fused_qkv_packs_the_projections_and_agrees_with_fused():
    variants = load_benchmark("attention").make_variants(16, 2)
    x = torch.randn(2, 8, 16)
    concat = variants["fused-qkv"][0]
    separate = [concat.q_proj, concat.k_proj, concat.v_proj]
    hooks = [
        m.register_forward_hook(lambda *a: pytest.fail("a separate projection ran"))
        for m in separate
    ]
    for causal in (False, True):
        packed = variants["fused-qkv"][1](x, causal)
        assert torch.allclose(packed, variants["fused"][1](x, causal), atol=1e-6)
    for h in hooks:
        h.remove()
