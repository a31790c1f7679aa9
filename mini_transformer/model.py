r"""A decoder-only Transformer language model (GPT-style), chapters 3 and 6.

The model assembles the pieces of chapters 2-5::

    idx (B, T) token ids
      -> token embedding                        (B, T, d_model)
      -> positional scheme (config.positional)
      -> n_layers causal TransformerBlocks      (B, T, d_model)
      -> final LayerNorm (Pre-LN only)
      -> LM head (tied to the token embedding)  (B, T, vocab_size) logits (tie_weights)

Initialisation follows GPT-2 (as nanoGPT): Linear and Embedding weights
$\sim \mathcal{N}(0, 0.02^2)$, biases zero (LayerNorm gains start at 1), and the two
projections that write into the residual stream in each block (``attn.out_proj``,
``ffn.linear2``) use std $0.02/\sqrt{2 n_\text{layers}}$, because ``2 n_layers`` of them are
summed.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import checks
from .alibi import ALiBi
from .attention import MultiHeadAttention, RotaryEmbedding
from .checks import (
    check_block_size,
    check_bool,
    check_choice,
    check_fields,
    check_float,
    check_heads,
    check_ids,
    check_instance,
    check_int,
    check_probability,
    check_size,
    check_tensor,
)
from .layers import FeedForward, LayerNorm, TransformerBlock
from .memn2n import MemN2NPositionalEncoding
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .tasks import IGNORE_INDEX  # -100: targets the loss skips (unscored positions)

__all__ = ["TransformerConfig", "TransformerLM"]

MAX_LEN = 4096  # the shortest sinusoidal table built (at least block_size)
COMPONENTS = {  # parameter name -> part, for num_parameters
    ".tok_emb.": "embeddings",
    ".pos_emb.": "positional",
    ".attn.": "attention",
    ".ffn.": "ffn",
    ".ln_f.": "norms",
    ".ln1.": "norms",
    ".ln2.": "norms",
    ".lm_head.": "head",
}


POSITIONAL_SCHEMES = ("none", "learned", "sinusoidal", "memn2n", "rope", "alibi")
EXTRAPOLATING = tuple(s for s in POSITIONAL_SCHEMES if s != "learned")  # accept T > block_size
ID_DTYPES = {"idx": (torch.long, torch.int32), "targets": (torch.long,)}


@dataclass
class TransformerConfig:
    """Hyper-parameters of :class:`TransformerLM`, checked on construction.

    ``d_ff=None`` means ``4 * d_model``; ``dropout`` applies to the embeddings, attention
    weights, residuals and FFN; ``bias=False`` drops every Linear and LayerNorm bias;
    ``tie_weights``: the LM head shares the token embedding's matrix.
    """

    vocab_size: int
    block_size: int
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int | None = None
    dropout: float = 0.0
    positional: str = "rope"
    norm_position: str = "pre"
    bias: bool = True
    fused_attention: bool = True
    tie_weights: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "d_model", "n_heads", "n_layers"):
            setattr(self, name, check_int(name, getattr(self, name), low=1))
        d_ff = 4 * self.d_model if self.d_ff is None else self.d_ff
        self.d_ff = check_int("d_ff", d_ff, low=1, why=" or None")
        check_heads(self.d_model, self.n_heads)
        if self.positional == "rope":  # RoPE rotates pairs of each head's dimensions
            check_int("d_head", self.d_head, low=1, even=True, why=" for a rotation")
        check_choice("positional", self.positional, POSITIONAL_SCHEMES)
        check_choice("norm_position", self.norm_position, ("pre", "post"))
        self.dropout = check_probability("dropout", self.dropout)
        for name in ("bias", "fused_attention", "tie_weights"):
            setattr(self, name, check_bool(name, getattr(self, name)))
        d, L = self.d_model, self.n_layers  # the weight matrices, float32, before building
        n_params = self.vocab_size * d * 2 + L * (4 * d * d + 2 * d * self.d_ff)
        check_size("the parameters (from vocab_size, d_model, d_ff, n_layers)", (n_params,))

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        """A plain dict (JSON-able; stored in checkpoints instead of a pickled object)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TransformerConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error (a sign of a foreign file)."""
        return cls(**check_fields("model_config", d, cls))


class TransformerLM(nn.Module):
    """A GPT-style causal language model: predicts token ``t + 1`` from tokens ``0..t``.

    Example::

        >>> cfg = TransformerConfig(vocab_size=84, block_size=64, d_model=64, n_heads=4, n_layers=2)
        >>> model = TransformerLM(cfg)
        >>> logits, loss = model(torch.zeros(2, 10, dtype=torch.long))
        >>> logits.shape
        torch.Size([2, 10, 84])
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = c = check_instance("config", config, TransformerConfig, "a TransformerConfig")
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.embed_scale, self.pos_emb, self.rotary, self.alibi = 1.0, None, None, None
        if c.positional == "learned":  # GPT-2: a trained vector per position, none past block_size
            self.pos_emb = LearnedPositionalEmbedding(c.block_size, c.d_model, init_std=0.02)
        elif c.positional == "sinusoidal":  # fixed sin/cos added to sqrt(d_model) * embeddings
            self.embed_scale = math.sqrt(c.d_model)  # as Vaswani et al. (section 3.4) do
            self.pos_emb = SinusoidalPositionalEncoding(c.d_model, max(MAX_LEN, c.block_size))
        elif c.positional == "memn2n":  # x * l: a weight per position and dimension, set by T
            self.pos_emb = MemN2NPositionalEncoding(c.d_model)
        elif c.positional == "rope":  # every attention layer rotates q and k by their positions
            self.rotary = RotaryEmbedding(c.d_head, max_len=c.block_size)
        elif c.positional == "alibi":  # every attention layer adds -slope * distance to its scores
            self.alibi = ALiBi(c.n_heads, c.block_size)
        # "none": no position at all (the causal mask alone leaks some)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(self._block() for _ in range(c.n_layers))
        # Pre-LN never normalises the residual stream inside the blocks: one final LN does.
        self.ln_f = LayerNorm(c.d_model, bias=c.bias) if c.norm_position == "pre" else nn.Identity()
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self._init_weights()
        if c.tie_weights:  # the same matrix maps ids to vectors and vectors to logits
            self.lm_head.weight = self.tok_emb.weight

    def _block(self) -> TransformerBlock:
        c, fused, rotary, alibi = self.config, self.config.fused_attention, self.rotary, self.alibi
        kw = {"dropout": c.dropout, "bias": c.bias}  # every part's
        attn = MultiHeadAttention(
            c.d_model, c.n_heads, fused_attention=fused, rotary=rotary, alibi=alibi, **kw
        )
        ffn = FeedForward(c.d_model, c.d_ff, **kw)
        return TransformerBlock(attn, ffn, norm_position=c.norm_position, causal=True, **kw)

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for block in self.blocks:
            nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.ffn.linear2.weight, mean=0.0, std=residual_std)

    def _check_idx(self, idx: torch.Tensor, targets=None, crop: bool = False) -> None:
        dims = "(B, T) of token ids"
        check_tensor("idx", idx, integer=True, ndim=2, dims=dims, nonempty=True)
        check_choice("idx.dtype", idx.dtype, ID_DTYPES["idx"])  # what the embedding takes
        T, c = idx.shape[1], self.config  # crop: the model sees the last block_size tokens
        if not crop and c.positional not in EXTRAPOLATING:
            check_block_size(T, c.block_size, EXTRAPOLATING)
        if not crop:  # the from-scratch path (or a fused math fallback) makes
            check_size("the attention scores (B, n_heads, T_q, T_k)", (len(idx), c.n_heads, T, T))
        check_ids("idx", idx, c.vocab_size)
        if targets is not None:
            shape = tuple(idx.shape)
            check_tensor("targets", targets, integer=True, shape=shape, dims=dims, nonempty=True)
            check_choice("targets.dtype", targets.dtype, ID_DTYPES["targets"])  # the loss's
            check_ids("targets", targets, c.vocab_size, ignore=IGNORE_INDEX)

    @checks.entry(_check_idx)  # idx, targets checked here; the parts get only what it made
    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""Next-token logits ``(B, T, vocab_size)`` for ids ``idx`` ``(B, T)``, and the loss.

        ``T`` may exceed ``block_size`` except for ``"learned"`` (``"sinusoidal"``: up to
        ``max(4096, block_size)``). The loss is the mean of $-\log p(\text{targets}_{b,t})$ in
        nats over the positions whose target is not ``IGNORE_INDEX`` (-100), or ``None``.
        """
        B, T = idx.shape
        x = self.tok_emb(idx)  # (B, T, d_model)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale  # sqrt(d_model) x
        if self.pos_emb is not None:
            x = self.pos_emb(x)  # added (learned, sinusoidal) or multiplied (memn2n)
        x = self.drop(x)
        for block in self.blocks:
            x = block(x)  # (B, T, d_model)
        x = self.ln_f(x)
        logits = self.lm_head(x)  # (B, T, vocab_size)
        if targets is None:
            return logits, None
        flat = logits.reshape(B * T, -1).float()  # (B T, vocab_size), the loss in float32
        return logits, F.cross_entropy(flat, targets.reshape(B * T), ignore_index=IGNORE_INDEX)

    @torch.no_grad()
    def attention_weights(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """Every layer's attention weights for ``idx``, ``n_layers`` x ``(B, n_heads, T, T)``, from
        one eval-mode forward pass; row ``t`` is query ``t``'s distribution over ``0..t``."""
        attns = [block.attn for block in self.blocks]
        try:
            for attn in attns:
                attn.keep_weights = True
            with evaluating(self):
                self(idx)
            return [attn.last_weights for attn in attns]  # each (B, n_heads, T, T)
        finally:
            for attn in attns:
                attn.keep_weights, attn.last_weights = False, None

    @torch.no_grad()
    def generate(
        self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
        top_k: int | None = None, generator: torch.Generator | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """Sample ``max_new_tokens`` tokens after ``idx``; returns ``(B, T + max_new_tokens)``.

        ``temperature=0`` is greedy. Sampling runs on the CPU with ``generator``: the same
        random draws on any device (the text differs only where a device's logits do).
        """
        temperature = self._check_generate(idx, max_new_tokens, temperature, top_k, generator)
        with evaluating(self), checks.trusted():  # idx checked; every new id is the model's
            for _ in range(max_new_tokens):
                logits, _ = self(idx[:, -self.config.block_size :])  # the last block_size tokens
                logits = logits[:, -1, :].float().cpu()  # (B, vocab_size)
                if temperature == 0:
                    next_id = logits.argmax(dim=-1, keepdim=True)
                else:
                    logits = _scaled_logits(logits, temperature)  # logits / temperature
                    if top_k is not None:
                        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
                        logits = logits.masked_fill(logits < kth, float("-inf"))
                    probs = F.softmax(logits, dim=-1)
                    next_id = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
                idx = torch.cat([idx, next_id.to(idx.device, idx.dtype)], dim=1)
        return idx

    def _check_generate(self, idx, max_new_tokens, temperature, top_k, generator) -> float:
        self._check_idx(idx, crop=True)
        check_int("max_new_tokens", max_new_tokens, low=0)
        temperature = check_float("temperature", temperature, low=0)
        if top_k is not None:
            check_int("top_k", top_k, low=1, high=self.config.vocab_size, why=" (or None)")
        if generator is not None:
            check_instance("generator", generator, torch.Generator, "a CPU torch.Generator")
            check_choice("generator's device", generator.device.type, ("cpu",))  # samples on CPU
        shape = (len(idx), idx.shape[1] + max_new_tokens)
        check_size("the output (B, T + max_new_tokens)", shape, torch.long)
        return temperature

    def num_parameters(self, by_component: bool = False) -> int | dict[str, int]:
        """Trainable parameters, a tied matrix once; ``by_component``: a dict by part and
        ``"total"`` (``head`` is 0 when tied; only ``"learned"`` has positional ones)."""
        check_bool("by_component", by_component)
        counts = dict.fromkeys(("embeddings", "positional", "attention", "ffn", "norms", "head"), 0)
        for name, p in self.named_parameters():  # shared parameters are yielded once
            part = next((part for key, part in COMPONENTS.items() if key in f".{name}"), "other")
            counts[part] = counts.get(part, 0) + p.numel()
        total = sum(counts.values())
        return counts | {"total": total} if by_component else total

    def flops_per_token(self, T: int | None = None) -> float:
        r"""Training FLOPs per token (forward + backward), as in PaLM (Chowdhery et al. 2022, B).

        .. math:: 6N + 12\, n_\text{layers}\, d_\text{model}\, T

        ``N``: the parameters in matrix multiplies (all but the position table; a tied
        embedding too, as the LM head, as nanoGPT counts), 2 FLOPs per token forward and 4
        backward, hence 6N (Kaplan et al. 2020). The second term: attention's ``QK^T`` and
        ``AV``, :math:`2 \cdot 2 T d_\text{model}` per token per layer forward, times 3, over
        the full ``T x T`` scores (PaLM does not subtract the causal half); ``T=block_size``.
        """
        c = self.config
        T = c.block_size if T is None else check_int("T", T, low=1)
        parts = self.num_parameters(by_component=True)
        n = parts["total"] - parts["positional"] - (0 if c.tie_weights else parts["embeddings"])
        return float(6 * n + 12 * c.n_layers * c.d_model * T)


@contextlib.contextmanager
def evaluating(model: nn.Module):
    """Eval mode (no dropout) inside the ``with`` block, the caller's mode restored after it."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _scaled_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature``; where a tiny temperature overflows, the logits are shifted
    first (softmax ignores it) and divided in float64, so the limit is greedy, not NaN."""
    scaled = logits / temperature
    if torch.isfinite(scaled).all():
        return scaled
    return (logits - logits.amax(dim=-1, keepdim=True)).double() / temperature
