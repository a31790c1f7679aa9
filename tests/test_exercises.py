"""Tests of the exercise machinery (`exercise` / `check` / `Verdict`).

The mechanism is tested on throw-away exercises registered by fixtures (removed afterwards,
so the registry is left as the chapters define it). The chapters' checkers are tested
against right and wrong answers in tests/test_exercises_answers.py.
"""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest
import torch

from mini_transformer import exercises


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
    exercises._REGISTRY.pop(name)


@pytest.fixture
def value():
    """A value exercise: the answer is the integer 42."""
    name = "test-value"
    exercises.exercise(
        name, "The answer.", mistakes={"off by one": 41}, compare=exercises.exact_int
    )(lambda: 42)
    yield name
    exercises._REGISTRY.pop(name)


# --- verdicts -------------------------------------------------------------------------


def test_right_answer_passes_with_a_check_mark(square, capsys):
    verdict = exercises.check(square, lambda x: x * x)
    assert verdict and verdict.passed
    assert capsys.readouterr().out == "✓ test-square: all 1 edge cases and 5 random cases agree.\n"


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
    seen = []

    def recorder(x):
        seen.append(x.tobytes())
        return x**2

    exercises.check(square, recorder)
    first = set(seen[1:])  # after the fixed edge case
    seen.clear()
    exercises.check(square, recorder)
    assert first.isdisjoint(seen[1:])


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
    assert "modified its argument 1 in place" in capsys.readouterr().out


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
    text = exercises._describe(torch.nn.Sequential(torch.nn.Linear(3, 4)))
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


def test_describe_returns_the_task(square):
    assert exercises.describe(square) == "Square every entry of x."


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
        expected = exercises._param_count(11, 16, 16, 2, 48, positional, bias)
        assert TransformerLM(cfg).num_parameters() == expected


def test_ln_jacobian_reference_agrees_with_autograd():
    x = torch.tensor([0.3, -1.2, 2.0, 0.7], dtype=torch.float64)

    def ln(v):
        return (v - v.mean()) / torch.sqrt(v.var(unbiased=False) + 0.1)

    auto = torch.autograd.functional.jacobian(ln, x)
    assert torch.allclose(exercises._ln_jacobian(x, 0.1), auto, atol=1e-8)


def test_first_return_is_333_because_333_radians_is_just_short_of_53_turns():
    assert -0.01 < 333 - 53 * 2 * np.pi < 0
    assert exercises._first_return_answer() == 333


def test_a_function_exercise_without_cases_is_refused():
    with pytest.raises(ValueError, match="would check nothing"):
        exercises.exercise("test-empty", "nothing", inputs=lambda rng: (), n_random=0)(lambda: 0)
    assert "test-empty" not in exercises.available()


def test_a_checked_prediction_explains_the_right_answer_after_the_verdict(capsys):
    from mini_transformer.exercises import checking

    name = "test-prediction-explained"
    checking._REGISTRY.pop(name, None)
    checking.exercise(name, "predict 2 + 2", explanation="two and two make four")(lambda: 4)
    try:
        assert not exercises.check(name, 5)
        wrong = capsys.readouterr().out
        assert exercises.check(name, 4)
        right = capsys.readouterr().out
        assert "Why: two and two make four" in wrong and "Why: two and two make four" in right
        assert not exercises.check(name, None)
        assert "Why:" not in capsys.readouterr().out  # no prediction committed yet
        with pytest.raises(ValueError, match="explanation"):
            checking.exercise("test-bad", "x", inputs=lambda rng: (1,), explanation="no")
    finally:
        checking._REGISTRY.pop(name, None)
