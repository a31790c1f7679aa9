"""Self-checking exercises: ``check(name, answer)`` tells a reader whether an answer is right.

How a verdict is reached. Each exercise is one block below: a *reference* (the answer,
written independently of the rest of the package, as the package's own tests are), the
function that draws random inputs for it, fixed *edge cases* chosen for the classic
mistakes of that exercise (a fully masked row, a step past the end of a schedule, large
logits in float32, an input that must not be modified), and a few named *mistakes*.
:func:`check` runs the reader's function on every edge case and on fresh random cases,
compares each result with the reference and stops at the first disagreement. It then
prints the inputs, what differs (not numbers at all, then the shape, then the dtype, then
NaN or inf, then the first differing entry, with small arrays in full) and, when the
reader's output equals one of the named mistakes (by the exercise's own comparison, so
in dtype and shape too) the mistake's name ("the transpose R(-offset)", "Post-LN instead
of Pre-LN", ...). A mistake is named only when its output differs from the reference on
that case, since otherwise it cannot be the bug. An unnamed mistake gets a generic
diagnosis where one holds (transposed, normalised along another axis, sign flipped, off
by a constant factor or offset, reversed or shifted along an axis).

Fresh cases on every call: an answer cannot pass by memorising inputs. The random cases
come from a NumPy generator seeded by a new seed on each call (or by ``seed=``), and a
failure message names that seed, so ``check(name, answer, seed=...)`` replays it; the
returned :class:`Verdict` holds the failing case (``case``, ``inputs``, ``expected``,
``got``).

The reader's code cannot break the notebook: every exception it raises is reported,
never raised. Where the platform has ``fork`` (Linux) each check runs in a forked child
process that is killed at most a second past ``time_limit`` whatever the code does (a
C-level loop, a bare ``except:``, an object whose ``__repr__`` never returns), and what
the code changes (default dtype, grad mode, ``np.seterr``, warning filters, random
states) stays in the child; what it prints is relayed. Elsewhere it runs in-process
under a SIGALRM timer with that global state restored after each call. Either way it
gets copies of the inputs, and an input it modified in place is reported; Ctrl-C still
interrupts a check. Neither is a sandbox against code written to do harm on purpose.

In a chapter::

    from mini_transformer import exercises

    def my_binary(n, n_bits):
        ...  # your code here
    exercises.check("binary-encoding", my_binary)

:func:`check` prints one line (``✓ ...``, or ``✗ ...`` followed by the failing case's small
arrays and how to replay it) and returns a :class:`Verdict`,
true when the answer passed, which Jupyter does not echo; solution cells call
``assert exercises.check(...)`` so CI executes every solution against its checker.
"""

# The machinery (registry, comparisons, time limit, seeded random cases, messages) lives in
# `checking`; each chapter's exercises live in their own module, registered on import here.
from . import (  # noqa: F401  (importing a chapter's module registers its exercises)
    ch1_position,
    ch2_sinusoidal,
    ch3_memn2n,
    ch4_attention,
    ch5_layernorm,
    ch6_training,
)

# Besides the public API: names reachable here before the split (the comparisons for custom
# exercises, and the private names the package's tests use).
from .ch1_position import _first_return_answer  # noqa: F401
from .ch5_layernorm import CausalSelfAttention, _ln_jacobian  # noqa: F401
from .ch6_training import _param_count  # noqa: F401
from .checking import (  # noqa: F401
    _REGISTRY,
    Exercise,
    Verdict,
    _copy,
    _describe,
    _get,
    available,
    check,
    close,
    describe,
    exact_int,
    exercise,
    int_list,
)

__all__ = ["Exercise", "Verdict", "exercise", "check", "available", "describe"]
