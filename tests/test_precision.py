"""Tests of the precision part of mini_transformer.hardware: bf16, autocast, core count."""

import contextlib

import pytest
import torch

from mini_transformer import hardware as P
from mini_transformer.model import TransformerConfig, TransformerLM

torch.set_num_threads(1)


def test_features_match_torch_own_detection():
    f = P.cpu_bf16_features()
    assert f["avx512_bf16"] == bool(torch.cpu._is_avx512_bf16_supported())
    assert f["amx"] == bool(torch.cpu._is_amx_tile_supported())
    assert P.native_bf16("cpu") == (f["avx512_bf16"] or f["amx"])


def test_native_bf16_reads_proc_cpuinfo_flags_consistently():
    """Where the kernel lists CPU flags, PyTorch's detection agrees with them."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
        None,
    )
    if flags is None:
        pytest.skip("no flags line")
    assert P.cpu_bf16_features()["avx512_bf16"] == ("avx512_bf16" in flags)
    assert P.cpu_bf16_features()["amx"] == ("amx_tile" in flags)


@pytest.mark.parametrize(
    "requested, native, d_model, expected",
    [
        ("fp32", True, 512, "fp32"),
        ("bf16", False, 64, "bf16"),  # forced: runs (emulated) even without native support
        ("bf16", True, 64, "bf16"),
        ("auto", False, 512, "fp32"),  # no native bf16: float32
        ("auto", True, P.CPU_BF16_MIN_D_MODEL - 1, "fp32"),  # too narrow to pay
        ("auto", True, P.CPU_BF16_MIN_D_MODEL, "bf16"),
        ("auto", True, None, "bf16"),
    ],
)
def test_resolve_precision_on_cpu(requested, native, d_model, expected):
    assert P.resolve_precision(requested, "cpu", d_model=d_model, native=native) == expected


def test_resolve_precision_on_cuda_ignores_width():
    assert P.resolve_precision("auto", "cuda", d_model=32, native=True) == "bf16"
    assert P.resolve_precision("auto", "cuda", d_model=32, native=False) == "fp32"
    with pytest.raises(ValueError, match="no bf16 support"):
        P.resolve_precision("bf16", "cuda", native=False)


@pytest.mark.parametrize("bad", ["fp16", "BF16", None, 16])
def test_bad_precision_is_a_value_error_naming_the_choices(bad):
    with pytest.raises(ValueError, match=r"precision must be one of \('auto', 'fp32', 'bf16'\)"):
        P.resolve_precision(bad, "cpu")


@pytest.mark.parametrize(
    "bad, error", [(0, ValueError), (-3, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_bad_d_model_names_it(bad, error):  # a wrong value: ValueError; a wrong type: TypeError
    with pytest.raises(error, match="d_model must be a positive integer or None"):
        P.resolve_precision("auto", "cpu", d_model=bad)


def test_bad_device_is_a_value_error():
    with pytest.raises(ValueError, match="device must be"):
        P.resolve_precision("auto", "mps")
    with pytest.raises(ValueError, match="device must be"):
        P.native_bf16("tpu:0")


def test_autocast_fp32_is_a_no_op_and_unresolved_values_are_refused():
    assert isinstance(P.autocast("fp32", "cpu"), contextlib.nullcontext)
    with pytest.raises(ValueError, match="resolved"):
        P.autocast("auto", "cpu")


def test_bf16_autocast_computes_matmuls_in_bf16_and_keeps_weights_fp32():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    with P.autocast("bf16", "cpu"):
        y = lin(x)
    assert y.dtype == torch.bfloat16
    assert lin.weight.dtype == torch.float32
    # the same product rounded to bf16 inputs, written plainly
    ref = x.bfloat16().float() @ lin.weight.bfloat16().float().T + lin.bias.bfloat16().float()
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
    assert not torch.equal(y.float(), lin(x))  # it really is a different computation


def test_bf16_loss_is_close_to_fp32_and_gradients_are_fp32():
    torch.manual_seed(0)
    model = TransformerLM(
        TransformerConfig(vocab_size=84, block_size=16, d_model=32, n_heads=2, n_layers=2)
    )
    g = torch.Generator().manual_seed(1)
    x = torch.randint(84, (4, 16), generator=g)
    y = torch.randint(84, (4, 16), generator=g)
    _, loss32 = model(x, y)
    with P.autocast("bf16", "cpu"):
        _, loss16 = model(x, y)
    assert loss16.dtype == torch.float32  # the head's logits are cast up before the loss
    assert abs(loss16.item() - loss32.item()) < 0.02
    loss16.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)


def test_log_label():
    assert P.log_label("fp32", "cpu") == "float32"
    assert P.log_label("bf16", "cuda") == "bfloat16 autocast"
    assert P.log_label("bf16", "cpu").startswith("bfloat16 autocast (")


CPUINFO_SMT = """processor\t: 0
physical id\t: 0
core id\t\t: 0

processor\t: 1
physical id\t: 0
core id\t\t: 1

processor\t: 2
physical id\t: 0
core id\t\t: 0

processor\t: 3
physical id\t: 0
core id\t\t: 1
"""


def test_physical_cores_counts_hyperthreads_once(monkeypatch):
    monkeypatch.setattr(P.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert P.physical_cores(CPUINFO_SMT) == 2
    monkeypatch.setattr(P.os, "sched_getaffinity", lambda pid: {0, 2}, raising=False)
    assert P.physical_cores(CPUINFO_SMT) == 1  # both logical CPUs of core 0


def test_physical_cores_falls_back_to_logical_cpus(monkeypatch):
    monkeypatch.setattr(P.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert P.physical_cores("processor\t: 0\n\nprocessor\t: 1\n\nprocessor\t: 2\n") == 3
    assert P.physical_cores("") == 3


def test_physical_cores_on_this_machine_is_within_bounds():
    n = P.physical_cores()
    import os

    assert 1 <= n <= len(os.sched_getaffinity(0))


# ------------------------------------------------------------------ wiring into train.py


def _tiny(tmp_path, **kw):
    from mini_transformer import train as T

    cfg = T.get_preset(
        "tiny",
        threads=1,
        progress=False,
        peak_flops=1e11,
        device="cpu",
        steps=4,
        eval_interval=4,
        eval_batches=1,
        **kw,
    )
    T.train(cfg, tmp_path)
    return T.read_log(tmp_path / "metrics.jsonl")


def test_train_config_refuses_an_unknown_precision():
    from mini_transformer import train as T

    with pytest.raises(ValueError, match=r"precision must be one of \('auto', 'fp32', 'bf16'\)"):
        T.get_preset("tiny", precision="half")


@pytest.mark.parametrize("forced", ["fp32", "bf16"])
def test_the_log_records_the_precision_that_ran(tmp_path, forced):
    log = _tiny(tmp_path, precision=forced)
    assert log[0]["precision"] == forced
    assert log[0]["dtype"] == P.log_label(forced, "cpu")
    assert log[-1]["reason"] == "completed"


def test_auto_on_the_cpu_follows_the_width_rule(tmp_path):
    log = _tiny(tmp_path)  # d_model 32 < CPU_BF16_MIN_D_MODEL: float32 everywhere
    assert log[0]["precision"] == "fp32"


def test_bf16_and_fp32_training_losses_agree_closely(tmp_path):
    a = _tiny(tmp_path / "a", precision="fp32")
    b = _tiny(tmp_path / "b", precision="bf16")
    va, vb = a[-2]["val_loss"], b[-2]["val_loss"]
    assert a[-2]["step"] == b[-2]["step"] == 4
    assert va != vb and abs(va - vb) < 0.05  # different arithmetic, the same learning


def test_cli_bad_precision_exits_2_with_usage(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mini_transformer.train",
            "--preset",
            "tiny",
            "--out",
            str(tmp_path),
            "--precision",
            "fp8",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "usage:" in proc.stderr and "invalid choice: 'fp8'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "metrics.jsonl").exists()


def test_cli_uses_one_thread_per_physical_core_by_default(tmp_path):
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mini_transformer.train",
            "--preset",
            "tiny",
            "--out",
            str(tmp_path),
            "--steps",
            "1",
            "--eval-interval",
            "1",
            "--eval-batches",
            "1",
            "--device",
            "cpu",
            "--no-progress",
            "--peak-tflops",
            "0.1",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    start = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert start["threads"] == P.physical_cores()
    assert start["precision"] == "fp32"  # the tiny model is below the bf16 width
