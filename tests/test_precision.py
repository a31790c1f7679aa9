"""Tests of the precision part of mini_transformer.hardware: bf16, autocast, core count."""

import contextlib
import time

import pytest
import torch

from mini_transformer import hardware as P
from mini_transformer.checks import check_device
from mini_transformer.core import get_preset
from mini_transformer.model import TransformerConfig, TransformerLM

torch.set_num_threads(1)


def test_features_match_torch_own_detection():
    f = P.cpu_bf16_features()
    assert f["avx512_bf16"] == bool(torch.cpu._is_avx512_bf16_supported())
    assert f["amx"] == bool(torch.cpu._is_amx_tile_supported())
    assert P.native_bf16(torch.device("cpu")) == (f["avx512_bf16"] or f["amx"])


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


CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize(
    "requested, native, d_model, expected",
    [
        ("fp32", True, 512, "fp32"),
        ("bf16", False, 64, "bf16"),  # forced: runs (emulated) even without native support
        ("bf16", True, 64, "bf16"),
        ("auto", False, 512, "fp32"),  # no native bf16: float32, nothing to measure
        ("auto", True, P.CPU_BF16_MIN_D_MODEL - 1, "fp32"),  # narrow: float32, unmeasured
        ("auto", True, P.CPU_BF16_MIN_D_MODEL, None),  # native and wide: only a measurement tells
        ("auto", True, None, None),
    ],
)
def test_resolve_precision_on_cpu(monkeypatch, requested, native, d_model, expected):
    monkeypatch.setattr(P, "native_bf16", lambda device: native)
    assert P.resolve_precision(requested, CPU, d_model=d_model) == expected


@pytest.mark.parametrize("native", [True, False])
def test_resolve_precision_on_cuda_ignores_width_and_never_measures(monkeypatch, native):
    monkeypatch.setattr(P, "native_bf16", lambda device: native)
    for d_model in (32, 512, None):
        assert P.resolve_precision("auto", CUDA, d_model=d_model) == ("bf16" if native else "fp32")
    if not native:
        with pytest.raises(ValueError, match="no bf16 support"):
            P.resolve_precision("bf16", CUDA)


# ------------------------------------------------------------- "auto" measures (issue 37)


def _timed_model(cost: dict[str, float], dropout: float = 0.0):
    """A small model and a fake clock that its forward pass advances by ``cost[precision]``:
    the precision is read from the autocast state, as the measurement sets it."""
    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=84, block_size=16, d_model=32, n_heads=2, n_layers=1, dropout=dropout
    )
    model, now = TransformerLM(cfg), [0.0]

    def advance(module, args, output):
        now[0] += cost["bf16" if torch.is_autocast_enabled("cpu") else "fp32"]

    model.register_forward_hook(advance)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(84, (2, 2, 16), generator=g)
    return model, x, y, lambda: now[0]


@pytest.mark.parametrize(
    "fp32_s, bf16_s, expected",
    [
        (0.010, 0.007, "bf16"),  # bf16 faster (the AMD EPYC of issue 37)
        (0.007, 0.010, "fp32"),  # bf16 slower (the Intel Xeon with AMX of issue 37)
        (0.010, 0.0099, "fp32"),  # within 3%: a near tie goes to float32, the exact format
    ],
)
def test_auto_picks_the_faster_precision_by_a_fake_timer(fp32_s, bf16_s, expected):
    model, x, y, clock = _timed_model({"fp32": fp32_s, "bf16": bf16_s})
    choice, times = P.measure_precision(model, x, y, clock=clock)
    assert choice == expected
    assert times == pytest.approx({"fp32": fp32_s, "bf16": bf16_s})  # both figures, as timed


def test_the_measurement_is_eight_passes_interleaved():
    model, x, y, clock = _timed_model({"fp32": 1.0, "bf16": 2.0})
    order = []
    model.register_forward_hook(lambda *a: order.append(torch.is_autocast_enabled("cpu")))
    P.measure_precision(model, x, y, clock=clock)
    fp32, bf16 = False, True
    assert order == [fp32, bf16] + [fp32, bf16, bf16, fp32, fp32, bf16]  # untimed, then 3 rounds


def test_under_torchrun_rank_0s_choice_is_broadcast(tmp_path):
    """The broadcast path runs (one process in a gloo group: every rank gets rank 0's)."""
    import torch.distributed as dist

    model, x, y, clock = _timed_model({"fp32": 0.010, "bf16": 0.007})
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        assert P.measure_precision(model, x, y, clock=clock)[0] == "bf16"
    finally:
        dist.destroy_process_group()


def test_the_measurement_leaves_weights_gradients_and_rng_as_they_were():
    model, x, y, clock = _timed_model({"fp32": 1.0, "bf16": 2.0}, dropout=0.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(123)
    rng = torch.get_rng_state()
    P.measure_precision(model, x, y, clock=clock)
    assert torch.equal(torch.get_rng_state(), rng)  # dropout drew, and the state came back
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_autocast_fp32_is_a_no_op():
    assert isinstance(P.autocast("fp32", CPU), contextlib.nullcontext)


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


def _tiny(tmp_path, setup_hook=None, **kw):
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
    T.train(cfg, tmp_path, setup_hook=setup_hook)
    return T.read_log(tmp_path / "metrics.jsonl")


def test_train_config_refuses_an_unknown_precision():
    from mini_transformer import train as T

    with pytest.raises(
        ValueError, match="precision must be one of 'auto', 'fp32', 'bf16', got 'half'"
    ):
        T.get_preset("tiny", precision="half")


@pytest.mark.parametrize("forced", ["fp32", "bf16"])
def test_the_log_records_the_precision_that_ran(tmp_path, forced):
    log = _tiny(tmp_path, precision=forced)
    assert log[0]["precision"] == forced
    assert log[0]["dtype"] == P.log_label(forced, "cpu")
    assert log[-1]["reason"] == "completed"


def test_auto_on_the_cpu_keeps_narrow_models_float32_unmeasured(tmp_path):
    log = _tiny(tmp_path)  # d_model 32 < CPU_BF16_MIN_D_MODEL: float32 on every CPU
    assert log[0]["precision"] == "fp32" and log[0]["precision_step_s"] is None


def _slow_in(precision: str, seconds: float):
    """A setup hook: the model's forward pass sleeps ``seconds`` in ``precision`` (a CPU where
    that precision is the slower one), so a real measurement has a clear answer."""

    def hook(model):
        def sleep(module, args, output):
            if torch.is_autocast_enabled("cpu") == (precision == "bf16"):
                time.sleep(seconds)

        model.register_forward_hook(sleep)

    return hook


@pytest.fixture
def measured(monkeypatch):
    """``"auto"`` measures even the tiny model: as on a CPU with native bf16, from any width."""
    monkeypatch.setattr(P, "native_bf16", lambda device: True)
    monkeypatch.setattr(P, "CPU_BF16_MIN_D_MODEL", 1)


@pytest.mark.parametrize("slow, fast", [("fp32", "bf16"), ("bf16", "fp32")])
def test_auto_measures_the_run_picks_the_faster_and_logs_both(tmp_path, measured, slow, fast):
    from mini_transformer import train as T

    log = _tiny(tmp_path, setup_hook=_slow_in(slow, 0.25))
    start, first_eval = log[0], log[1]
    assert start["precision"] == fast and start["dtype"] == P.log_label(fast, CPU)
    assert start["precision_step_s"][slow] >= 0.25 > start["precision_step_s"][fast]
    assert start["train_config"]["precision"] == "auto"  # what was asked; "precision": the choice
    assert T.load_checkpoint(tmp_path / "last.pt")["precision"] == fast
    # the measurement (4 passes of 0.25 s in the slow precision) is not in the run's clock
    assert first_eval["step"] == 0 and first_eval["elapsed_s"] < 0.75


def test_resume_keeps_the_precision_auto_chose(tmp_path, measured):
    from mini_transformer import train as T

    # 0.25 s a pass, as in the test above: 0.05 s was within a loaded machine's noise.
    _tiny(tmp_path, setup_hook=_slow_in("fp32", 0.25))  # measured: bf16
    cfg = T.get_preset(
        "tiny", threads=1, progress=False, peak_flops=1e11, device="cpu", steps=8, eval_interval=4
    )
    T.train(cfg, tmp_path, resume=True, setup_hook=_slow_in("bf16", 0.05))  # would pick fp32
    resumed = [r for r in T.read_log(tmp_path / "metrics.jsonl") if r["event"] == "resume"]
    assert resumed[0]["precision"] == "bf16" and resumed[0]["precision_step_s"] is None
    assert T.load_checkpoint(tmp_path / "last.pt")["step"] == 8


def test_a_measured_run_computes_as_a_forced_one(tmp_path, measured):
    """The measurement leaves no trace: dropout's stream, weights and gradients as before."""
    a = _tiny(tmp_path / "a", dropout=0.2, setup_hook=_slow_in("bf16", 0.25))
    b = _tiny(tmp_path / "b", dropout=0.2, precision="fp32")
    assert a[0]["precision"] == b[0]["precision"] == "fp32" and a[0]["precision_step_s"]
    assert [r.get("val_loss") for r in a[1:]] == [r.get("val_loss") for r in b[1:]]


@pytest.mark.parametrize(
    "device, expected",
    [("auto", "cpu"), ("cpu", "cpu"), (CPU, "cpu"), ("cuda:1", "cuda:1"), ("cuda", "cuda:3")],
)
def test_one_device_parser_reads_a_runs_device(device, expected):
    if torch.cuda.is_available() and expected.startswith("cuda"):
        pytest.skip("parsed here only without CUDA")
    assert check_device("device", device, run=True, here=False, local_rank=3) == torch.device(
        expected
    )  # here=False: "auto" is the CPU, and a GPU this machine lacks is only parsed


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "mps", "meta"])
def test_a_runs_device_is_cpu_or_cuda(bad):
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"):
        check_device("device", bad, run=True)
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"):
        get_preset("tiny", device=bad)
    with pytest.raises(TypeError, match="device must be a str or torch.device, got 3"):
        check_device("device", 3, run=True)


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
