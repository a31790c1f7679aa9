"""Tests of the exercise checker (`register` / `check`) and of the chapters' checkers.

The mechanism is tested on throw-away exercises registered by a fixture (and removed
afterwards, so the global registry is left as the chapters define it). Chapter checkers
are tested by feeding them an answer written here independently and a typical wrong one.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mini_transformer import exercises


@pytest.fixture
def square_exercise():
    """A function exercise: return x**2 elementwise for a random float vector x."""
    name = "test-square"
    exercises.register(
        name,
        lambda x: x**2,
        lambda rng: (rng.standard_normal(int(rng.integers(2, 6))),),
        "Square every entry of x.",
        n_cases=5,
    )
    yield name
    exercises._REGISTRY.pop(name)


@pytest.fixture
def value_exercise():
    """A value exercise: the answer is the number 42."""
    name = "test-value"
    exercises.register(name, lambda: 42, None, "The answer.")
    yield name
    exercises._REGISTRY.pop(name)


# --- the mechanism ------------------------------------------------------------------


def test_correct_answer_passes_and_prints_a_check_mark(square_exercise, capsys):
    assert exercises.check(square_exercise, lambda x: x * x) is True
    out = capsys.readouterr().out
    assert out.startswith("✓ test-square")
    assert "all 5 random cases" in out


def test_wrong_answer_fails_and_prints_the_first_mismatch(square_exercise, capsys):
    assert exercises.check(square_exercise, lambda x: 2 * x) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ test-square: case 1")
    assert "first mismatch at index (0,)" in out
    assert "expected" in out and "got" in out


def test_mismatch_message_shows_the_expected_and_the_given_value(square_exercise, capsys):
    def off_by_one_at_index_1(x):
        y = x**2
        y[1] += 1.0
        return y

    exercises.check(square_exercise, off_by_one_at_index_1)
    out = capsys.readouterr().out
    assert "first mismatch at index (1,)" in out
    assert "(1 of " in out  # exactly one entry differs


def test_wrong_shape_is_reported(square_exercise, capsys):
    assert exercises.check(square_exercise, lambda x: (x**2)[:, None]) is False
    assert "expected shape" in capsys.readouterr().out


def test_nan_in_answer_is_reported(square_exercise, capsys):
    assert exercises.check(square_exercise, lambda x: x**2 * np.nan) is False
    assert "NaN or inf" in capsys.readouterr().out


def test_raising_answer_is_reported_not_raised(square_exercise, capsys):
    def buggy(x):
        raise IndexError("index 7 is out of bounds")

    assert exercises.check(square_exercise, buggy) is False  # no exception escapes
    out = capsys.readouterr().out
    assert "raised IndexError: index 7 is out of bounds" in out


def test_not_implemented_stub_is_reported_as_not_implemented(square_exercise, capsys):
    def stub(x):
        raise NotImplementedError

    assert exercises.check(square_exercise, stub) is False
    assert "not implemented yet" in capsys.readouterr().out


def test_torch_tensor_answer_is_accepted(square_exercise, capsys):
    assert exercises.check(square_exercise, lambda x: torch.from_numpy(x) ** 2) is True


def test_float32_answer_is_accepted_within_float32_tolerance(square_exercise):
    assert exercises.check(square_exercise, lambda x: (x.astype(np.float32)) ** 2) is True


def test_value_exercise_accepts_the_right_value(value_exercise, capsys):
    assert exercises.check(value_exercise, 42) is True
    assert capsys.readouterr().out.startswith("✓ test-value: correct")


def test_value_exercise_rejects_a_wrong_value(value_exercise, capsys):
    assert exercises.check(value_exercise, 41) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ test-value")
    assert "expected" in out and "42" in out and "41" in out


def test_value_exercise_accepts_a_function_returning_the_value(value_exercise):
    assert exercises.check(value_exercise, lambda: 42) is True


def test_function_exercise_rejects_a_non_callable_answer(square_exercise, capsys):
    assert exercises.check(square_exercise, 3.0) is False
    assert "expected a function" in capsys.readouterr().out


def test_unknown_name_raises_value_error_listing_available_names(square_exercise):
    with pytest.raises(ValueError, match="unknown exercise 'no-such-exercise'") as info:
        exercises.check("no-such-exercise", lambda x: x)
    assert square_exercise in str(info.value)
    assert "normalized-position" in str(info.value)


def test_verdict_is_the_same_on_every_run(square_exercise, capsys):
    def right_only_for_short_inputs(x):
        return x**2 if len(x) < 4 else x

    first = exercises.check(square_exercise, right_only_for_short_inputs)
    out1 = capsys.readouterr().out
    second = exercises.check(square_exercise, right_only_for_short_inputs)
    out2 = capsys.readouterr().out
    assert first == second and out1 == out2


def test_register_rejects_a_duplicate_name(square_exercise):
    with pytest.raises(ValueError, match="already registered"):
        exercises.register(square_exercise, lambda: 0, None, "dup")


def test_register_rejects_an_empty_name():
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        exercises.register("", lambda: 0, None, "empty")


def test_register_rejects_a_non_positive_n_cases():
    with pytest.raises(ValueError, match="n_cases must be a positive integer"):
        exercises.register("test-bad-n-cases", lambda: 0, None, "bad", n_cases=0)
    assert "test-bad-n-cases" not in exercises.available()


def test_describe_returns_the_registered_sentence(square_exercise):
    assert exercises.describe(square_exercise) == "Square every entry of x."


# --- chapter 1 checkers -------------------------------------------------------------


def _bits_loop(n, n_bits):
    out = np.zeros((n, n_bits))
    for pos in range(n):
        for k in range(n_bits):
            out[pos, k] = (pos // 2**k) % 2
    return out


def _distances_loop(pe):
    return np.array([np.sqrt(np.sum((pe[p + 1] - pe[p]) ** 2)) for p in range(len(pe) - 1)])


CHAPTER_1 = {
    # name: (a right answer written independently, a typical wrong answer)
    "normalized-position": (
        lambda n: np.array([[p / n] for p in range(n)]),
        lambda n: np.linspace(0.0, 1.0, n)[:, None],  # pos / (N - 1)
    ),
    "binary-encoding": (
        _bits_loop,
        lambda n, n_bits: _bits_loop(n, n_bits)[:, ::-1],  # most significant bit first
    ),
    "neighbour-distances": (
        _distances_loop,
        lambda pe: _distances_loop(pe) ** 2,  # squared distances
    ),
    "first-return": (333, 44),  # 44 is the first return within 0.05
}


@pytest.mark.parametrize("name", sorted(CHAPTER_1))
def test_chapter_1_checker_accepts_a_right_answer(name, capsys):
    assert exercises.check(name, CHAPTER_1[name][0]) is True


@pytest.mark.parametrize("name", sorted(CHAPTER_1))
def test_chapter_1_checker_rejects_a_wrong_answer(name, capsys):
    assert exercises.check(name, CHAPTER_1[name][1]) is False
    assert capsys.readouterr().out.startswith(f"✗ {name}")


def test_first_return_rejects_a_non_integer_answer(capsys):
    assert exercises.check("first-return", 333.5) is False
    assert "expected an integer position" in capsys.readouterr().out


def test_first_return_is_333_because_333_radians_is_just_short_of_53_turns():
    assert -0.01 < 333 - 53 * 2 * np.pi < 0
    closer = [p for p in range(1, 333) if np.hypot(np.sin(p), np.cos(p) - 1) < 0.01]
    assert closer == []
    assert exercises._ch1_first_return() == 333
