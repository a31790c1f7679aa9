"""Self-checking exercises: ``check(name, answer)`` tells a reader whether an answer is right.

How a verdict is reached. Each exercise is one block below: a *reference* (the answer,
written independently of the rest of the package, as the package's own tests are), the
function that draws random inputs for it, fixed *edge cases* chosen for the classic
mistakes of that exercise (a fully masked row, a step past the end of a schedule, large
logits in float32, an input that must not be modified), and a few named *mistakes*.
:func:`check` runs the reader's function on every edge case and on fresh random cases,
compares each result with the reference and stops at the first disagreement. It then
prints the inputs, the seed that reproduces the case, what differs, and, when the
reader's output equals one of the named mistakes, the mistake's name ("the transpose
R(-offset)", "Post-LN instead of Pre-LN", ...).

Fresh cases on every call: an answer cannot pass by memorising inputs. The random cases
come from a NumPy generator seeded by a new seed on each call (or by ``seed=``), and a
failure message names that seed, so ``check(name, answer, seed=...)`` replays it.

The reader's code cannot break the notebook: every exception it raises is reported,
never raised; it runs under a time limit (``time_limit`` seconds in all, a SIGALRM timer
in the main thread, which interrupts a Python loop inside a Jupyter kernel); it gets
copies of the inputs, and an input it modified in place is reported; the global random
states of Python, NumPy and torch are restored after it ran.

In a chapter::

    from mini_transformer import exercises

    def my_binary(n, n_bits):
        ...  # your code here
    exercises.check("binary-encoding", my_binary)

:func:`check` prints one line (``✓ ...`` or ``✗ ...``) and returns a :class:`Verdict`,
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
