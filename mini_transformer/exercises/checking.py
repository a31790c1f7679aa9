"""The machinery of the exercises: registry, comparisons, messages and :func:`check`.

See :mod:`mini_transformer.exercises` for how a verdict is reached; how the reader's code
runs (a time limit, a forked child process) is in :mod:`.running`.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from . import comparing as C
from .comparing import _array, _copy, _describe, close, explain
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
    right value is right, printed after a right answer, after a second wrong one (the first
    gets the ``hint``) or on request. ``warm_up`` runs once in the reader's process before
    the first check (what the answer's first call would import, timed against the reader)."""

    name: str
    task: str
    reference: Callable[..., Any]
    inputs: Callable[[np.random.Generator], tuple] | None
    edge_cases: dict[str, tuple] = field(default_factory=dict)
    mistakes: dict[str, Any] = field(default_factory=dict)
    compare: Callable[[Any, Any], str | None] | None = None
    n_random: int = 10
    explanation: str | None = None
    hint: str | None = None
    warm_up: Callable[[], Any] | None = None


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


def exercise(name: str, task: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """Register the decorated function as the reference answer of exercise ``name``;
    ``options`` are :class:`Exercise`'s fields from ``inputs`` on, by keyword; a function
    exercise's mistake given as a dict is the reference called with those keyword arguments."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"an exercise named {name!r} is already registered")
    predicted = (options.get("explanation"), options.get("hint"))
    if predicted != (None, None) and (options.get("inputs") or None in predicted):
        raise ValueError("explanation and hint come together, for value exercises (inputs=None)")
    n_random = options.get("n_random", 10)
    if not isinstance(n_random, int) or n_random < 0:
        raise ValueError(f"n_random must be a non-negative integer, got {n_random!r}")
    if options.get("inputs") and n_random == 0 and not options.get("edge_cases"):
        raise ValueError(f"exercise {name!r} would check nothing: give n_random > 0 or edge_cases")

    def register(reference: Callable[..., Any]) -> Callable[..., Any]:
        wrong = {k: partial(reference, **v) if type(v) is dict and options.get("inputs") else v
                 for k, v in options.get("mistakes", {}).items()}  # fmt: skip
        opts = {"inputs": None, **options, "mistakes": wrong}
        _REGISTRY[name] = Exercise(name, task, reference, **opts)
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
    for i, label, args in _cases(ex, seed):
        if i == index:
            return label, _copy(args)
    return "a case", ()  # an index the checker never sent (forged by the answer)


@dataclass
class _Outcome:
    """What one check found, as it travels back from the child process (plain data)."""

    passed: bool
    message: str
    index: int | None = None  # the case that failed (for the replay and verdict.inputs)
    expected: Any = None
    got: Any = None
    replay: bool = False  # the message should say how to replay the case
    stdout: str = ""
    stderr: str = ""
    committed: bool = False  # a prediction of the right kind was compared (show the why)


_WRONG: dict[str, set[str]] = {}  # the wrong predictions made so far in this process
_DONE: dict[str, Any] = {}  # value references and warm-ups, computed once in this process


def check(
    name: str, answer: Any, *, seed: int | None = None, time_limit: float = 10.0, why: bool = False
) -> Verdict:
    """Check a reader's answer to exercise ``name``; print ``✓ ...`` or ``✗ ...``.

    ``answer`` is a function (run on the edge cases and on random cases, compared with the
    reference) or, for a value exercise, the value (or a function of no arguments returning
    it). ``seed`` replays the random cases of an earlier call (its message gives the seed);
    ``time_limit`` is in seconds for all of the answer's calls together (the checker's own
    work is not counted). Exceptions from the reader's code, a time-out and an input
    modified in place are reported, not raised; an unknown ``name`` raises ``ValueError``
    (the caller's mistake, not the answer's). A checked prediction explains its answer after
    a right answer or a second wrong one; a first wrong one gets a hint and another try, and
    ``why=True`` asks for the explanation now.
    """
    ex = _get(name)
    if seed is None:
        seed = secrets.randbelow(2**31)
    elif not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    if not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    seed, time_limit = (int(seed) if ex.inputs is not None else None), float(time_limit)
    if ex.warm_up is not None and ("warm", name) not in _DONE:  # before the reader's clock
        _DONE["warm", name] = ex.warm_up()
    outcome = _run_check(ex, answer, seed, time_limit)
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    case, inputs = (None, None) if outcome.index is None else _case(ex, seed, outcome.index)
    msg = outcome.message + (_details(ex, answer, seed, outcome) if outcome.replay else "")
    print(("✓ " if outcome.passed else "✗ ") + f"{name}: {msg}")
    if ex.explanation is not None and outcome.committed:  # not on a wrong kind: no spoiler
        wrong = _WRONG.setdefault(name, set())
        if not outcome.passed:
            wrong.add(C._safe_repr(outcome.got) or "?")
        if outcome.passed or why or len(wrong) > 1:
            print(f"  Why: {ex.explanation}")
        else:
            again = f"exercises.check({name!r}, your_answer, why=True)"
            print(f"  Hint: {ex.hint}\n  Try again: the explanation follows a second wrong answer, "
                  f"or now with {again}.")  # fmt: skip
    expected = outcome.expected if ex.inputs is not None else None  # a value: no spoiler
    return Verdict(name, outcome.passed, msg, seed, case, inputs, expected, outcome.got)


def _run_check(ex: Exercise, answer: Any, seed: int | None, time_limit: float) -> _Outcome:
    if ex.inputs is None and ("value", ex.name) not in _DONE:  # in the parent, before any call
        _DONE["value", ex.name] = ex.reference()
    expected = _DONE.get(("value", ex.name))

    def work(report: Callable[..., None]) -> dict:
        if ex.inputs is None:
            outcome = _check_value(ex, answer, expected, time_limit, report)
        else:
            outcome = _check_function(ex, answer, seed, time_limit, report)
        outcome.expected, outcome.got = _pack(outcome.expected), _pack(outcome.got)
        return {f.name: getattr(outcome, f.name) for f in dataclasses.fields(outcome)}

    kind, payload, last = in_child(work, time_limit) if RUN_IN_CHILD else ("no fork", None, None)
    if kind == "no fork":
        kind, payload = "done", work(lambda *message: None)
    if kind == "done":
        return _outcome(payload)
    if kind == "crash":  # the checker itself failed in the child: say so, do not guess
        return _Outcome(False, f"the check could not run ({payload}).")
    if kind == "slow":  # the reader's time is counted apart: not theirs to fix
        return _Outcome(False, "the checker's own work took too long (not your code: the "
                        "machine may be busy); run the check again.")  # fmt: skip
    why = f"your code did not return: {payload}."
    if kind == "timeout":
        why = _failure("timeout", None, time_limit)
    if last is None or ex.inputs is None:
        return _Outcome(False, why)
    label, args = _case(ex, seed, last)
    return _Outcome(False, f"{label}, inputs {_show(args)}: {why}", index=last, replay=True)


def _plain(x: Any, depth: int = 0) -> Any:
    """The reader's result as plain data, read with the base classes' own methods (a subclass
    cannot lie about its value): builtin scalars, NumPy scalars and arrays, plain tensors,
    and tuples and lists of them; any other object becomes its description."""
    try:
        if x is None or type(x) in (bool, int, float, complex, str, bytes):
            return x
        if isinstance(x, (np.generic, np.ndarray)):
            return np.array(np.ndarray.view(np.asarray(x), np.ndarray))[() if x.ndim == 0 else ...]
        for base in (int, float, complex, str):  # a subclass: its value, not what it claims
            if isinstance(x, base):
                return getattr(base, f"__{base.__name__}__")(x)
        if isinstance(x, torch.Tensor) and type(x) in (torch.Tensor, torch.nn.Parameter):
            return x.detach().cpu().clone() if x.layout == torch.strided and not x.is_meta else x
        if isinstance(x, (tuple, list)) and depth < 3 and len(x) <= 1000:
            kind = tuple if isinstance(x, tuple) else list  # a namedtuple: a tuple
            return kind(_plain(e, depth + 1) for e in kind.__iter__(x))
    except Exception:  # an object that cannot be read: described below
        pass
    return x if type(x) is torch.Tensor else C._Described(_describe(x))


def _pack(x: Any) -> Any:
    """Plain data as ``torch.load(weights_only=True)`` reads it: arrays as tensors, what is
    too large or not numbers by its description."""
    if isinstance(x, (tuple, list)) and not isinstance(x, C._Described):
        return type(x)(_pack(e) for e in x)
    try:
        if isinstance(x, (np.generic, np.ndarray)) and x.dtype.kind in "biufc":
            if x.size <= _MAX_ENTRIES:
                return {"np": torch.from_numpy(np.array(x)), "scalar": x.ndim == 0}
        elif isinstance(x, torch.Tensor) and x.layout == torch.strided and not x.is_meta:
            if x.numel() <= _MAX_ENTRIES:
                return x.detach()
        elif type(x) in (type(None), bool, int, float, complex, str, bytes):
            return x
    except Exception:  # a dtype torch has no tensor for: described
        pass
    return {"described": _describe(x)}


def _unpack(x: Any) -> Any:
    if type(x) is dict:
        if isinstance(x.get("np"), torch.Tensor):
            return x["np"].numpy()[()] if x.get("scalar") else x["np"].numpy()
        return C._Described(str(x.get("described")))
    return type(x)(_unpack(e) for e in x) if type(x) in (tuple, list) else x


def _outcome(fields: Any) -> _Outcome:
    """The child's outcome, each field of the kind it must be (else the check failed)."""
    kinds = {f.name: f.type for f in dataclasses.fields(_Outcome)}
    plain = {"bool": bool, "str": str, "int | None": (int, type(None)), "Any": object}
    if (
        type(fields) is not dict
        or set(fields) != set(kinds)
        or not all(isinstance(fields[k], plain[kinds[k]]) for k in kinds)
    ):
        return _Outcome(False, "the check could not read its result.")
    fields["expected"], fields["got"] = _unpack(fields["expected"]), _unpack(fields["got"])
    return _Outcome(**fields)


def _details(ex: Exercise, answer: Any, seed: int, outcome: _Outcome) -> str:
    """The lines after a failure: small arrays in full, and how to replay the case."""
    lines = []
    e, g = C._small(outcome.expected), C._small(outcome.got)
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


def _called(answer, args: tuple, seconds: float, report, case: int | None) -> tuple[str, Any]:
    """answer(*args) within the reader's ``seconds``, its result as plain data; the parent is
    told when the reader's time starts and stops."""
    report("run", case, seconds)
    try:
        return run_limited(lambda *a: _plain(answer(*a)), args, seconds)
    finally:
        report("ran")


def _check_value(ex: Exercise, answer: Any, expected: Any, time_limit: float, report) -> _Outcome:
    """A value is right or not; the message never shows the expected value (no spoiler)."""
    compare = ex.compare or close()
    if callable(answer):
        status, answer = _called(answer, (), time_limit, report, None)
        if status != "ok":
            return _Outcome(False, _failure(status, answer, time_limit))
    answer = _plain(answer)
    if answer is None:
        return _Outcome(False, "no answer yet (the value is None).")
    try:
        msg = compare(expected, answer)
    except Exception:  # a comparison that cannot read the answer at all
        msg = f"expected {C._describe_kind(expected)}, got {_describe(answer)}"
    if msg is None:
        return _Outcome(True, "correct.", got=answer, committed=True)
    if msg.startswith(("expected a", "expected shape")) and "differ" not in msg:
        # the kind of answer is wrong (type, shape, dtype): saying so gives nothing away
        return _Outcome(False, msg + ".", got=answer)
    side = ""
    e, g = _array(expected), _array(answer)
    if C._numeric(e) and C._numeric(g) and e.ndim == 0 and g.ndim == 0 and g.dtype.kind in "iuf":
        side = " (too small)" if g < e else " (too large)" if g > e else " (NaN: not a number)"
    if isinstance(expected, tuple) and len(expected) > 1:  # which parts are right
        ok = [compare((x,), (y,)) is None for x, y in zip(expected, answer, strict=True)]
        side = ", ".join(f"({chr(97 + i)}) {('wrong', 'right')[r]}" for i, r in enumerate(ok))
        side = f" ({side})"
    msg = f"{_describe(answer)} is not right{side}." + explain(
        ex.mistakes, compare, expected, answer
    )
    return _Outcome(False, msg, got=answer, committed=True)


def _check_function(ex: Exercise, answer: Any, seed: int, time_limit: float, report) -> _Outcome:
    if not callable(answer):
        return _Outcome(False, f"expected a function, got {_describe(answer)}.")
    compare, used = ex.compare or close(), 0.0  # the reader's time so far
    for index, label, args in _cases(ex, seed):
        given = _copy(args)
        expected = ex.reference(*_copy(args))  # before the reader's clock starts
        start = time.monotonic()
        status, got = _called(answer, given, time_limit - used, report, index)
        used += time.monotonic() - start
        where = f"{label}, inputs {_show(args)}: "
        if status != "ok":
            if isinstance(got, NotImplementedError):  # a stub: no inputs to show
                return _Outcome(False, _failure(status, got, time_limit))
            return _Outcome(False, where + _failure(status, got, time_limit), index, replay=True)
        if changed := [i for i, a in enumerate(args) if not _unchanged(a, given[i])]:
            msg = f"your function modified {_arg_name(answer, changed[0])} in place; it must "
            return _Outcome(
                False, f"{where}{msg}leave its inputs unchanged.", index, expected, got, True
            )
        try:
            msg = compare(expected, got)
        except Exception as err:  # a comparison that cannot read the answer at all
            msg = f"expected {C._describe_kind(expected)}, got {_describe(got)} ({_text(err)})"
        if msg is not None:
            hint = explain(ex.mistakes, compare, expected, got, args)
            return _Outcome(False, f"{where}{msg}.{hint}", index, expected, got, replay=True)
    n_edge = len(ex.edge_cases)
    edge = f"all {n_edge} edge cases and " if n_edge > 1 else ("the edge case and " * n_edge)
    return _Outcome(True, f"{edge or 'all '}{ex.n_random} random cases agree.")


def _arg_name(answer: Any, i: int) -> str:
    """Argument i as the reader named it (a plain function's own parameter names: no reader
    code runs to read them), else by its place in words."""
    code = getattr(answer, "__code__", None) if type(answer) is types.FunctionType else None
    if code is not None and i < code.co_argcount and code.co_varnames[i].isidentifier():
        return f"its argument {code.co_varnames[i]}"
    words = ("first", "second", "third", "fourth", "fifth", "sixth")
    return f"its {words[i]} argument" if i < len(words) else f"its argument number {i + 1}"


def _unchanged(before: Any, after: Any) -> bool:
    """The reader's copy of an argument (a tensor, array or module, or a list, tuple or dict
    of them) still equals the original, in type, dtype and value."""
    try:
        if isinstance(before, torch.nn.Module):
            before, after = before.state_dict(), after.state_dict()
        if isinstance(before, dict):
            before, after = list(before.items()), list(after.items())
        if isinstance(before, (list, tuple, str)):
            same = type(after) is type(before) and len(after) == len(before)
            return same and (after == before if isinstance(before, str) else all(
                map(_unchanged, before, after)
            ))  # fmt: skip
        old, new = _array(before), _array(after)
        return old is None or (
            (type(after), getattr(after, "dtype", 0)) == (type(before), getattr(before, "dtype", 0))
            and np.array_equal(old, new, equal_nan=old.dtype.kind in "fc")
        )
    except Exception:  # a dtype or device changed in place, say: not the same any more
        return False


def _show(args: tuple) -> str:
    return "(" + ", ".join(_describe(a) for a in args) + ")"
