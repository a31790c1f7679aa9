"""The machinery of the exercises: registry, comparisons, messages and :func:`check`.

See :mod:`mini_transformer.exercises` for how a verdict is reached; how the reader's code
runs (a time limit, a forked child process) is in :mod:`.running`.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .comparing import _array, _copy, _describe, _describe_kind, _numeric, _small, close, explain
from .running import in_child, run_limited

#: Run each check in a forked child process where the platform has ``fork`` (Linux). Set to
#: False to check in-process (a debugger, a profiler).
RUN_IN_CHILD = sys.platform.startswith("linux") and hasattr(os, "fork")

_MAX_ENTRIES = 10**6  # a larger result travels back from the child as its description only


@dataclass(frozen=True)
class Exercise:
    """One exercise: ``reference`` is the answer (no arguments for a value exercise, whose
    ``inputs`` is ``None``); ``inputs(rng)`` draws the arguments of one random case;
    ``edge_cases`` ``{label: arguments}`` run first; ``mistakes`` ``{name: wrong function
    or value}`` are named when the reader's output equals theirs; ``compare(expected, got)``
    gives ``None`` or what differs. ``explanation`` is for a *checked prediction*: why the
    right value is right, printed after the verdict, right or wrong, once it is committed."""

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
    """What :func:`check` found; true when the answer passed. ``seed`` replays the random
    cases. After a failure on a case, ``case`` names it, ``inputs`` holds a copy of its
    arguments, ``expected`` and ``got`` the two results (``got`` is a description where it
    could not come back from the child; ``expected`` is ``None`` for a value exercise: no
    spoiler). Jupyter does not echo a verdict: :func:`check` printed it already."""

    name: str
    passed: bool
    message: str
    seed: int | None = None
    case: str | None = None
    inputs: tuple | None = None
    expected: Any = None
    got: Any = None

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:
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
            name, task, reference, inputs, dict(edge_cases or {}), dict(mistakes or {}),
            compare, n_random, explanation,
        )  # fmt: skip
        return reference

    return register


def available() -> list[str]:
    """The names of all exercises, sorted."""
    return sorted(_REGISTRY)


def task(name: str) -> str:
    """The one-sentence task of exercise ``name``."""
    return _get(name).task


def _get(name: str) -> Exercise:
    if name not in _REGISTRY:
        raise ValueError(f"unknown exercise {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


# --- cases ------------------------------------------------------------------------------


def random_tensor(
    rng: np.random.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """N(0, scale^2) entries drawn from a case's ``rng``, so the failure's seed replays it."""
    return torch.from_numpy(rng.normal(0.0, scale, size=shape)).to(dtype)


def _cases(ex: Exercise, seed: int):
    """(index, label, arguments) of every case: the edge cases, then the random cases drawn
    from one generator seeded by ``seed``."""
    for i, (label, args) in enumerate(ex.edge_cases.items()):
        yield i, f"edge case '{label}'", args
    rng = np.random.default_rng(seed)
    for i in range(ex.n_random):
        yield len(ex.edge_cases) + i, f"random case {i + 1} (seed {seed})", ex.inputs(rng)


def _case(ex: Exercise, seed: int, index: int) -> tuple[str, tuple]:
    label, args = next((label, args) for i, label, args in _cases(ex, seed) if i == index)
    return label, _copy(args)


# --- check ----------------------------------------------------------------------------


@dataclass
class _Outcome:
    """What one check found, as it travels back from the child process."""

    passed: bool
    message: str
    index: int | None = None  # the case that failed (for the replay and verdict.inputs)
    expected: Any = None
    got: Any = None
    replay: bool = False  # the message should say how to replay the case
    stdout: str = ""
    stderr: str = ""
    committed: bool = False  # a prediction of the right kind was compared (show the why)


def check(name: str, answer: Any, *, seed: int | None = None, time_limit: float = 10.0) -> Verdict:
    """Check a reader's answer to exercise ``name``; print ``✓ ...`` or ``✗ ...``.

    ``answer`` is a function (run on the edge cases and on random cases, compared with the
    reference) or, for a value exercise, the value (or a function of no arguments returning
    it). ``seed`` replays the random cases of an earlier call (its message gives the seed);
    ``time_limit`` is in seconds for all the cases together. Exceptions from the reader's
    code, a time-out and an input modified in place are reported, not raised; an unknown
    ``name`` raises ``ValueError`` (the caller's mistake, not the answer's).
    """
    ex = _get(name)
    if seed is None:
        seed = secrets.randbelow(2**31)
    elif not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    if not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    seed, time_limit = (int(seed) if ex.inputs is not None else None), float(time_limit)
    outcome = _run_check(ex, answer, seed, time_limit)
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    case, inputs = (None, None) if outcome.index is None else _case(ex, seed, outcome.index)
    msg = outcome.message + (_details(ex, answer, seed, outcome) if outcome.replay else "")
    print(("✓ " if outcome.passed else "✗ ") + f"{name}: {msg}")
    if ex.explanation is not None and outcome.committed:  # not on a wrong kind: no spoiler
        print(f"  Why: {ex.explanation}")
    expected = outcome.expected if ex.inputs is not None else None  # a value: no spoiler
    return Verdict(name, outcome.passed, msg, seed, case, inputs, expected, outcome.got)


def _run_check(ex: Exercise, answer: Any, seed: int | None, time_limit: float) -> _Outcome:
    def work(progress: Callable[[int], None]) -> _Outcome:
        if ex.inputs is None:
            outcome = _check_value(ex, answer, time_limit)
        else:
            outcome = _check_function(ex, answer, seed, time_limit, progress)
        outcome.expected, outcome.got = _portable(outcome.expected), _portable(outcome.got)
        return outcome

    kind, payload, last = in_child(work, time_limit) if RUN_IN_CHILD else ("no fork", None, None)
    if kind == "no fork":
        return work(lambda index: None)
    if kind == "done":
        return payload
    if kind == "crash":  # the checker itself failed in the child: say so, do not guess
        return _Outcome(False, f"the check could not run ({payload}).")
    why = f"your code did not return: {payload}."
    if kind == "timeout":
        why = _failure("timeout", None, time_limit)
    if last is None or ex.inputs is None:
        return _Outcome(False, why)
    label, args = _case(ex, seed, last)
    return _Outcome(False, f"{label}, inputs {_show(args)}: {why}", index=last, replay=True)


def _portable(x: Any, depth: int = 0) -> Any:
    """x made of builtin values, arrays and tensors only (it is sent back pickled; the
    parent never unpickles a reader's own class), or its description."""
    if x is None or type(x) in (bool, int, float, complex, str, bytes, np.bool_):
        return x
    if isinstance(x, np.number):
        return x
    if isinstance(x, torch.Tensor) and x.layout == torch.strided and not x.is_meta:
        if x.numel() <= _MAX_ENTRIES:
            return x.detach().cpu().clone()
    if isinstance(x, np.ndarray) and x.dtype != object and x.size <= _MAX_ENTRIES:
        return x.copy()
    if type(x) in (tuple, list) and depth < 3 and len(x) <= 1000:
        return type(x)(_portable(e, depth + 1) for e in x)
    return _describe(x)


def _details(ex: Exercise, answer: Any, seed: int, outcome: _Outcome) -> str:
    """The lines after a failure: small arrays in full, and how to replay the case."""
    lines = []
    e, g = _small(outcome.expected), _small(outcome.got)
    if e is not None and g is not None:
        lines += [f"  expected: {e}", f"  got:      {g}"]
    fname = getattr(answer, "__name__", None)
    if not isinstance(fname, str) or not fname.isidentifier():
        fname = "your_function"
    lines.append(
        f"  To replay this case: v = exercises.check({ex.name!r}, {fname}, seed={seed}); "
        "then v.inputs, v.expected and v.got hold its arguments and results."
    )
    return "\n" + "\n".join(lines)


def _text(obj: Any) -> str:
    """str(obj) of a reader's object (an exception), given one second to return."""
    status, text = run_limited(str, (obj,), 1.0)
    if status != "ok" or not isinstance(text, str):
        return "(its message could not be shown)"
    return text if len(text) <= 500 else text[:497] + "..."


def _failure(status: str, err: Any, time_limit: float) -> str:
    if status == "timeout":
        return (
            f"your code did not finish within {time_limit:g} s in all (an endless loop, "
            "or far too slow); it was stopped."
        )
    if isinstance(err, NotImplementedError):
        return "not implemented yet (your function raised NotImplementedError)."
    text = _text(err)
    if "forked subprocess" in text:
        text += " (the check runs your code in a child process on the CPU: leave CUDA out)"
    return f"your code raised {type(err).__name__}: {text}"


def _check_value(ex: Exercise, answer: Any, time_limit: float) -> _Outcome:
    """A value is right or not; the message never shows the expected value (no spoiler)."""
    compare = ex.compare or close()
    if callable(answer):
        status, answer = run_limited(answer, (), time_limit)
        if status != "ok":
            return _Outcome(False, _failure(status, answer, time_limit))
    if answer is None:
        return _Outcome(False, "no answer yet (the value is None).")
    expected = ex.reference()
    try:
        msg = compare(expected, answer)
    except Exception:  # a comparison that cannot read the answer at all
        msg = f"expected {_describe_kind(expected)}, got {_describe(answer)}"
    if msg is None:
        return _Outcome(True, "correct.", got=answer, committed=True)
    if msg.startswith(("expected a", "expected shape")) and "differ" not in msg:
        # the kind of answer is wrong (type, shape, dtype): saying so gives nothing away
        return _Outcome(False, msg + ".", got=answer)
    side = ""
    e, g = _array(expected), _array(answer)
    if _numeric(e) and _numeric(g) and e.ndim == 0 and g.ndim == 0 and g.dtype.kind in "iuf":
        side = " (too small)" if g < e else " (too large)"
    msg = f"{_describe(answer)} is not right{side}." + explain(
        ex.mistakes, compare, expected, answer
    )
    return _Outcome(False, msg, got=answer, committed=True)


def _check_function(
    ex: Exercise, answer: Any, seed: int, time_limit: float, progress: Callable[[int], None]
) -> _Outcome:
    if not callable(answer):
        return _Outcome(False, f"expected a function, got {_describe(answer)}.")
    compare = ex.compare or close()
    deadline = time.monotonic() + time_limit
    for index, label, args in _cases(ex, seed):
        progress(index)
        given = _copy(args)
        expected = ex.reference(*_copy(args))
        status, got = run_limited(answer, given, deadline - time.monotonic())
        where = f"{label}, inputs {_show(args)}: "
        if status != "ok":
            if isinstance(got, NotImplementedError):  # a stub: no inputs to show
                return _Outcome(False, _failure(status, got, time_limit))
            return _Outcome(False, where + _failure(status, got, time_limit), index, replay=True)
        if changed := [i + 1 for i, a in enumerate(args) if not _unchanged(a, given[i])]:
            msg = f"your function modified its argument {changed[0]} in place; it must leave its "
            return _Outcome(False, f"{where}{msg}inputs unchanged.", index, expected, got, True)
        try:
            msg = compare(expected, got)
        except Exception as err:  # a comparison that cannot read the answer at all
            msg = f"expected {_describe_kind(expected)}, got {_describe(got)} ({_text(err)})"
        if msg is not None:
            hint = explain(ex.mistakes, compare, expected, got, args)
            return _Outcome(False, f"{where}{msg}.{hint}", index, expected, got, replay=True)
    edge = f"{len(ex.edge_cases)} edge cases and " if ex.edge_cases else ""
    return _Outcome(True, f"all {edge}{ex.n_random} random cases agree.")


def _unchanged(before: Any, after: Any) -> bool:
    """The reader's copy of an argument (tensor, array, module) still equals the original."""
    try:
        if isinstance(before, torch.Tensor):
            return (
                isinstance(after, torch.Tensor)
                and (before.dtype, before.shape) == (after.dtype, after.shape)
                and torch.equal(before, after)
            )
        if isinstance(before, np.ndarray):
            return (
                isinstance(after, np.ndarray)
                and before.dtype == after.dtype
                and np.array_equal(before, after, equal_nan=before.dtype.kind in "fc")
            )
        if isinstance(before, torch.nn.Module):
            s1, s2 = before.state_dict(), after.state_dict()
            return s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
        return True
    except Exception:  # a dtype or device changed in place, say: not the same any more
        return False


def _show(args: tuple) -> str:
    return "(" + ", ".join(_describe(a) for a in args) + ")"
