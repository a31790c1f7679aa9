"""Tests of mini_transformer.checks: one test per rule and per message.

The rule: TypeError for the wrong type, ValueError for the wrong value, and the message names
the argument, the allowed values and what was given.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mini_transformer import checks as C


# --------------------------------------------------------------------------- check_int
@pytest.mark.parametrize("value", [1, 7, np.int64(3), np.int32(5)])
def test_int_accepts_python_and_numpy_integers(value):
    out = C.check_int("n", value, low=1)
    assert out == int(value) and type(out) is int


@pytest.mark.parametrize("value", [True, np.bool_(True), 2.0, 2.7, "3", None, torch.tensor(3)])
def test_int_rejects_other_types_with_typeerror(value):
    with pytest.raises(TypeError, match=r"^n must be a positive integer, got "):
        C.check_int("n", value, low=1)


def test_int_float_is_never_truncated():
    with pytest.raises(TypeError, match=r"step must be a non-negative integer, got 2.7"):
        C.check_int("step", 2.7, low=0)


@pytest.mark.parametrize(
    ("kwargs", "value", "message"),
    [
        ({"low": 1}, 0, "n must be a positive integer, got 0"),
        ({"low": 0}, -1, "n must be a non-negative integer, got -1"),
        ({"low": 3}, 2, "n must be an integer >= 3, got 2"),
        ({"low": 1, "high": 4}, 5, r"n must be an integer in \[1, 4\], got 5"),
        ({"high": 4}, 5, "n must be an integer <= 4, got 5"),
        ({"low": 1, "even": True}, 7, "n must be a positive even integer, got 7"),
    ],
)
def test_int_range_messages(kwargs, value, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        C.check_int("n", value, **kwargs)


def test_int_why_is_appended():
    with pytest.raises(ValueError, match="d_head must be a positive even integer for a rotation"):
        C.check_int("d_head", 3, low=1, even=True, why=" for a rotation")


def test_int_bounds_are_inclusive():
    assert C.check_int("n", 1, low=1, high=4) == 1
    assert C.check_int("n", 4, low=1, high=4) == 4


# --------------------------------------------------------------------------- check_float
def test_float_accepts_ints_and_numpy_floats():
    assert C.check_float("eps", 1, low=0, low_open=True) == 1.0
    assert C.check_float("eps", np.float64(1e-5), low=0, low_open=True) == 1e-5
    assert C.check_float("eps", np.float32(0.5)) == 0.5


@pytest.mark.parametrize("value", [True, "1e-5", 1j, None, torch.tensor(1.0), [1.0]])
def test_float_rejects_other_types_with_typeerror(value):
    with pytest.raises(TypeError, match=r"^eps must be a finite number > 0, got "):
        C.check_float("eps", value, low=0, low_open=True)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, np.float64("nan")])
def test_float_rejects_nan_and_inf(value):
    with pytest.raises(ValueError, match=r"^scale must be a finite number, got (nan|inf|-inf)$"):
        C.check_float("scale", value)


@pytest.mark.parametrize(
    ("kwargs", "value", "message"),
    [
        ({"low": 0, "low_open": True}, 0.0, "eps must be a finite number > 0, got 0.0"),
        ({"low": 0}, -1e-9, "eps must be a finite number >= 0, got -1e-09"),
        ({"high": 1, "high_open": True}, 1.0, "eps must be a finite number < 1, got 1.0"),
        ({"low": 0, "high": 1}, 1.5, r"eps must be a finite number in \[0, 1\], got 1.5"),
        (
            {"low": 0, "high": 1, "low_open": True, "high_open": True},
            0,
            r"eps must be a finite number in \(0, 1\), got 0.0",
        ),
    ],
)
def test_float_range_messages(kwargs, value, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        C.check_float("eps", value, **kwargs)


def test_probability():
    assert C.check_probability("dropout", 0) == 0.0
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\), got 1.0"):
        C.check_probability("dropout", 1.0)
    with pytest.raises(TypeError, match=r"dropout must be a probability in \[0, 1\), got True"):
        C.check_probability("dropout", True)


# --------------------------------------------------------------------------- bool / choice
def test_bool_accepts_only_bools():
    assert C.check_bool("causal", True) is True
    assert C.check_bool("causal", np.bool_(False)) is False
    for value in (1, 0, "yes", None, 1.0):
        with pytest.raises(TypeError, match="^causal must be True or False, got "):
            C.check_bool("causal", value)


def test_choice():
    assert C.check_choice("layout", "concat", ("interleaved", "concat")) == "concat"
    with pytest.raises(
        ValueError, match=r"^layout must be one of 'interleaved', 'concat', got 'Concat'$"
    ):
        C.check_choice("layout", "Concat", ("interleaved", "concat"))
    with pytest.raises(TypeError, match=r"^layout must be one of 'interleaved', 'concat', got 3"):
        C.check_choice("layout", 3, ("interleaved", "concat"))


def test_choice_does_not_confuse_bool_with_int():
    with pytest.raises(TypeError, match="n must be one of 0, 1, got True"):
        C.check_choice("n", True, (0, 1))


def test_instance():
    g = torch.Generator()
    assert C.check_instance("generator", g, torch.Generator, "a torch.Generator") is g
    with pytest.raises(TypeError, match="generator must be a torch.Generator, got 3"):
        C.check_instance("generator", 3, torch.Generator, "a torch.Generator")


# --------------------------------------------------------------------------- tensors
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_tensor_floating_rejects_int_bool_complex(dtype):
    x = torch.zeros(2, 3, dtype=dtype)
    with pytest.raises(TypeError, match=rf"x must be a floating-point tensor .*got dtype {dtype}"):
        C.check_tensor("x", x, floating=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_tensor_floating_accepts_every_float_dtype(dtype):
    x = torch.zeros(2, 3, dtype=dtype)
    assert C.check_tensor("x", x, floating=True) is x


def test_tensor_integer_and_boolean():
    assert C.check_tensor("ids", torch.zeros(3, dtype=torch.long), integer=True) is not None
    with pytest.raises(TypeError, match="ids must be an integer tensor .*got dtype torch.float32"):
        C.check_tensor("ids", torch.zeros(3), integer=True)
    with pytest.raises(TypeError, match="ids must be an integer tensor .*got dtype torch.bool"):
        C.check_tensor("ids", torch.zeros(3, dtype=torch.bool), integer=True)
    with pytest.raises(TypeError, match="mask must be a boolean tensor .*got dtype torch.int64"):
        C.check_tensor("mask", torch.zeros(3, dtype=torch.long), boolean=True)


def test_tensor_rejects_non_tensors():
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got \[1.0, 2.0\] of type list"):
        C.check_tensor("x", [1.0, 2.0])
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got .* of type ndarray"):
        C.check_tensor("x", np.zeros(3))


def test_tensor_shape_messages():
    x = torch.zeros(2, 5)
    with pytest.raises(
        ValueError, match=r"x must have 3 dimensions \(B, T, d_model\), got shape \(2, 5\)"
    ):
        C.check_tensor("x", x, ndim=3, dims="(B, T, d_model)")
    with pytest.raises(ValueError, match=r"x must have at least 3 dimensions"):
        C.check_tensor("x", x, min_ndim=3)
    with pytest.raises(
        ValueError,
        match=r"x must have shape \(B, 4\) with size 4 in dimension 1, got shape \(2, 5\)",
    ):
        C.check_tensor("x", x, shape=(None, 4), dims="(B, 4)")
    assert C.check_tensor("x", x, shape=(None, 5)) is x
    with pytest.raises(ValueError, match=r"x must not be empty .*got shape \(0, 5\)"):
        C.check_tensor("x", torch.zeros(0, 5), nonempty=True)


def test_tensor_dtype_of_names_both_and_allows_autocast():
    q, k = torch.zeros(2), torch.zeros(2, dtype=torch.float64)
    with pytest.raises(
        TypeError, match=r"k must have the dtype of q \(torch.float32\), got dtype torch.float64"
    ):
        C.check_tensor("k", k, dtype_of=q, of="q")
    assert C.check_tensor("k", q, dtype_of=q) is q
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert C.check_tensor("x", k, dtype_of=q) is k


def test_tensor_broadcast_to():
    bias = torch.zeros(3, 5, 5)
    assert C.check_tensor("bias", bias, broadcast_to=(2, 3, 5, 5)) is bias
    with pytest.raises(
        ValueError,
        match=r"bias of shape \(3, 5, 5\) does not broadcast to \(h, T, T\) = \(4, 5, 5\)",
    ):
        C.check_tensor("bias", bias, broadcast_to=(4, 5, 5), dims="(h, T, T)")


def test_tensor_shape_with_leading_ellipsis_checks_the_last_dimensions():
    x = torch.zeros(2, 3, 5)
    assert C.check_tensor("x", x, shape=(..., 5)) is x
    with pytest.raises(
        ValueError, match=r"x must have shape \(\.\.\., d=4\) with size 4 in dimension 2"
    ):
        C.check_tensor("x", x, shape=(..., 4), dims="(..., d=4)")
    with pytest.raises(ValueError, match="x must have at least 2 dimensions"):
        C.check_tensor("x", torch.zeros(5), shape=(..., None, 5))


def test_array():
    out = C.check_array("x", [[1, 2], [3, 4]], min_ndim=2)
    assert out.dtype == np.float64 and out.shape == (2, 2)
    with pytest.raises(TypeError, match="x must hold real numbers .*got dtype complex128"):
        C.check_array("x", np.ones((2, 2)) * 1j)
    with pytest.raises(TypeError, match="x must hold real numbers .*got dtype bool"):
        C.check_array("x", np.ones((2, 2), dtype=bool))
    with pytest.raises(TypeError, match="x must hold real numbers"):
        C.check_array("x", [["a", "b"]])
    with pytest.raises(ValueError, match="x must hold finite numbers"):
        C.check_array("x", [[1.0, math.nan]])
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions \(J, d\)"):
        C.check_array("x", [1.0], min_ndim=2, dims="(J, d)")
    with pytest.raises(ValueError, match="x must not be empty"):
        C.check_array("x", np.zeros((0, 3)))
    with pytest.raises(ValueError, match="x must be a rectangular array"):
        C.check_array("x", [[1.0], [1.0, 2.0]])


# --------------------------------------------------------------------------- memory
def test_check_size_returns_the_bytes_of_a_real_allocation():
    for dtype in (torch.float32, torch.float16, torch.float64, torch.long):
        t = torch.empty(3, 5, 7, dtype=dtype)
        assert C.check_size("t", t.shape, dtype) == t.numel() * t.element_size()
    assert C.check_size("t", (4, 6), np.float64) == np.empty((4, 6)).nbytes


def test_check_size_refuses_before_allocating_with_the_estimate(monkeypatch):
    with pytest.raises(
        ValueError,
        match=r"table of shape \(1000000, 1000000\) would need 3.6 TiB "
        r"\(4000000000000 bytes of torch.float32\)",
    ):
        C.check_size("table", (10**6, 10**6), torch.float32)
    assert C.check_size("table", (10, 10), torch.float32) == 400
    monkeypatch.setattr(C, "MAX_BYTES", 100)
    with pytest.raises(ValueError, match="over the limit of 100 bytes"):
        C.check_size("table", (10, 10), torch.float64)


def test_format_bytes():
    assert C.format_bytes(512) == "512 bytes"
    assert C.format_bytes(1536) == "1.5 KiB"
    assert C.format_bytes(3 * 2**30) == "3.0 GiB"


def test_device():
    assert C.check_device("device", None) is None
    assert C.check_device("device", "cpu") == torch.device("cpu")
    assert C.check_device("device", torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ValueError, match="device must be a device such as 'cpu', .*got 'tpu'"):
        C.check_device("device", "tpu")
    with pytest.raises(TypeError, match="device must be None, a device string .*got 5.5"):
        C.check_device("device", 5.5)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device is 'cuda' but CUDA is not available"):
            C.check_device("device", "cuda")
    with pytest.raises(TypeError, match="device must be None, a device string"):
        C.check_device("device", 0)


def test_check_size_refuses_a_negative_size():  # issue 36: it returned -20 bytes
    with pytest.raises(ValueError, match=r"s of shape \(-1, 5\) has a negative size"):
        C.check_size("s", (-1, 5))


def _check_calls(out, steps: int, eval_interval: int) -> int:
    """Calls into checks.py (not counting checks.entry's gate and checks.trusted) of a tiny run."""
    import sys

    from mini_transformer import checks
    from mini_transformer.core import get_preset
    from mini_transformer.train import train

    cfg = get_preset("tiny", steps=steps, eval_interval=eval_interval, progress=False, threads=1)
    n = [0]

    def profile(frame, event, arg):
        code = frame.f_code
        gate = code.co_name in ("checked", "checking", "trusted")
        if event == "call" and code.co_filename == checks.__file__ and not gate:
            n[0] += 1

    sys.setprofile(profile)
    try:
        train(cfg, out / f"run{steps}_{eval_interval}", overwrite=True)
    finally:
        sys.setprofile(None)
    return n[0]


def test_the_training_loop_makes_no_check_calls_per_step(tmp_path):
    """Issue 35's measure: the check calls of a tiny run of 4 steps minus those of 2 steps, both
    evaluating only at the end: 0 per step (16 before the loop opened checks.trusted)."""
    _check_calls(tmp_path, 1, 1)  # fills the caches (corpus, tokenizer) the later runs reuse
    assert _check_calls(tmp_path, 4, 4) - _check_calls(tmp_path, 2, 2) == 0


def test_evaluations_and_saves_in_the_loop_make_no_check_calls(tmp_path):
    """An evaluation (estimate_loss on the loop's own ids) and a save (save_checkpoint of the
    loop's own step) inside the training loop re-check nothing: 4 steps evaluating after each
    make as many check calls as 4 steps evaluating once (5 each before)."""
    _check_calls(tmp_path, 1, 1)
    assert _check_calls(tmp_path, 4, 1) - _check_calls(tmp_path, 4, 4) == 0


def test_estimate_loss_and_save_checkpoint_still_check_a_readers_call(tmp_path):
    """Outside the loop the same functions refuse bad input with the same messages."""
    from mini_transformer.checkpoints import save_checkpoint
    from mini_transformer.core import estimate_loss, get_preset
    from mini_transformer.model import TransformerLM

    model = TransformerLM(get_preset("tiny").model)
    ids = torch.zeros(100, dtype=torch.long)
    with pytest.raises(TypeError, match="ids must be an integer tensor"):
        estimate_loss(model, ids.float(), n_batches=1, batch_size=2, seed=0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer or None, got -1"):
        estimate_loss(model, ids, n_batches=1, batch_size=2, seed=-1)
    with pytest.raises(ValueError, match="step must be a non-negative integer, got -1"):
        save_checkpoint(tmp_path / "a.pt", model, step=-1)
    with pytest.raises(ValueError, match="extra keys"):
        save_checkpoint(tmp_path / "b.pt", model, rng=1)
