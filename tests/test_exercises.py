"""Tests of the exercise machinery (`exercise` / `check` / `Verdict`).

The mechanism is tested on throw-away exercises registered by fixtures (removed afterwards,
so the registry is left as the chapters define it). The chapters' checkers are tested
against right and wrong answers in tests/test_exercises_answers.py.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import signal
import threading
import time

import numpy as np
import pytest
import torch

from mini_transformer import exercises
from mini_transformer.exercises import (
    ch5_layernorm,
    ch6_training,
    checking,
    comparing,
    running,
)


@pytest.fixture
def square():
    """A function exercise: x**2 for a float vector x, with one edge case and one named mistake."""
    name = "test-square"
    exercises.exercise(
        name,
        "Square every entry of x.",
        inputs=lambda rng: (rng.standard_normal(int(rng.integers(2, 6))),),
        edge_cases={"a zero": (np.array([0.0, -2.0]),)},
        mistakes={"doubled instead of squared": lambda x: 2 * x},
        n_random=5,
    )(lambda x: x**2)
    yield name
    checking._REGISTRY.pop(name)


@pytest.fixture
def value():
    """A value exercise: the answer is the integer 42."""
    name = "test-value"
    exercises.exercise(
        name, "The answer.", mistakes={"off by one": 41}, compare=comparing.exact_int
    )(lambda: 42)
    yield name
    checking._REGISTRY.pop(name)


# --- verdicts -------------------------------------------------------------------------


def test_right_answer_passes_with_a_check_mark(square, capsys):
    verdict = exercises.check(square, lambda x: x * x)
    assert verdict and verdict.passed
    assert capsys.readouterr().out == "✓ test-square: the edge case and 5 random cases agree.\n"


def test_verdict_is_not_echoed_by_jupyter(square, capsys):
    verdict = exercises.check(square, lambda x: x)
    assert hasattr(verdict, "_ipython_display_") and verdict._ipython_display_() is None


def test_wrong_answer_fails_showing_inputs_expected_and_got(square, capsys):
    assert not exercises.check(square, lambda x: x**3)
    out = capsys.readouterr().out
    assert out.startswith("✗ test-square: edge case 'a zero', inputs (array float64 [ 0., -2.]")
    assert "expected 4 at index (1,), got -8" in out


def test_a_recognised_mistake_is_named(square, capsys):
    assert not exercises.check(square, lambda x: 2 * x)
    assert "This looks like: doubled instead of squared." in capsys.readouterr().out


def test_failure_on_a_random_case_names_the_seed_that_replays_it(square, capsys):
    def right_only_for_short_inputs(x):
        return x**2 if len(x) < 3 else x

    verdict = exercises.check(square, right_only_for_short_inputs, seed=7)
    out = capsys.readouterr().out
    assert not verdict and verdict.seed == 7 and "(seed 7)" in out
    assert exercises.check(square, right_only_for_short_inputs, seed=7).message == verdict.message


def test_every_call_draws_fresh_cases(square, capsys):
    def wrong_on_random_cases(x):  # right on the edge case, so the first random case fails
        return x**2 if len(x) == 2 and x[0] == 0.0 else x

    first = exercises.check(square, wrong_on_random_cases).inputs[0]
    second = exercises.check(square, wrong_on_random_cases).inputs[0]
    assert first.tobytes() != second.tobytes()


def test_wrong_shape_and_nan_are_reported(square, capsys):
    assert not exercises.check(square, lambda x: (x**2)[:, None])
    assert "expected shape (2,), got shape (2, 1)" in capsys.readouterr().out
    assert not exercises.check(square, lambda x: x**2 * np.nan)
    assert "NaN or inf" in capsys.readouterr().out


def test_torch_and_float32_answers_are_accepted(square):
    assert exercises.check(square, lambda x: torch.from_numpy(x) ** 2)
    assert exercises.check(square, lambda x: x.astype(np.float32) ** 2)


# --- the reader's code cannot break the notebook ---------------------------------------


def test_an_exception_is_reported_not_raised(square, capsys):
    def buggy(x):
        raise IndexError("index 7 is out of bounds")

    assert not exercises.check(square, buggy)
    assert "your code raised IndexError: index 7 is out of bounds" in capsys.readouterr().out


def test_a_stub_is_reported_as_not_implemented_with_no_inputs(square, capsys):
    def stub(x):
        raise NotImplementedError

    assert not exercises.check(square, stub)
    assert capsys.readouterr().out == (
        "✗ test-square: not implemented yet (your function raised NotImplementedError).\n"
    )


def test_an_endless_loop_is_stopped_with_a_clear_message(square, capsys):
    def forever(x):
        while True:
            pass

    start = time.monotonic()
    assert not exercises.check(square, forever, time_limit=0.3)
    assert time.monotonic() - start < 5
    assert "did not finish within 0.3 s" in capsys.readouterr().out


def test_an_endless_loop_that_catches_exception_is_still_stopped(square, capsys):
    def stubborn(x):
        while True:
            try:
                time.sleep(0.01)
            except Exception:
                pass

    assert not exercises.check(square, stubborn, time_limit=0.2)
    assert "did not finish" in capsys.readouterr().out


def test_time_limit_also_works_outside_the_main_thread(square):
    box = {}

    def run():
        box["verdict"] = exercises.check(square, lambda x: time.sleep(5), time_limit=0.2)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(3)
    assert not worker.is_alive() and not box["verdict"]
    assert "did not finish" in box["verdict"].message


def test_an_input_modified_in_place_is_reported(square, capsys):
    def squares_in_place(x):
        x **= 2
        return x

    assert not exercises.check(square, squares_in_place)
    assert "modified its argument x in place" in capsys.readouterr().out
    # not a plain function (no parameter names read without running its code): in words
    assert not exercises.check(square, functools.partial(squares_in_place))
    assert "modified its first argument in place" in capsys.readouterr().out


def test_global_random_states_are_left_untouched(square):
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    expected = (torch.rand(1), np.random.rand(), random.random())
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)

    def noisy(x):
        torch.rand(100), np.random.rand(100), random.random()
        return x**2

    exercises.check(square, noisy)
    assert (torch.rand(1), np.random.rand(), random.random()) == expected


def test_a_module_input_is_described_by_its_class_not_its_repr():
    text = comparing._describe(torch.nn.Sequential(torch.nn.Linear(3, 4)))
    assert text == "a Sequential module"


# --- value exercises ----------------------------------------------------------------------


def test_value_exercise_accepts_the_value_or_a_function_returning_it(value, capsys):
    assert exercises.check(value, 42)
    assert exercises.check(value, lambda: 42)
    assert capsys.readouterr().out.startswith("✓ test-value: correct.")


def test_value_exercise_rejects_and_names_a_known_wrong_value(value, capsys):
    assert not exercises.check(value, 41)
    out = capsys.readouterr().out
    assert out == "✗ test-value: 41 is not right (too small). This looks like: off by one.\n"
    assert "42" not in out  # a value exercise never gives its answer away


def test_value_exercise_rejects_a_non_integer_and_none(value, capsys):
    assert not exercises.check(value, 42.0)
    assert not exercises.check(value, None)
    out = capsys.readouterr().out
    assert "expected an integer, got 42.0" in out and "no answer yet (the value is None)" in out


def test_value_exercise_reports_a_raising_function(value, capsys):
    assert not exercises.check(value, lambda: 1 / 0)
    assert "raised ZeroDivisionError" in capsys.readouterr().out


def test_function_exercise_rejects_a_value(square, capsys):
    assert not exercises.check(square, 3.0)
    assert "expected a function, got 3.0" in capsys.readouterr().out


# --- the caller's own mistakes raise --------------------------------------------------


def test_unknown_name_raises_listing_the_exercises(square):
    with pytest.raises(ValueError, match="unknown exercise 'no-such'") as info:
        exercises.check("no-such", lambda x: x)
    assert square in str(info.value) and "binary-encoding" in str(info.value)


@pytest.mark.parametrize("kwargs", [{"seed": -1}, {"seed": 1.5}, {"time_limit": 0}])
def test_bad_seed_or_time_limit_raises(square, kwargs):
    with pytest.raises(ValueError, match="seed|time_limit"):
        exercises.check(square, lambda x: x**2, **kwargs)


def test_registering_twice_or_without_a_name_raises(square):
    with pytest.raises(ValueError, match="already registered"):
        exercises.exercise(square, "dup")(lambda: 0)
    with pytest.raises(ValueError, match="non-empty string"):
        exercises.exercise("", "empty")(lambda: 0)


def test_task_returns_the_task_sentence(square):
    assert exercises.task(square) == "Square every entry of x."


# --- references against independent statements -----------------------------------------


def test_param_count_reference_agrees_with_the_package_model():
    from mini_transformer.model import TransformerConfig, TransformerLM

    for positional, bias in (("learned", True), ("rope", False), ("sinusoidal", True)):
        cfg = TransformerConfig(
            vocab_size=11,
            block_size=16,
            d_model=16,
            n_heads=2,
            n_layers=2,
            d_ff=48,
            positional=positional,
            bias=bias,
        )
        expected = ch6_training._count(11, 16, 16, 2, 48, positional, bias)
        assert TransformerLM(cfg).num_parameters() == expected


def test_ln_jacobian_reference_agrees_with_autograd():
    x = torch.tensor([0.3, -1.2, 2.0, 0.7], dtype=torch.float64)

    def ln(v):
        return (v - v.mean()) / torch.sqrt(v.var(unbiased=False) + 0.1)

    auto = torch.autograd.functional.jacobian(ln, x)
    assert torch.allclose(ch5_layernorm._ln_jac(x, 0.1), auto, atol=1e-8)


def test_first_return_is_333_because_333_radians_is_just_short_of_53_turns():
    assert -0.01 < 333 - 53 * 2 * np.pi < 0
    assert checking._get("first-return").reference() == 333


def test_a_function_exercise_without_cases_is_refused():
    with pytest.raises(ValueError, match="would check nothing"):
        exercises.exercise("test-empty", "nothing", inputs=lambda rng: (), n_random=0)(lambda: 0)
    assert "test-empty" not in exercises.available()


@pytest.fixture
def prediction():
    """A checked prediction (2 + 2) with a hint and an explanation, no wrong tries yet."""
    name = "test-prediction"
    checking.exercise(
        name, "predict 2 + 2", mistakes={"off by one": 5}, hint="count on your fingers",
        explanation="two and two make four",
    )(lambda: 4)  # fmt: skip
    checking._WRONG.pop(name, None)
    yield name
    checking._REGISTRY.pop(name)


def test_a_first_wrong_prediction_gets_a_hint_and_another_try(prediction, capsys):
    assert not exercises.check(prediction, 5)
    out = capsys.readouterr().out
    assert "This looks like: off by one." in out and "Hint: count on your fingers" in out
    assert "Why:" not in out and "four" not in out and "why=True" in out
    assert not exercises.check(prediction, 5)  # the same answer again: still a first try
    assert "Hint:" in capsys.readouterr().out
    assert not exercises.check(prediction, 3)  # a second, different wrong answer: the why
    out = capsys.readouterr().out
    assert "Why: two and two make four" in out and "Hint:" not in out


def test_the_explanation_on_request_and_after_a_right_answer(prediction, capsys):
    assert not exercises.check(prediction, 5, why=True)
    assert "Why: two and two make four" in capsys.readouterr().out
    checking._WRONG.pop(prediction)
    assert exercises.check(prediction, 4)
    assert "Why: two and two make four" in capsys.readouterr().out


def test_no_explanation_and_no_try_used_without_a_prediction_of_the_right_kind(prediction, capsys):
    assert not exercises.check(prediction, None)
    assert not exercises.check(prediction, "four")  # the wrong kind: rejected, no spoiler
    out = capsys.readouterr().out
    assert "Why:" not in out and "Hint:" not in out and prediction not in checking._WRONG


def test_hint_and_explanation_come_together_for_value_exercises_only():
    with pytest.raises(ValueError, match="explanation and hint"):
        checking.exercise("test-bad", "x", explanation="no")
    with pytest.raises(ValueError, match="explanation and hint"):
        checking.exercise("test-bad", "x", inputs=lambda rng: (1,), explanation="a", hint="b")
    assert "test-bad" not in exercises.available()


# --- messages name the actual difference (issue 25) --------------------------------------


@pytest.fixture
def mask():
    """A bool-mask exercise whose first edge case (T = 3) tells every mistake apart."""
    name = "test-mask"
    exercises.exercise(
        name,
        "f(T) -> the (T, T) bool causal mask.",
        inputs=lambda rng: (int(rng.integers(2, 7)),),
        edge_cases={"T = 3": (3,), "T = 1": (1,)},
        mistakes={
            "the transpose": lambda T: torch.ones(T, T, dtype=torch.bool).triu(),
            "a float mask": lambda T: torch.ones(T, T).tril(),
        },
        compare=comparing.close(same_dtype=True),
    )(lambda T: torch.ones(T, T, dtype=torch.bool).tril())
    yield name
    checking._REGISTRY.pop(name)


def test_a_dtype_only_difference_is_a_dtype_error_and_names_no_value_mistake(mask, capsys):
    assert not exercises.check(mask, lambda T: torch.ones(T, T).tril())
    out = capsys.readouterr().out
    assert "expected a bool tensor, got float32: only the dtype is wrong, the values agree" in out
    assert "This looks like: a float mask." in out and "transpose" not in out


def test_a_mistake_that_agrees_with_the_reference_on_the_case_is_not_named(mask, capsys):
    """At T = 1 the transpose *is* the right mask: a float answer must not be told it
    has the transpose (the learner review's misleading message)."""
    checking._REGISTRY[mask] = dataclasses.replace(
        checking._REGISTRY[mask],
        edge_cases={"T = 1": (1,)},
        mistakes={"the transpose": (lambda T: torch.ones(T, T, dtype=torch.bool).triu())},
    )
    assert not exercises.check(mask, lambda T: torch.ones(T, T).tril())
    out = capsys.readouterr().out
    assert "only the dtype is wrong" in out and "This looks like" not in out


def test_a_wrong_dtype_with_wrong_values_says_both_and_names_the_value_mistake(mask, capsys):
    assert not exercises.check(mask, lambda T: torch.ones(T, T).triu())
    out = capsys.readouterr().out
    assert "expected a bool tensor, got float32 (the dtype is wrong), and the values differ" in out
    assert "Apart from the dtype, this looks like: the transpose." in out


def test_a_shape_difference_comes_before_values_and_mistakes(mask, capsys):
    assert not exercises.check(mask, lambda T: torch.ones(T, T + 1).tril())
    out = capsys.readouterr().out
    assert "expected shape (3, 3), got shape (3, 4)" in out and "dtype differs too" in out
    assert "This looks like" not in out and "expected True" not in out


def test_the_verdict_carries_the_failing_case_and_the_message_says_how_to_replay(square, capsys):
    def cube(x):
        return x**3

    verdict = exercises.check(square, cube, seed=5)
    out = capsys.readouterr().out
    assert verdict.case == "edge case 'a zero'" and verdict.seed == 5
    np.testing.assert_array_equal(verdict.inputs[0], [0.0, -2.0])
    np.testing.assert_array_equal(verdict.expected, [0.0, 4.0])
    np.testing.assert_array_equal(verdict.got, [0.0, -8.0])
    assert "exercises.check('test-square', cube, seed=5)" in out and "v.inputs" in out
    assert "  expected: [0., 4.]\n  got:      [ 0., -8.]\n" in out  # small arrays in full


def test_a_random_case_is_replayed_with_the_same_inputs(square, capsys):
    def right_only_for_short_inputs(x):
        return x**2 if len(x) < 3 else x

    first = exercises.check(square, right_only_for_short_inputs)
    again = exercises.check(square, right_only_for_short_inputs, seed=first.seed)
    assert first.case.startswith("random case") and first.case == again.case
    np.testing.assert_array_equal(first.inputs[0], again.inputs[0])
    assert first.message == again.message


def test_sixteen_entries_are_shown_in_full_more_by_shape_and_first_difference():
    assert comparing._describe(torch.arange(16.0)).startswith("tensor float32 [ 0.,  1.,")
    text = comparing._describe(np.linspace(-1, 2, 18).reshape(2, 9))
    assert text == "an array of shape (2, 9) (float64, from -1 to 2)"
    msg = comparing.close()(np.zeros((2, 64)), np.eye(2, 64))
    assert msg == "expected 0 at index (0, 0), got 1 (2 of 128 entries differ)"


@pytest.fixture
def softmax():
    """Softmax over the last axis of a square matrix, random cases only."""
    name = "test-softmax"
    exercises.exercise(
        name,
        "softmax over the last axis",
        inputs=lambda rng: (torch.from_numpy(rng.normal(size=(4, 4))),),
        n_random=3,
    )(lambda s: s.softmax(-1))
    yield name
    checking._REGISTRY.pop(name)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (lambda s: s.softmax(0), "sums to 1 along axis 0, the expected one along axis 1"),
        (lambda s: s.softmax(-1).T, "the expected one transposed"),
        (lambda s: 2 * s.softmax(-1), "2 times the expected one (off by a constant factor)"),
        (lambda s: -s.softmax(-1), "the sign flipped"),
        (lambda s: s.softmax(-1) + 0.5, "plus 0.5 (off by a constant)"),
        (lambda s: s.softmax(-1).flip(-1), "reversed along axis 1"),
        (lambda s: s.softmax(-1).log().exp() / 0 * 0, "NaN at index (0, 0) where the expected"),
    ],
    ids=["wrong axis", "transposed", "factor", "sign", "offset", "reversed", "NaN"],
)
def test_an_unnamed_mistake_gets_a_generic_diagnosis(softmax, capsys, answer, words):
    assert not exercises.check(softmax, answer)
    assert words in capsys.readouterr().out


def test_no_diagnosis_when_none_holds(softmax, capsys):
    assert not exercises.check(softmax, lambda s: s.exp())
    out = capsys.readouterr().out.splitlines()[0]
    assert out.endswith("entries differ).")


def test_close_handles_float16_inf_nan_strings_and_meta_tensors():
    compare = comparing.close()
    x = torch.tensor([0.1, 0.7, 3.0])
    assert compare(x.half().exp(), x.exp().half()) is None  # float16 resolution
    assert compare(torch.tensor([0.5, 1.0]).half(), torch.tensor([0.5, 1.002]).half()) is None
    msg = compare(torch.tensor([1e4, 1.0]).half(), torch.tensor([float("inf"), 1.0]).half())
    assert msg == "your answer has inf at index (0,) where the expected value is finite (10000)" + (
        "; 1 of 2 entries are NaN or inf"
    )
    assert "float16, which keeps about 3 significant digits" in compare(x.exp(), x.exp().half())
    pos = np.arange(0, 4000, 397.0)  # angles rounded to float32 miss a float64 answer by ~1e-4
    got32 = torch.sin(torch.tensor(pos, dtype=torch.float32) * 0.9)
    assert "float32, which keeps about 7 significant digits" in compare(np.sin(pos * 0.9), got32)
    assert compare(np.sin(pos * 0.9), got32.double()) is not None  # a float64 answer: no note
    assert "float32, which" not in compare(np.sin(pos * 0.9), got32.double())
    assert compare(np.eye(2), [[1.0, 0.0], [0.0, 1.0]]) is None  # a nested list is an array
    assert "expected an array" in compare(np.eye(2), [[1.0, 0.0], [0.0]])  # a ragged one is not
    wrong32 = torch.tensor(np.triu(np.ones((3, 3))), dtype=torch.float32)  # a wrong answer:
    assert "significant digits" not in compare(np.ones((3, 3)), wrong32)  # no precision note
    assert compare(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0])) is None
    assert compare(torch.tensor([-float("inf")]), torch.tensor([-float("inf")])) is None
    assert "got -inf" in compare(torch.tensor([float("inf")]), torch.tensor([-float("inf")]))
    assert "an array of strings" in compare(np.zeros(2), np.array(["0", "0"]))
    assert "a meta tensor" in compare(np.zeros(2), torch.zeros(2, device="meta"))
    assert "got None (does your function return" in compare(np.zeros(2), None)


# --- the reader's code cannot break the notebook, whatever it does (issue 26) ----------------


@pytest.fixture(params=["child process", "in-process"])
def mode(request, monkeypatch):
    """Both ways of running the reader's code: a forked child (Linux), the fallback."""
    if request.param == "child process" and not checking.RUN_IN_CHILD:
        pytest.skip("no fork on this platform")
    monkeypatch.setattr(checking, "RUN_IN_CHILD", request.param == "child process")
    return request.param


child_only = pytest.mark.skipif(not checking.RUN_IN_CHILD, reason="needs fork")


def _timed(name, answer, limit):
    start = time.monotonic()
    verdict = exercises.check(name, answer, time_limit=limit)
    return verdict, time.monotonic() - start


@child_only
def test_a_loop_with_a_bare_except_is_stopped_within_the_limit_plus_a_second(square):
    def swallows_everything(x):
        while True:
            try:
                time.sleep(0.01)
            except:  # noqa: E722  (the point of the test)
                pass

    verdict, took = _timed(square, swallows_everything, 0.5)
    assert not verdict and "did not finish within 0.5 s" in verdict.message
    assert took < 0.5 + 1.0 + 1.0  # the limit, the grace second, slack for a loaded machine


@child_only
def test_a_long_c_level_call_is_stopped(square):
    verdict, took = _timed(square, lambda x: sum(range(10**11)), 0.5)
    assert not verdict and "did not finish" in verdict.message and took < 2.5
    assert verdict.case == "edge case 'a zero'"  # the case that was running


@child_only
def test_an_answer_that_ends_the_process_is_reported(square, capsys):
    assert not exercises.check(square, lambda x: os._exit(3))
    assert "exit status 3" in capsys.readouterr().out


@child_only
def test_what_the_answer_prints_is_shown_before_the_verdict(square, capsys):
    def chatty(x):
        print("debugging", len(x))
        return x**2

    assert exercises.check(square, chatty)
    out = capsys.readouterr().out
    assert out.startswith("debugging 2\n") and "\n✓ test-square" in out


class _NeverShown:
    def __repr__(self):
        while True:
            pass

    __str__ = __repr__


class _Unprintable(Exception):
    def __str__(self):
        while True:
            pass


def test_an_answer_whose_repr_never_returns_is_described_by_its_type(square, value, mode):
    verdict, took = _timed(square, lambda x: _NeverShown(), 2.0)
    assert not verdict and "got a _NeverShown object" in verdict.message and took < 4
    verdict, took = _timed(value, _NeverShown(), 2.0)
    assert not verdict and "_NeverShown object" in verdict.message and took < 4


def test_an_exception_whose_message_never_returns_is_reported(square, mode):
    def raises(x):
        raise _Unprintable

    verdict, took = _timed(square, raises, 2.0)
    assert not verdict and "raised _Unprintable: (its message could not be shown)" in (
        verdict.message
    )
    assert took < 5


@pytest.mark.parametrize(
    "answer",
    [lambda x: np.array(["a"] * len(x)), lambda x: torch.zeros(len(x), device="meta")],
    ids=["strings", "meta"],
)
def test_answers_that_are_not_numbers_are_reported_not_raised(square, mode, answer, capsys):
    assert not exercises.check(square, answer)
    assert "✗ test-square: edge case 'a zero'" in capsys.readouterr().out


def _global_state():
    import warnings

    return (
        torch.get_default_dtype(),
        torch.is_grad_enabled(),
        np.geterr(),
        list(warnings.filters),
        torch.get_num_threads(),
        torch.get_default_device(),
    )


def test_global_state_set_by_the_answer_does_not_survive(square, mode):
    import warnings

    before = _global_state()

    def meddles(x):
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        np.seterr(all="raise")
        warnings.simplefilter("error")
        torch.set_num_threads(1)
        torch.set_default_device("meta")
        return x**2

    assert exercises.check(square, meddles)
    assert _global_state() == before


def test_ctrl_c_still_interrupts_a_check(square, mode):
    def forever(x):
        while True:
            pass

    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        exercises.check(square, forever, time_limit=30)
    timer.join()
    # Interrupted long before the 30 s limit. The bound is loose on purpose: on a loaded machine
    # (load average 15) the fork, the signal and the child's kill took over 5 s.
    assert time.monotonic() - start < 15


def test_diagnoses_of_shifted_and_reshaped_results():
    e = np.arange(1.0, 6.0) ** 2
    assert comparing._diagnose(e, np.r_[0.0, e[:-1]]) == (
        "your result is the expected one shifted by one along axis 0"
    )
    assert "transposed" in comparing.close()(np.zeros((2, 3)), np.zeros((3, 2)))
    assert "keepdim" in comparing.close()(np.zeros((2, 1)), np.zeros(2))
    assert comparing._diagnose(e, e + np.arange(5.0) ** 3) is None


def test_a_failed_fork_falls_back_to_checking_in_process(square, monkeypatch, capsys):
    def no_fork():
        raise OSError("no memory")

    monkeypatch.setattr(checking, "RUN_IN_CHILD", True)
    monkeypatch.setattr(os, "fork", no_fork)
    assert exercises.check(square, lambda x: x**2)
    assert not exercises.check(square, lambda x: 2 * x)
    assert "doubled instead of squared" in capsys.readouterr().out


@child_only
def test_a_huge_result_comes_back_as_its_description_and_input_is_refused(square, capsys):
    verdict = exercises.check(square, lambda x: np.zeros(2_000_001))
    assert isinstance(verdict.got, str) and verdict.got.startswith("an array of shape (2000001,)")
    assert not exercises.check(square, lambda x: float(input("x? ")))
    assert "input() is not available" in capsys.readouterr().out


# --- the time limit is the reader's, results are plain data, nothing outlives (issues 34, 36) --


@pytest.fixture
def slow_reference():
    """A function exercise whose reference takes 0.3 s a case (3 cases: 0.9 s in all)."""
    name = "test-slow-reference"
    exercises.exercise(name, "x + 1", inputs=lambda rng: (float(rng.random()),), n_random=3)(
        lambda x: time.sleep(0.3) or x + 1
    )
    yield name
    checking._REGISTRY.pop(name)


def test_the_time_limit_counts_the_readers_calls_only(slow_reference, mode):
    verdict = exercises.check(slow_reference, lambda x: x + 1, time_limit=0.5)
    assert verdict, verdict.message  # the checker's 0.9 s are not the reader's
    verdict = exercises.check(slow_reference, lambda x: time.sleep(0.3) or x + 1, time_limit=0.5)
    assert not verdict and "did not finish within 0.5 s in all" in verdict.message


@child_only
def test_the_checkers_own_slowness_is_never_blamed_on_the_reader(slow_reference, monkeypatch):
    monkeypatch.setattr(running, "_OWN_WORK", 0.1)
    verdict = exercises.check(slow_reference, lambda x: x + 1)
    assert not verdict and "not your code" in verdict.message
    assert "your code did not" not in verdict.message


def test_close_values_get_more_digits_and_their_relative_difference():
    msg = comparing.close(rtol=1e-9, atol=0.0)(0.000262688895, float(np.float32(0.000262688895)))
    assert msg == (
        "expected 0.000262688895, got 0.000262688904, a relative difference of 3.3e-08 "
        "(the tolerance is 1e-09)"
    )


class _Lying(int):  # issue 36: an int whose __int__ and __eq__ lie
    def __int__(self):
        return 4

    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def test_answers_are_compared_as_their_plain_values_not_their_subclasses(value, mode, capsys):
    assert not exercises.check(value, _Lying(41))
    assert "41 is not right" in capsys.readouterr().out
    assert not exercises.check(value, lambda: _Lying(7))
    assert exercises.check(value, _Lying(42))  # its value is right: accepted
    assert checking._plain(np.ma.masked_array([1.0, 2.0])).__class__ is np.ndarray


@pytest.fixture
def in_a_list():
    """A function exercise taking a list of tensors (as grad-clip does)."""
    name = "test-list"
    exercises.exercise(
        name, "sum of a list", inputs=lambda rng: ([torch.ones(2), {"t": torch.zeros(2)}],)
    )(lambda xs: xs[0].sum())
    yield name
    checking._REGISTRY.pop(name)


def test_an_input_changed_in_place_inside_a_list_or_dict_is_reported(in_a_list, mode, capsys):
    assert exercises.check(in_a_list, lambda xs: xs[0].sum())
    assert not exercises.check(in_a_list, lambda xs: xs[0].mul_(2).sum() / 2)
    assert not exercises.check(in_a_list, lambda xs: (xs[1]["t"].add_(1), xs[0].sum())[1])
    assert capsys.readouterr().out.count("modified its argument xs in place") == 2


def _send_to_the_parent(data: bytes) -> None:
    """What an answer can do in the child: find the result pipe and write its own bytes."""
    import multiprocessing.connection as mpc
    import sys

    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, mpc.Connection) and value.writable:
                value.send_bytes(data)
                return
        frame = frame.f_back
    raise AssertionError("no pipe found")


class _Payload:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):  # unpickled with pickle, this would write the file
        return (open, (self.path, "w"))


@child_only
def test_the_parent_never_unpickles_what_the_answer_sends(square, tmp_path):
    import io
    import pickle

    marker = tmp_path / "unpickled"
    forged = pickle.dumps(("done", _Payload(str(marker))))
    verdict = exercises.check(square, lambda x: _send_to_the_parent(forged) or x**2)
    assert not marker.exists() and not verdict
    assert "could not be read" in verdict.message
    buffer = io.BytesIO()  # well-formed plain data of the wrong kinds is refused too
    torch.save(("done", {"passed": "yes"}), buffer)
    verdict = exercises.check(square, lambda x: _send_to_the_parent(buffer.getvalue()) or x**2)
    assert not verdict and "could not read its result" in verdict.message


@child_only
def test_no_process_the_answer_starts_outlives_the_check(square, tmp_path):
    marker = tmp_path / "outlived"

    def forks(x):
        if os.fork() == 0:  # a grandchild, in the checking child's process group
            time.sleep(1.0)
            marker.write_text("still running")
            os._exit(0)
        return x**2

    assert exercises.check(square, forks)
    time.sleep(2.0)
    assert not marker.exists()
