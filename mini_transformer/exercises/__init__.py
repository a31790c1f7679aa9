"""Self-checking exercises: ``check(name, answer)`` tells a reader whether an answer is right.

Each exercise has a *reference* (the answer, written from the formula, independently of the
package's modules), random inputs, *edge cases* chosen for the classic mistakes (a fully
masked row, a step past the end of a schedule, large logits in float32, an input that must
not be modified) and named *mistakes*. :func:`check` runs the reader's function on the edge
cases and on fresh random cases and stops at the first disagreement. It prints the inputs,
what differs, and a mistake's name only when the reader's output matches that mistake on a
case where it differs from the reference (otherwise it cannot be the bug).

Fresh cases on every call, so an answer cannot pass by memorising inputs; a failure names
the seed, and ``check(name, answer, seed=...)`` replays it. The reader's code cannot break the
notebook: its exceptions are reported, never raised, and on Linux it runs in a forked child
that is killed when its time is up (``running.py``). A *checked prediction* (a value) gets a
hint and a second try after a first wrong answer; its explanation follows a right answer, a
second wrong one, or ``check(name, answer, why=True)``.

In a chapter::

    from mini_transformer import exercises

    def my_binary(n, n_bits):
        ...  # your code here
    exercises.check("binary-encoding", my_binary)

:func:`check` prints ``✓ ...`` or ``✗ ...`` (with the failing case and how to replay it) and
returns a :class:`Verdict`, true when the answer passed; solution cells ``assert`` it, so CI
runs every solution against its checker.
"""

# Importing a chapter's module registers its exercises.
from . import ch1_position, ch2_sinusoidal, ch3_memn2n, ch4_attention, ch5_layernorm, ch6_training  # noqa: F401, E501
from .checking import Exercise, Verdict, available, check, exercise, task

__all__ = ["Exercise", "Verdict", "exercise", "check", "available", "task"]
