"""The machinery of the exercises: registry, comparisons, running the reader's code, check.

See :mod:`mini_transformer.exercises` for how a verdict is reached. Each chapter's
module registers its exercises with :func:`exercise`; :func:`check` runs one.
"""

from __future__ import annotations

import copy
import random
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["Exercise", "Verdict", "exercise", "check", "available", "describe"]

# --------------------------------------------------------------------------------------
# The machinery
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exercise:
    """One exercise.

    Attributes:
        name: what readers pass to :func:`check`, e.g. ``"binary-encoding"``.
        task: one sentence saying what the answer must compute.
        reference: the answer. For a function exercise it takes the same arguments as the
            reader's function; for a value exercise it takes none.
        inputs: ``rng -> tuple`` of arguments for one random case; ``None`` for a value
            exercise.
        edge_cases: ``{description: arguments}`` tried before the random cases.
        mistakes: ``{name of the mistake: wrong function (or wrong value)}``; when the
            reader's output equals one of them the message names the mistake.
        compare: ``(expected, got) -> None | str`` (``None`` when they agree).
        n_random: how many random cases each call tries.
        explanation: for a *checked prediction* (a value exercise the reader answers before
            running anything): why the right answer is right, printed after the verdict,
            right or wrong, since the prediction is already committed.
    """

    name: str
    task: str
    reference: Callable[..., Any]
    inputs: Callable[[np.random.Generator], tuple] | None
    edge_cases: dict[str, tuple] = field(default_factory=dict)
    mistakes: dict[str, Any] = field(default_factory=dict)
    compare: Callable[[Any, Any], str | None] | None = None
    n_random: int = 10
    explanation: str | None = None


@dataclass(frozen=True)
class Verdict:
    """What :func:`check` found: true when the answer passed.

    ``seed`` replays the random cases (``check(name, answer, seed=verdict.seed)``).
    Jupyter does not echo a verdict (the message has already been printed).
    """

    name: str
    passed: bool
    message: str
    seed: int | None = None

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:  # printed by check already; show nothing more
        pass


_REGISTRY: dict[str, Exercise] = {}


def exercise(
    name: str,
    task: str,
    *,
    inputs: Callable[[np.random.Generator], tuple] | None = None,
    edge_cases: dict[str, tuple] | None = None,
    mistakes: dict[str, Any] | None = None,
    compare: Callable[[Any, Any], str | None] | None = None,
    n_random: int = 10,
    explanation: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the reference answer of exercise ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"an exercise named {name!r} is already registered")
    if explanation is not None and (inputs is not None or not isinstance(explanation, str)):
        raise ValueError("explanation is for value exercises (inputs=None) and must be a string")
    if not isinstance(n_random, int) or n_random < 0:
        raise ValueError(f"n_random must be a non-negative integer, got {n_random!r}")
    if inputs is not None and n_random == 0 and not edge_cases:
        raise ValueError(f"exercise {name!r} would check nothing: give n_random > 0 or edge_cases")

    def register(reference: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[name] = Exercise(
            name,
            task,
            reference,
            inputs,
            dict(edge_cases or {}),
            dict(mistakes or {}),
            compare,
            n_random,
            explanation,
        )
        return reference

    return register


def available() -> list[str]:
    """The names of all exercises, sorted."""
    return sorted(_REGISTRY)


def describe(name: str) -> str:
    """The one-sentence task of exercise ``name``."""
    return _get(name).task


def _get(name: str) -> Exercise:
    if name not in _REGISTRY:
        raise ValueError(f"unknown exercise {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


# --- comparing ------------------------------------------------------------------------


def _array(x: Any) -> np.ndarray | None:
    """x as a NumPy array when it is array-like (tensor, array, number, list of numbers)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return x.double().numpy() if x.is_floating_point() else x.numpy()
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 2**62:
        return np.asarray(float(x))  # counts of FLOPs exceed int64
    if isinstance(x, (bool, int, float, np.number, np.bool_)):
        return np.asarray(x)
    if isinstance(x, (list, tuple)) and all(
        isinstance(e, (bool, int, float, np.number, np.bool_)) for e in x
    ):
        return np.asarray(x)
    return None


def _dtype_name(x: Any) -> str:
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return str(x.dtype).replace("torch.", "")
    return type(x).__name__


def close(rtol: float = 1e-5, atol: float = 1e-6, same_dtype: bool = False):
    """A comparison of numbers, arrays and tensors (and tuples of them) within tolerances.

    ``same_dtype``: a tensor or array answer must have the reference's dtype (a mask must
    be bool; a float32 input gives a float32 output).
    """

    def compare(expected: Any, got: Any) -> str | None:
        if isinstance(expected, tuple):
            if not isinstance(got, tuple) or len(got) != len(expected):
                return f"expected a tuple of {len(expected)} items, got {_describe(got)}"
            for i, (e, g) in enumerate(zip(expected, got, strict=True)):
                msg = compare(e, g)
                if msg is not None:
                    return f"item {i} of the tuple: {msg}"
            return None
        e, g = _array(expected), _array(got)
        if g is None or g.dtype == object:
            return f"expected {_describe(expected)}, got {_describe(got)}"
        if same_dtype and isinstance(expected, (torch.Tensor, np.ndarray)):
            if _dtype_name(got) != _dtype_name(expected):
                return f"expected dtype {_dtype_name(expected)}, got {_dtype_name(got)}"
        if e.shape != g.shape:
            return f"expected shape {tuple(e.shape)}, got shape {tuple(g.shape)}"
        if g.dtype.kind in "fc" and (~np.isfinite(g) & np.isfinite(e)).any():
            return "your answer contains NaN or inf"
        if e.dtype == bool or g.dtype == bool:
            bad = np.argwhere(e != g)
        else:
            bad = np.argwhere(~np.isclose(g, e, rtol=rtol, atol=atol))
        if len(bad):
            idx = tuple(int(i) for i in bad[0])
            where = f" at index {idx}" if idx else ""
            return f"expected {_num(e[idx])}{where}, got {_num(g[idx])}" + (
                f" ({len(bad)} of {e.size} entries differ)" if e.size > 1 else ""
            )
        return None

    return compare


def exact_int(expected: Any, got: Any) -> str | None:
    """An integer answer (a position, a count): exactly right or wrong. ``None`` allowed."""
    if expected is None or got is None:
        return None if got is expected else f"expected {expected!r}, got {_describe(got)}"
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)):
        return f"expected an integer, got {_describe(got)}"
    if int(got) != expected:
        return f"expected {expected:,}, got {int(got):,}"
    return None


def int_list(expected: list[int], got: Any) -> str | None:
    """A list of integers, in order (a NumPy or torch vector is accepted)."""
    g = _array(got)
    if g is None or g.ndim != 1 or (g.size and g.dtype.kind not in "iu"):
        return f"expected a list of integers, got {_describe(got)}"
    return None if g.tolist() == list(expected) else f"expected {expected}, got {g.tolist()}"


def _num(x: Any) -> str:
    x = x.item() if hasattr(x, "item") else x
    return f"{x:.6g}" if isinstance(x, float) else repr(x)


def _describe(x: Any) -> str:
    """A short description of a value for a message: never a module's full repr."""
    if isinstance(x, nn.Module):
        return f"a {type(x).__name__} module"
    if isinstance(x, (torch.Tensor, np.ndarray)):
        kind = "tensor" if isinstance(x, torch.Tensor) else "array"
        if x.ndim == 0:
            return f"a 0-d {kind} ({_dtype_name(x)}) {_num(x)}"
        if (x.size if isinstance(x, np.ndarray) else x.numel()) <= 12:
            a = _array(x)
            vals = np.array2string(a, precision=4, separator=", ", threshold=12)
            return f"{kind} {_dtype_name(x)} {vals}".replace("\n", "")
        return f"a {kind} of shape {tuple(x.shape)} ({_dtype_name(x)})"
    if isinstance(x, (list, tuple)) and len(x) > 8:
        return f"a {type(x).__name__} of {len(x)} items"
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _same(a: Any, b: Any) -> bool:
    """True when a and b are equal values (NaN equal to NaN), for naming mistakes."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    x, y = _array(a), _array(b)
    if x is None or y is None:
        return x is None and y is None and a == b
    if x.shape != y.shape or x.dtype == object or y.dtype == object:
        return False
    if x.dtype.kind in "fc" or y.dtype.kind in "fc":
        return bool(np.allclose(x, y, rtol=1e-4, atol=1e-6, equal_nan=True))
    return bool((x == y).all())


def _copy(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else copy.deepcopy(a) for a in args)


def _unchanged(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor):
        return before.dtype == after.dtype and torch.equal(before, after)
    if isinstance(before, np.ndarray):
        return before.dtype == after.dtype and np.array_equal(before, after, equal_nan=True)
    if isinstance(before, nn.Module):
        s1, s2 = before.state_dict(), after.state_dict()
        return s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
    return True


# --- random cases ---------------------------------------------------------------------


def random_tensor(
    rng: np.random.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """A tensor of the given shape with N(0, scale^2) entries drawn from ``rng`` (a case's
    generator, so the seed in a failure message replays it)."""
    return torch.from_numpy(rng.normal(0.0, scale, size=shape)).to(dtype)


# --- running the reader's code --------------------------------------------------------


class _TimeUp(BaseException):
    """Raised inside the reader's code when its time is up (not an Exception: a bare
    ``except Exception`` in the reader's code cannot swallow it)."""


def _run_limited(fn: Callable[..., Any], args: tuple, seconds: float) -> tuple[str, Any]:
    """Call fn(*args) within ``seconds``: ("ok", value), ("error", exception) or ("timeout", None).

    In the main thread (a script, a Jupyter kernel) a SIGALRM timer interrupts the call;
    elsewhere the call runs in a daemon thread that is abandoned when the time is up.
    The random states of Python, NumPy and torch are restored afterwards, so the reader's
    code does not shift the notebook's own random numbers.
    """
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            if threading.current_thread() is threading.main_thread() and hasattr(
                signal, "setitimer"
            ):
                return _run_with_alarm(fn, args, seconds)
            return _run_in_thread(fn, args, seconds)
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def _run_with_alarm(fn, args, seconds):
    def time_up(signum, frame):
        raise _TimeUp

    previous = signal.signal(signal.SIGALRM, time_up)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
        try:
            return "ok", fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _TimeUp:
        return "timeout", None
    except (Exception, SystemExit) as err:  # a reader's bug is reported, not raised
        return "error", err
    finally:
        signal.signal(signal.SIGALRM, previous)


def _run_in_thread(fn, args, seconds):
    box: dict[str, Any] = {}

    def target():
        try:
            box["ok"] = fn(*args)
        except BaseException as err:  # reported to the caller
            box["error"] = err

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        return "timeout", None
    return ("ok", box["ok"]) if "ok" in box else ("error", box["error"])


# --- check ----------------------------------------------------------------------------


def check(name: str, answer: Any, *, seed: int | None = None, time_limit: float = 10.0) -> Verdict:
    """Check a reader's answer to exercise ``name``; print ``✓ ...`` or ``✗ ...``.

    Args:
        name: the exercise's name as given in the chapter (see :func:`available`).
        answer: a function (run on the edge cases and on random cases, compared with the
            reference) or, for a value exercise, the value (or a function of no arguments
            returning it).
        seed: replays the random cases of an earlier call (its message gives the seed);
            by default every call draws new cases.
        time_limit: seconds the reader's code may run in all, across the cases.

    Returns:
        A :class:`Verdict`, true when every case agrees. Exceptions from the reader's code,
        a time-out and an input modified in place are reported in the message, not raised.
        An unknown ``name`` raises ``ValueError`` (that is the caller's mistake, not the
        answer's).
    """
    ex = _get(name)
    if seed is None:
        seed = secrets.randbelow(2**31)
    elif not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    if not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    if ex.inputs is None:
        passed, msg = _check_value(ex, answer, time_limit)
        seed = None
    else:
        passed, msg = _check_function(ex, answer, int(seed), float(time_limit))
    print(("✓ " if passed else "✗ ") + f"{name}: {msg}")
    if ex.explanation is not None and answer is not None:
        print(f"  Why: {ex.explanation}")
    return Verdict(name, passed, msg, seed)


def _check_value(ex: Exercise, answer: Any, time_limit: float) -> tuple[bool, str]:
    """A value is right or not; the message never shows the expected value (no spoiler)."""
    compare = ex.compare or close()
    if callable(answer):
        status, answer = _run_limited(answer, (), time_limit)
        if status != "ok":
            return False, _failure(status, answer, time_limit)
    if answer is None:
        return False, "no answer yet (the value is None)."
    expected = ex.reference()
    msg = compare(expected, answer)
    if msg is None:
        return True, "correct."
    if msg.startswith("expected an") or msg.startswith("expected shape"):
        return False, msg + "."  # the kind of answer is wrong: saying so gives nothing away
    side = ""
    e, g = _array(expected), _array(answer)
    if e is not None and g is not None and e.ndim == 0 and g.ndim == 0 and g.dtype.kind in "iuf":
        side = " (too small)" if g < e else " (too large)"
    named = [m for m, wrong in ex.mistakes.items() if _same(wrong, answer)]
    return False, f"{_describe(answer)} is not right{side}." + (
        f" This looks like: {named[0]}." if named else ""
    )


def _failure(status: str, err: Any, time_limit: float) -> str:
    if status == "timeout":
        return (
            f"your code did not finish within {time_limit:g} s in all (an endless loop, "
            "or far too slow); it was stopped."
        )
    if isinstance(err, NotImplementedError):
        return "not implemented yet (your function raised NotImplementedError)."
    return f"your code raised {type(err).__name__}: {err}"


def _check_function(ex: Exercise, answer: Any, seed: int, time_limit: float) -> tuple[bool, str]:
    if not callable(answer):
        return False, f"expected a function, got {_describe(answer)}."
    compare = ex.compare or close()
    rng = np.random.default_rng(seed)
    cases = [(f"edge case '{label}'", args) for label, args in ex.edge_cases.items()]
    cases += [(f"random case {i + 1} (seed {seed})", None) for i in range(ex.n_random)]
    deadline = time.monotonic() + time_limit
    for label, args in cases:
        if args is None:
            args = ex.inputs(rng)
        given = _copy(args)
        expected = ex.reference(*_copy(args))
        status, got = _run_limited(answer, given, deadline - time.monotonic())
        if status != "ok":
            if isinstance(got, NotImplementedError):
                return False, _failure(status, got, time_limit)
            return False, f"{label}, inputs {_show(args)}: {_failure(status, got, time_limit)}"
        changed = [
            i for i, (a, b) in enumerate(zip(args, given, strict=True)) if not _unchanged(a, b)
        ]
        if changed:
            return False, (
                f"{label}, inputs {_show(args)}: your function modified its argument "
                f"{changed[0] + 1} in place; it must leave its inputs unchanged."
            )
        msg = compare(expected, got)
        if msg is not None:
            named = _name_mistake(ex, args, got)
            hint = f" This looks like: {named}." if named else ""
            return False, f"{label}, inputs {_show(args)}: {msg}.{hint}"
    if ex.edge_cases:
        return True, f"all {len(ex.edge_cases)} edge cases and {ex.n_random} random cases agree."
    return True, f"all {ex.n_random} random cases agree."


def _name_mistake(ex: Exercise, args: tuple, got: Any) -> str | None:
    for mistake, wrong in ex.mistakes.items():
        try:
            if _same(wrong(*_copy(args)), got):
                return mistake
        except Exception:  # a mistake that cannot run on these inputs is not this one
            continue
    return None


def _show(args: tuple) -> str:
    return "(" + ", ".join(_describe(a) for a in args) + ")"
