"""Chapter 6's exercises (training): the learning-rate schedule, perplexity, parameter
count, training FLOPs, top-k filtering, global-norm clipping and a checked prediction about
the standard error of a sampled held-out loss.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch

from .ch5_layernorm import warm_up_optimizers
from .checking import exercise, random_tensor
from .comparing import close, exact_int


def _noam(step, d_model, warmup, from_zero=False, w_exp=1.5, pick=min, scale=True):
    s = step if from_zero else step + 1  # the paper's step_num counts from 1
    rate = pick(s**-0.5 if s else math.inf, s * warmup**-w_exp)  # the two meet at s = warmup
    return rate * (d_model**-0.5 if scale else 1.0)


exercise(
    "noam-schedule",
    "f(step, d_model, warmup_steps) -> the learning rate of the original Transformer's "
    "schedule for update step = 0, 1, ... (the paper's step_num = step + 1): d_model^-0.5 * "
    "min(step_num^-0.5, step_num * warmup_steps^-1.5).",
    inputs=lambda rng: (
        int(rng.integers(0, 20000)),
        int(2 ** rng.integers(6, 11)),
        int(rng.integers(1, 5000)),
    ),
    edge_cases={
        "the first update (step 0, step_num 1)": (0, 512, 4000),
        "the peak (step_num = warmup_steps)": (3999, 512, 4000),
        "long after the warm-up": (100_000, 512, 4000),
    },
    mistakes={
        "step_num = step: the paper counts from 1, so update 0 must get a rate": dict(
            from_zero=True
        ),
        "warmup_steps^-1 instead of ^-1.5: the two branches no longer meet at the peak": dict(
            w_exp=1.0
        ),
        "max instead of min: the rate must rise during the warm-up, then fall": dict(pick=max),
        "the factor d_model^-0.5 left out": dict(scale=False),
    },
    compare=close(rtol=1e-6, atol=0.0),
)(_noam)


def _ppl_inputs(rng: np.random.Generator) -> tuple:
    B, T, V = int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(2, 30))
    logits = random_tensor(rng, B, T, V, scale=float(rng.uniform(0.5, 4.0)), dtype=torch.float32)
    offset, targets = float(rng.choice([0.0, 50.0, -200.0])), rng.integers(0, V, size=(B, T))
    return logits + offset, torch.from_numpy(targets)


def _ppl(z, t, per_token=False, no_exp=False, naive=False, log_of_softmax=False, axis=-1, mx=-1):
    if mx != -1:  # a maximum over another axis: not a constant over the vocabulary
        z = z.double() - z.double().amax(mx, keepdim=True)
    if log_of_softmax:  # softmax in the logits' own dtype, then log: exp(-200) is 0 in float32
        logp = z.softmax(-1).double().log()
    elif naive:  # exp without subtracting the maximum
        logp = (z.exp() / z.exp().sum(-1, keepdim=True)).log()
    else:  # log p = logits - logsumexp(logits), in float64
        logp = z.double().log_softmax(axis)
    nll = -logp.gather(-1, t[..., None]).squeeze(-1)  # -log p(target)
    if no_exp:
        return float(nll.mean())
    return float(nll.exp().mean()) if per_token else float(nll.mean().exp())


exercise(
    "perplexity",
    "f(logits, targets) for logits (B, T, V) and targets (B, T) -> exp of the mean cross-entropy "
    "(natural log) of the targets, a Python float, computed stably.",
    inputs=_ppl_inputs,
    edge_cases={
        "float32 logits near 1000 (exp overflows)": (
            torch.tensor([[[1000.0, 999.0, 997.0], [1001.0, 1000.0, 1000.0]]]),
            torch.tensor([[0, 2]]),
        ),
        "float32 logits near -1000 (exp underflows)": (
            torch.tensor([[[-1000.0, -999.0, -1003.0]]]),
            torch.tensor([[1]]),
        ),
        "one class": (torch.zeros(1, 3, 1), torch.zeros(1, 3, dtype=torch.long)),
        # m11 of the 2026-11-24 review: a target 200 below its row's maximum. The stable
        # answer is finite (mean NLL ~ 200 / 4 = 50); softmax-then-log gives log(0) = -inf.
        "a float32 target 200 below the maximum logit (softmax underflows to 0)": (
            torch.tensor(
                [[[0.0, -200.0, -1.0], [3.0, 0.0, 1.0], [0.5, 0.0, 0.2], [0.0, 0.0, 0.0]]]
            ),
            torch.tensor([[1, 0, 0, 2]]),
        ),
    },
    mistakes={
        "log of the softmax (a probability that underflows to 0 gives log 0 = -inf); "
        "use logits - logsumexp(logits)": dict(log_of_softmax=True),
        "exp without subtracting the maximum (overflows or underflows in float32)": dict(
            naive=True
        ),
        "2 ** loss with the loss in nats: mixing the bases (e ** nats = 2 ** bits)": lambda z, t: (
            2.0 ** _ppl(z, t, no_exp=True)
        ),
        "mean of per-token perplexities instead of exp of the mean loss": dict(per_token=True),
        "the cross-entropy itself, not its exponential": dict(no_exp=True),
        "log-softmax over the positions (axis 1): normalise over the vocabulary, the last "
        "axis": dict(axis=1),
        "log-softmax over the batch (axis 0): normalise over the vocabulary, the last axis": dict(
            axis=0
        ),
        "the maximum taken over the positions (axis 1): the shift must be one constant per "
        "row of the vocabulary, its maximum over the last axis": dict(mx=1),
        "the maximum taken over the batch (axis 0): the shift must be one constant per row of "
        "the vocabulary, its maximum over the last axis": dict(mx=0),
    },
    compare=close(rtol=1e-4, atol=0.0),  # float32 logits near 200: log-sum-exp error ~1e-5
)(_ppl)


def _count(
    V, block, d, L, d_ff, positional, bias, head=False, final_ln=True, learned_always=False,
    no_table=False, ln_shift=False,
):  # fmt: skip
    # Pre-LN layers (4 attention and 2 feed-forward linears, 2 LayerNorms), a final LayerNorm,
    # the head tied to the token embedding; bias=False: no linear biases, LayerNorms without beta
    b, ln = int(bias), int(bias or ln_shift)  # ln_shift: LayerNorm betas counted without biases
    per_layer = 4 * (d * d + b * d) + d * d_ff + b * d_ff + d_ff * d + b * d + 2 * (1 + ln) * d
    learned = (positional == "learned" and not no_table) or learned_always
    pos = block * d if learned else 0
    return V * d * (2 if head else 1) + pos + L * per_layer + ((1 + ln) * d if final_ln else 0)


def _count_inputs(rng: np.random.Generator) -> tuple:
    d = 4 * int(rng.integers(1, 33))
    V, block, L = int(rng.integers(2, 300)), int(rng.integers(1, 513)), int(rng.integers(1, 7))
    d_ff = int(rng.integers(1, 5)) * d
    positional, bias = str(rng.choice(["learned", "rope", "sinusoidal"])), bool(rng.integers(0, 2))
    return V, block, d, L, d_ff, positional, bias


exercise(
    "param-count",
    "f(vocab_size, block_size, d_model, n_layers, d_ff, positional, bias) -> the number of "
    "trainable parameters of the chapter's decoder-only LM (Pre-LN, final LayerNorm, head tied "
    "to the token embedding; with bias=False no linear biases and LayerNorms without shift).",
    inputs=_count_inputs,
    edge_cases={
        "learned positions, biases": (65, 256, 384, 6, 1536, "learned", True),
        "RoPE, no biases": (84, 128, 128, 4, 512, "rope", False),
    },
    mistakes={
        "the tied head counted a second time": dict(head=True),
        "the final LayerNorm forgotten": dict(final_ln=False),
        "a position table counted for a scheme other than 'learned'": dict(learned_always=True),
        "the learned position table left out (block_size * d_model parameters)": dict(
            no_table=True
        ),
        "LayerNorm shifts (beta) counted with bias=False: (2 n_layers + 1) * d_model too many": (
            dict(ln_shift=True)
        ),
    },
    compare=exact_int,
)(_count)


def _flops(N, L, d, T, tokens, fwd=False, attn=True, seq=False):
    # forward: 2 N (a multiply and an add per weight) + 4 L d T (q k^T and weights @ v);
    # the backward pass costs twice the forward
    per_token = (2 if fwd else 6) * N + ((12 * L * d * (T * T if seq else T)) if attn else 0)
    return per_token * tokens


def _flops_inputs(rng: np.random.Generator) -> tuple:
    L, d = int(rng.integers(1, 49)), 64 * int(rng.integers(1, 65))
    N = 12 * L * d * d + int(rng.integers(1000, 10**8))
    return N, L, d, int(2 ** rng.integers(6, 14)), int(rng.integers(10**6, 10**12))


exercise(
    "train-flops",
    "f(n_params, n_layers, d_model, T, n_tokens) -> the floating-point operations of training "
    "on n_tokens tokens: (6 N + 12 L d T) per token (forward and backward, attention scores "
    "included).",
    inputs=_flops_inputs,
    edge_cases={"nanoGPT's shakespeare-char size": (10_650_000, 6, 384, 256, 5000 * 64 * 256)},
    mistakes={
        "forward pass only (2 N per token)": dict(fwd=True),
        "the attention term 12 L d T left out": dict(attn=False),
        "attention counted per sequence (T^2) for every token": dict(seq=True),
    },
    compare=close(rtol=1e-9, atol=0.0),
)(_flops)


def _top_k_inputs(rng: np.random.Generator) -> tuple:
    B, V = int(rng.integers(1, 4)), int(rng.integers(1, 20))
    return random_tensor(rng, B, V, scale=2.0, dtype=torch.float32), int(rng.integers(1, V + 3))


def _topk(z, k, fill=float("-inf"), plus=0, smallest=False):
    out = z.clone()
    for row in out:
        order = sorted(row.tolist(), reverse=not smallest)
        kth = order[min(k + plus, len(order)) - 1]  # the k-th largest value: ties are kept
        row[(row > kth) if smallest else (row < kth)] = fill
    return out


exercise(
    "top-k",
    "f(logits, k) for logits (B, V) -> a new tensor in which every logit smaller than the k-th "
    "largest of its row is -inf (ties with the k-th are kept; k >= V keeps all); logits unchanged.",
    inputs=_top_k_inputs,
    edge_cases={
        "ties at the k-th value": (torch.tensor([[1.0, 3.0, 3.0, 0.5, 3.0]]), 2),
        "k larger than the vocabulary": (torch.tensor([[0.0, -1.0]]), 5),
        "k = 1": (torch.tensor([[0.2, 0.9, -0.3], [2.0, 1.0, 0.0]]), 1),
    },
    mistakes={
        "the others set to 0, not -inf (a logit of 0 is not a probability of 0)": dict(fill=0.0),
        "k + 1 kept": dict(plus=1),
        "the k smallest kept": dict(smallest=True),
    },
    compare=close(rtol=0.0, atol=0.0, same_dtype=True),
)(_topk)


def _clip_inputs(rng: np.random.Generator) -> tuple:
    shapes = [
        tuple(int(n) for n in rng.integers(1, 5, size=rng.integers(1, 3)))
        for _ in range(int(rng.integers(1, 4)))
    ]
    scale = float(10 ** rng.uniform(-1, 1))
    return [random_tensor(rng, *s, scale=scale) for s in shapes], float(rng.uniform(0.5, 3.0))


def _clip(grads, max_norm, per_tensor=False, norm_after=False, always=False, add_norms=False):
    if per_tensor:
        out = [g * min(1.0, max_norm / max(float(g.norm()), 1e-300)) for g in grads]
        return out, math.sqrt(sum(float(g.norm()) ** 2 for g in grads))
    total = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))  # the global norm
    total = sum(float(g.norm()) for g in grads) if add_norms else total
    factor = max_norm / total if (always or total > max_norm) else 1.0
    out = [g * factor for g in grads]
    return out, (min(total, max_norm) if norm_after else total)


_f64 = partial(torch.tensor, dtype=torch.float64)


def _compare_clip(expected, got) -> str | None:
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        return f"expected an answer (clipped_grads, norm_before), got {type(got).__name__}"
    n = len(expected[0])
    if not isinstance(got[0], (list, tuple)) or len(got[0]) != n:
        return f"expected a list of {n} clipped gradients as the first item"
    # the norm first (it explains the gradients); rtol 1e-5 admits PyTorch's own factor
    # max_norm / (norm + 1e-6), 2e-6 off at most where clipping happens (norm > 0.5)
    for i, (e, g) in enumerate([(expected[1], got[1]), *zip(expected[0], got[0], strict=True)]):
        if (msg := close(rtol=1e-5, atol=1e-12)(e, g)) is not None:
            return f"gradient {i - 1}: {msg}" if i else f"the norm: {msg}"
    return None


exercise(
    "grad-clip",
    "f(grads, max_norm) for a list of gradient tensors -> (clipped, norm): if the global norm "
    "sqrt(sum of all squared entries) exceeds max_norm, every gradient is scaled by max_norm / "
    "norm; otherwise they are returned unchanged. norm is the global norm before clipping; "
    "the tensors in grads are left unchanged (new tensors returned, not clipped in place).",
    inputs=_clip_inputs,
    edge_cases={
        "norm below the threshold (nothing changes)": ([_f64([0.3, 0.4])], 1.0),
        "two tensors, each under the threshold, together over it": (
            [_f64([0.6, 0.0]), _f64([[0.0], [0.8]])],
            0.9,
        ),
    },
    mistakes={
        "each tensor clipped by its own norm, not by the global norm": dict(per_tensor=True),
        "the norm returned after clipping, not before (clip_grad_norm_ returns it before)": dict(
            norm_after=True
        ),
        "gradients scaled up to max_norm when their norm is below it": dict(always=True),
        "the tensors' norms added: the global norm is the square root of the sum of their "
        "squared norms": dict(add_norms=True),
    },
    compare=_compare_clip,
    warm_up=warm_up_optimizers,  # for an answer that builds an optimizer
)(_clip)


exercise(
    "se-prediction",
    "Predict, before running anything: the held-out loss is estimated from n random windows, "
    "with a standard error s. By what whole factor must n grow for the standard error to "
    "fall to s / 2?",
    mistakes={
        "2: as if the standard error fell like 1 / n, not 1 / sqrt(n)": 2,
        "16: the factor for a quarter of the error, not a half": 16,
    },
    compare=exact_int,
    hint="how does the standard error of a mean of n independent windows depend on n? Set "
    "that expression at n' equal to half of it at n, and solve for n' / n.",
    explanation=(
        "The mean of n independent windows has standard error sigma / sqrt(n), sigma the spread "
        "of one window's loss: halving it needs sqrt(n) to double, so 4 times the windows "
        "(16,384 -> 65,536 characters). 2 would be right for an error falling like 1 / n. Every "
        "window of the held-out text removes the error of choosing windows (not that of the four "
        "plays being one sample of Shakespeare), which is why section 6.5 reports it."
    ),
)(lambda: 4)
