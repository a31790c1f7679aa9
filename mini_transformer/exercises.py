"""Self-checking exercises: ``check(name, answer)`` tells a reader whether their answer is right.

How it works. Each exercise is registered with a *reference* (the book's own answer, a
function), a *make_inputs* function that draws random arguments from a NumPy generator,
and a comparison. ``check`` calls the reader's function and the reference on the same
fresh inputs and stops at the first disagreement, printing the inputs, the expected
value and the reader's value, so the reader sees exactly what is wrong. A reader's bug
(an exception, a wrong shape, a NaN) is reported, never raised, so a notebook keeps
running. An answer that is a value rather than a function is compared with the
reference called with no arguments.

The inputs are drawn from a generator seeded by the exercise's name, so a verdict is
the same on every run (the book's stored outputs are compared by nbval in CI), yet the
inputs are not ones the reader has seen in the chapter.

In a chapter::

    from mini_transformer import exercises

    def my_norm(pe):
        ...  # your code here
    exercises.check("sinusoidal-norm", my_norm)

The solution cell that follows is hidden in the book and calls ``assert
exercises.check(...)`` so that every solution and every checker is executed by CI.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Exercise", "register", "check", "available", "describe", "default_compare"]


@dataclass(frozen=True)
class Exercise:
    """One registered exercise.

    Attributes:
        name: the identifier readers pass to :func:`check`, e.g. ``"sinusoidal-norm"``.
        reference: the book's answer; called with the same arguments as the reader's function.
        make_inputs: ``rng -> tuple`` of positional arguments for one test case, or ``None``
            for an exercise whose answer is a single value (the reference takes no arguments).
        description: one sentence saying what the answer must compute.
        compare: ``(expected, got) -> str | None``: ``None`` when they agree, otherwise a
            sentence saying how they differ. Defaults to :func:`default_compare`.
        n_cases: how many random cases to try.
    """

    name: str
    reference: Callable[..., Any]
    make_inputs: Callable[[np.random.Generator], tuple] | None
    description: str
    compare: Callable[[Any, Any], str | None] | None = None
    n_cases: int = 10


_REGISTRY: dict[str, Exercise] = {}


def register(
    name: str,
    reference: Callable[..., Any],
    make_inputs: Callable[[np.random.Generator], tuple] | None,
    description: str,
    compare: Callable[[Any, Any], str | None] | None = None,
    n_cases: int = 10,
) -> Exercise:
    """Add an exercise to the registry (used by this module; readers call :func:`check`)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"an exercise named {name!r} is already registered")
    if not isinstance(n_cases, int) or n_cases < 1:
        raise ValueError(f"n_cases must be a positive integer, got {n_cases!r}")
    ex = Exercise(name, reference, make_inputs, description, compare, n_cases)
    _REGISTRY[name] = ex
    return ex


def available() -> list[str]:
    """The names of all registered exercises, sorted."""
    return sorted(_REGISTRY)


def describe(name: str) -> str:
    """The one-sentence task of exercise ``name``."""
    return _get(name).description


def _get(name: str) -> Exercise:
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown exercise {name!r}; available exercises: {', '.join(available())}"
        )
    return _REGISTRY[name]


def _as_array(x: Any) -> np.ndarray | None:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy() if x.is_floating_point() else x.cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (int, float, np.number, bool, np.bool_)):
        return np.asarray(x)
    if isinstance(x, (list, tuple)) and all(isinstance(e, (int, float, np.number)) for e in x):
        return np.asarray(x)
    return None


def default_compare(expected: Any, got: Any, rtol: float = 1e-5, atol: float = 1e-6) -> str | None:
    """Compare numbers, arrays and tensors with ``allclose``; anything else with ``==``.

    The tolerances are those of float32 arithmetic: a reader may compute in float32
    what the reference computes in float64.
    """
    if isinstance(expected, tuple) and isinstance(got, tuple):
        if len(expected) != len(got):
            return f"expected a tuple of {len(expected)} items, got {len(got)}"
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            msg = default_compare(e, g, rtol, atol)
            if msg is not None:
                return f"item {i}: {msg}"
        return None
    e, g = _as_array(expected), _as_array(got)
    if e is not None:
        if g is None:
            return f"expected an array-like value, got {type(got).__name__}"
        if e.shape != g.shape:
            return f"expected shape {tuple(e.shape)}, got shape {tuple(g.shape)}"
        if g.dtype.kind in "fc" and not np.isfinite(g).all():
            return "your answer contains NaN or inf"
        if e.dtype == bool or g.dtype == bool:
            bad = np.argwhere(e != g)
        else:
            bad = np.argwhere(~np.isclose(g, e, rtol=rtol, atol=atol))
        if len(bad):
            idx = tuple(int(i) for i in bad[0])
            return (
                f"first mismatch at index {idx}: expected {e[idx]!r}, got {g[idx]!r} "
                f"({len(bad)} of {e.size} entries differ)"
            )
        return None
    if expected != got:
        return f"expected {expected!r}, got {got!r}"
    return None


def _short(x: Any) -> str:
    a = _as_array(x)
    if a is not None and a.ndim > 0:
        return f"{type(x).__name__} of shape {tuple(a.shape)}"
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def check(name: str, answer: Any) -> bool:
    """Check a reader's answer to exercise ``name`` and print a verdict.

    Args:
        name: the exercise's name as given in the chapter (see :func:`available`).
        answer: a function (called on random inputs and compared with the reference) or,
            for value exercises, the value itself.

    Returns:
        ``True`` if every case agrees, else ``False``. Prints ``✓ ...`` or ``✗ ...`` with the
        first mismatch. Exceptions raised by the reader's function are reported, not raised.
    """
    ex = _get(name)
    compare = ex.compare or default_compare
    if ex.make_inputs is None:
        expected = ex.reference()
        got = answer() if callable(answer) else answer
        msg = compare(expected, got)
        if msg is None:
            print(f"✓ {name}: correct.")
            return True
        print(f"✗ {name}: {msg}.")
        return False
    if not callable(answer):
        print(f"✗ {name}: expected a function, got {type(answer).__name__}.")
        return False
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for case in range(1, ex.n_cases + 1):
        args = ex.make_inputs(rng)
        expected = ex.reference(*args)
        try:
            got = answer(*args)
        except NotImplementedError:
            print(f"✗ {name}: not implemented yet (your function raised NotImplementedError).")
            return False
        except Exception as err:  # a reader's bug is reported, not raised
            shown = ", ".join(_short(a) for a in args)
            print(f"✗ {name}: case {case} ({shown}) raised {type(err).__name__}: {err}")
            return False
        msg = compare(expected, got)
        if msg is not None:
            shown = ", ".join(_short(a) for a in args)
            print(f"✗ {name}: case {case} with arguments ({shown}): {msg}.")
            return False
    print(f"✓ {name}: all {ex.n_cases} random cases agree with the reference.")
    return True


# Each chapter registers its exercises in its own section below. ------------------------

# === Chapter 1 ===
# References are written out here (not imported from `positional`) so that a checker and
# the package are two independent statements of the same formula.


def _ch1_normalized_position(n: int) -> np.ndarray:
    """pos / N for pos = 0..N-1, as a column (N, 1)."""
    return (np.arange(n, dtype=np.float64) / n)[:, None]


def _ch1_binary_encoding(n: int, n_bits: int) -> np.ndarray:
    """Bit k of pos in column k (least significant bit first), as floats (n, n_bits)."""
    pos = np.arange(n)[:, None]
    return ((pos >> np.arange(n_bits)[None, :]) & 1).astype(np.float64)


def _ch1_neighbour_distances(pe: np.ndarray) -> np.ndarray:
    """Euclidean distance between rows pos and pos+1 of ``pe``, shape (n-1,)."""
    return np.linalg.norm(np.diff(np.asarray(pe, dtype=np.float64), axis=0), axis=1)


def _ch1_first_return() -> int:
    """First pos >= 1 whose point (sin pos, cos pos) is within 0.01 of the point of pos 0."""
    pos = np.arange(1, 10_000)
    dist = np.hypot(np.sin(pos), np.cos(pos) - 1.0)
    return int(pos[np.argmax(dist < 0.01)])


register(
    "normalized-position",
    _ch1_normalized_position,
    lambda rng: (int(rng.integers(1, 200)),),
    "Return pos/N for pos = 0, ..., N-1 as a float array of shape (N, 1).",
)
register(
    "binary-encoding",
    _ch1_binary_encoding,
    lambda rng: (int(rng.integers(1, 300)), int(rng.integers(1, 10))),
    "Return the (n, n_bits) 0/1 matrix whose column k holds bit k of pos "
    "(least significant bit first).",
)
register(
    "neighbour-distances",
    _ch1_neighbour_distances,
    lambda rng: (rng.standard_normal((int(rng.integers(2, 40)), int(rng.integers(1, 9)))),),
    "Return the Euclidean distances between consecutive rows of pe, shape (n - 1,).",
)
def _ch1_same_integer(expected: int, got: Any) -> str | None:
    """Exact comparison for an integer answer (a position is not approximately right)."""
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        return f"expected an integer position, got {type(got).__name__} {got!r}"
    return None if int(got) == expected else f"expected {expected}, got {int(got)}"


register(
    "first-return",
    _ch1_first_return,
    None,
    "The first position pos >= 1 whose point (sin pos, cos pos) on the unit circle lies "
    "within 0.01 of the point of position 0.",
    compare=_ch1_same_integer,
)

# === Chapter 2 ===
# Sinusoidal encoding (book/02_sinusoidal.ipynb). References call mini_transformer.positional,
# imported lazily so that this module stays importable on its own.


def _ch2_sinusoidal_encoding(n_positions: int, d_model: int) -> np.ndarray:
    from mini_transformer.positional import sinusoidal_encoding

    return sinusoidal_encoding(n_positions, d_model)


def _ch2_dot_offset(k: int, d_model: int) -> float:
    from mini_transformer.positional import sinusoidal_frequencies

    return float(np.cos(sinusoidal_frequencies(d_model) * k).sum())


def _ch2_rotation_matrix(offset: int, d_model: int) -> np.ndarray:
    from mini_transformer.positional import rotation_matrix

    return rotation_matrix(offset, d_model)


def _ch2_even_d(rng: np.random.Generator) -> int:
    return 2 * int(rng.integers(1, 17))


register(
    "sinusoidal-encoding",
    _ch2_sinusoidal_encoding,
    lambda rng: (int(rng.integers(1, 60)), _ch2_even_d(rng)),
    "f(n_positions, d_model) -> the (n_positions, d_model) sinusoidal encoding, paper layout "
    "(sin in even columns, cos in odd columns, base 10000).",
)
register(
    "sinusoidal-dot-offset",
    _ch2_dot_offset,
    lambda rng: (int(rng.integers(-200, 201)), _ch2_even_d(rng)),
    "f(k, d_model) -> PE[pos] . PE[pos + k] (a float) for the paper's encoding with even "
    "d_model, without building the encoding.",
)
register(
    "rotation-matrix",
    _ch2_rotation_matrix,
    lambda rng: (int(rng.integers(-100, 101)), _ch2_even_d(rng)),
    "f(offset, d_model) -> the (d_model, d_model) matrix R with PE[pos + offset] = R @ PE[pos] "
    "for every pos (paper layout, base 10000).",
)

# === Chapter 3 ===
# References are plain loops written from the papers' formulas, independent of
# `positional.memn2n_encoding`, `positional.alibi_bias` and `lab.cosine_similarity_matrix`.


def _ch3_memn2n_encoding(J: int, d: int) -> np.ndarray:
    """l_kj = (1 - j/J) - (k/d)(1 - 2j/J) with 1-based j, k; row j-1, column k-1; (J, d)."""
    out = np.empty((J, d))
    for j in range(1, J + 1):
        for k in range(1, d + 1):
            out[j - 1, k - 1] = (1 - j / J) - (k / d) * (1 - 2 * j / J)
    return out


def _ch3_alibi_bias(n_heads: int, T: int) -> np.ndarray:
    """b[h, i, j] = -m_h |i - j| with m_h = 2^(-8 (h+1) / n_heads), h = 0..n_heads-1."""
    out = np.empty((n_heads, T, T))
    for h in range(n_heads):
        slope = 2.0 ** (-8.0 * (h + 1) / n_heads)
        for i in range(T):
            for j in range(T):
                out[h, i, j] = -slope * abs(i - j)
    return out


def _ch3_cosine_similarity(w: np.ndarray) -> np.ndarray:
    """S[i, j] = w_i . w_j / (|w_i| |w_j|) for the rows of w; (n, n)."""
    n = w.shape[0]
    out = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            out[i, j] = w[i] @ w[j] / (np.linalg.norm(w[i]) * np.linalg.norm(w[j]))
    return out


register(
    "memn2n-encoding",
    _ch3_memn2n_encoding,
    lambda rng: (int(rng.integers(1, 25)), int(rng.integers(1, 33))),
    "f(J, d) -> the (J, d) array with entry [j-1, k-1] = (1 - j/J) - (k/d)(1 - 2j/J) "
    "for j = 1..J, k = 1..d (MemN2N's position encoding).",
)
register(
    "alibi-bias",
    _ch3_alibi_bias,
    lambda rng: (int(2 ** rng.integers(0, 5)), int(rng.integers(1, 13))),
    "f(n_heads, T) -> the (n_heads, T, T) ALiBi bias -m_h |i - j|, with slopes "
    "m_h = 2^(-8h/n_heads) for h = 1..n_heads (n_heads a power of two).",
)
register(
    "learned-similarity",
    _ch3_cosine_similarity,
    lambda rng: (rng.standard_normal((int(rng.integers(2, 20)), int(rng.integers(1, 17)))),),
    "f(w) -> the (n, n) matrix of cosine similarities between the rows of w.",
)

# === Chapter 4 ===


def _ch4_causal_mask(T):
    from .attention import causal_mask

    return causal_mask(T)


def _ch4_causal_mask_inputs(rng):
    return (int(rng.integers(1, 13)),)


def _ch4_masked_softmax(scores, mask):
    from .attention import scaled_dot_product_attention

    # Zero queries and keys give zero dot products; the scores enter as the additive bias.
    T_q, T_k = scores.shape
    q, k = scores.new_zeros(T_q, 1), scores.new_zeros(T_k, 1)
    _, weights = scaled_dot_product_attention(q, k, k, mask=mask, bias=scores, return_weights=True)
    return weights


def _ch4_masked_softmax_inputs(rng):
    T_q, T_k = (int(n) for n in rng.integers(1, 7, size=2))
    scores = torch.from_numpy(rng.normal(0.0, 3.0, size=(T_q, T_k)))
    mask = torch.from_numpy(rng.random((T_q, T_k)) < 0.6)
    mask[int(rng.integers(T_q))] = False  # at least one fully masked row
    return scores, mask


def _ch4_attention(q, k, v, mask):
    from .attention import scaled_dot_product_attention

    return scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True)


def _ch4_attention_inputs(rng):
    T_q, T_k, d_k, d_v = (int(n) for n in rng.integers(1, 7, size=4))
    q, k = (torch.from_numpy(rng.normal(size=(T, d_k))) for T in (T_q, T_k))
    v = torch.from_numpy(rng.normal(size=(T_k, d_v)))
    mask = torch.from_numpy(rng.random((T_q, T_k)) < 0.7)
    mask[:, int(rng.integers(T_k))] = True  # every query may attend to at least one key
    return q, k, v, mask


register(
    "causal-mask",
    _ch4_causal_mask,
    _ch4_causal_mask_inputs,
    "causal_mask(T): a (T, T) bool tensor, True where key j may be attended from query i (j <= i).",
)
register(
    "masked-softmax",
    _ch4_masked_softmax,
    _ch4_masked_softmax_inputs,
    "masked_softmax(scores, mask): softmax over the last axis of scores where mask is True, "
    "exactly 0 where it is False, and an all-zero row where a whole row is masked (no NaN).",
)
register(
    "attention-weights",
    _ch4_attention,
    _ch4_attention_inputs,
    "attention(q, k, v, mask): (out, weights) of masked scaled dot-product attention, "
    "weights = softmax(q k^T / sqrt(d_k)) with masked keys at 0, out = weights v.",
)

# === Chapter 5 ===


def _ch5_layer_norm(x, gamma, beta, eps):
    # statistics over the last dimension, biased variance (divide by d)
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return gamma * (x - mu) / torch.sqrt(var + eps) + beta


def _ch5_layer_norm_inputs(rng):
    B, T, d = (int(n) for n in rng.integers(1, 6, size=3))
    d += 1  # at least 2 features
    x = torch.from_numpy(rng.normal(rng.normal(0, 3), rng.uniform(0.1, 5), size=(B, T, d)))
    gamma = torch.from_numpy(rng.normal(1.0, 0.5, size=d))
    beta = torch.from_numpy(rng.normal(0.0, 0.5, size=d))
    eps = float(rng.choice([1e-5, 1e-3, 0.1]))
    return x, gamma, beta, eps


register(
    "layer-norm",
    _ch5_layer_norm,
    _ch5_layer_norm_inputs,
    "layer_norm(x, gamma, beta, eps): normalise each token vector x[b, t, :] with its own mean "
    "and biased variance, then scale by gamma and shift by beta; same shape as x.",
)


def _ch5_batch_norm_stats(x):
    # one mean and one (biased) variance per feature, over batch AND positions
    mean = x.mean(dim=(0, 1))
    var = ((x - mean) ** 2).mean(dim=(0, 1))
    return mean, var


def _ch5_batch_norm_stats_inputs(rng):
    B, T, d = (int(n) for n in rng.integers(1, 7, size=3))
    B += 1  # at least two samples
    return (torch.from_numpy(rng.normal(0.0, 2.0, size=(B, T, d)) + rng.normal(0, 2, size=d)),)


register(
    "batch-norm-stats",
    _ch5_batch_norm_stats,
    _ch5_batch_norm_stats_inputs,
    "batch_norm_stats(x) for x of shape (B, T, d): the tuple (mean, var) of per-feature "
    "statistics over the batch and position axes, each of shape (d,), var biased.",
)


def _ch5_block_inputs(rng):
    from .layers import TransformerBlock

    seed = int(rng.integers(0, 2**31 - 1))
    d_model = 4 * int(rng.integers(1, 5))
    with torch.random.fork_rng():  # leave the notebook's global torch RNG untouched
        torch.manual_seed(seed)
        block = TransformerBlock(d_model, 2, 2 * d_model, norm_position="pre", causal=True)
        with torch.no_grad():
            for ln in (block.ln1, block.ln2):
                ln.weight.normal_(1.0, 0.2)
                ln.bias.normal_(0.0, 0.2)
        x = torch.randn(int(rng.integers(1, 4)), int(rng.integers(1, 7)), d_model)
    return x, block.attn, block.ffn, block.ln1, block.ln2


def _ch5_pre_ln_block(x, attn, ffn, ln1, ln2):
    from .layers import TransformerBlock

    d_model, n_heads = attn.d_model, attn.n_heads
    block = TransformerBlock(d_model, n_heads, ffn.d_ff, norm_position="pre", causal=True)
    block.attn, block.ffn, block.ln1, block.ln2 = attn, ffn, ln1, ln2
    with torch.no_grad():
        return block(x)


register(
    "pre-ln-block",
    _ch5_pre_ln_block,
    _ch5_block_inputs,
    "pre_ln_block(x, attn, ffn, ln1, ln2): one Pre-LN block with causal self-attention, "
    "x + Attn(LN1(x)) then + FFN(LN2(.)), where attn(h, is_causal=True) returns (out, None).",
)

# === Chapter 6 ===
# Training (book/06_training.ipynb). References are written out from the formulas, independent
# of `train.lr_at` and `TransformerLM.num_parameters` (the chapter checks those agree).


def _ch6_lr_schedule(step: int, lr: float, min_lr: float, warmup_steps: int, steps: int) -> float:
    """Linear warm-up to lr over warmup_steps (update s gets lr (s+1)/w), then cosine to min_lr."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, steps - warmup_steps))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + np.cos(np.pi * progress))


def _ch6_lr_schedule_inputs(rng: np.random.Generator) -> tuple:
    lr = float(10 ** rng.uniform(-4, -2))
    min_lr = float(lr * rng.choice([0.0, 0.1, 0.5]))
    warmup_steps = int(rng.integers(0, 50))
    steps = warmup_steps + int(rng.integers(1, 500))
    step = int(rng.integers(0, steps + 20))  # past the end too: the rate stays at min_lr
    return step, lr, min_lr, warmup_steps, steps


def _ch6_perplexity(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """exp of the mean negative log-probability of the targets; logits (B, T, V), targets (B, T)."""
    z = logits.double()
    log_probs = z - torch.logsumexp(z, dim=-1, keepdim=True)  # log softmax
    nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return float(torch.exp(nll.mean()))


def _ch6_perplexity_inputs(rng: np.random.Generator) -> tuple:
    B, T, V = int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(2, 30))
    logits = torch.from_numpy(rng.normal(0.0, rng.uniform(0.5, 4.0), size=(B, T, V))).float()
    targets = torch.from_numpy(rng.integers(0, V, size=(B, T)))
    return logits, targets


def _ch6_param_count(vocab_size: int, block_size: int, d_model: int, n_layers: int, d_ff: int,
                     positional: str, bias: bool) -> int:
    """Parameters of the chapter's decoder-only LM with a tied head (the shared matrix once)."""
    b = 1 if bias else 0
    embeddings = vocab_size * d_model
    position = block_size * d_model if positional == "learned" else 0
    attention = 4 * (d_model * d_model + b * d_model)  # q, k, v and out projections
    ffn = d_model * d_ff + b * d_ff + d_ff * d_model + b * d_model
    layer_norm = d_model + b * d_model  # gain, and a shift when biased
    return embeddings + position + n_layers * (attention + ffn + 2 * layer_norm) + layer_norm


def _ch6_param_count_inputs(rng: np.random.Generator) -> tuple:
    d_model = 4 * int(rng.integers(1, 33))  # any n_heads in {1, 2, 4} works with "rope"
    return (
        int(rng.integers(2, 300)), int(rng.integers(1, 513)), d_model, int(rng.integers(1, 7)),
        int(rng.integers(1, 5)) * d_model, str(rng.choice(["learned", "rope", "sinusoidal"])),
        bool(rng.integers(0, 2)),
    )


def _ch6_same_count(expected: int, got: Any) -> str | None:
    """Exact comparison: a parameter count is an integer, not approximately right."""
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        return f"expected an integer count, got {type(got).__name__} {got!r}"
    if int(got) != expected:
        return f"expected {expected:,}, got {int(got):,} (off by {int(got) - expected:+,})"
    return None


register(
    "lr-schedule",
    _ch6_lr_schedule,
    _ch6_lr_schedule_inputs,
    "lr(step, lr, min_lr, warmup_steps, steps): linear warm-up lr * (step + 1) / warmup_steps "
    "for step < warmup_steps, then a cosine from lr down to min_lr at step = steps (and "
    "min_lr after it).",
)
register(
    "perplexity",
    _ch6_perplexity,
    _ch6_perplexity_inputs,
    "perplexity(logits, targets) for logits (B, T, V) and targets (B, T): exp of the mean "
    "cross-entropy (natural log) of the targets, as a Python float.",
)
register(
    "param-count",
    _ch6_param_count,
    _ch6_param_count_inputs,
    "param_count(vocab_size, block_size, d_model, n_layers, d_ff, positional, bias): the "
    "number of trainable parameters of the chapter's TransformerLM (Pre-LN, tied head).",
    compare=_ch6_same_count,
)
