r"""A decoder-only Transformer language model (GPT-style), readable in one sitting.

The model of chapter 6, assembled from the pieces of chapters 2-5::

    idx (B, T) token ids
      -> token embedding                        (B, T, d_model)
      -> positional scheme (see below)
      -> n_layers causal TransformerBlocks      (B, T, d_model)
      -> final LayerNorm (Pre-LN only)
      -> LM head (tied to the token embedding)  (B, T, vocab_size) logits

The positional schemes (``TransformerConfig.positional``):

- ``"none"``: no position information at all (causal masking alone still leaks some).
- ``"learned"``: a learned vector per position added to the embedding (GPT-2); cannot
  go past ``block_size``.
- ``"sinusoidal"``: the fixed encoding of Vaswani et al. added to the embedding, which is
  first multiplied by :math:`\sqrt{d_\text{model}}` as in the paper (section 3.4), so that
  the two have comparable sizes.
- ``"memn2n"``: MemN2N's position encoding, *multiplied* element-wise into the embedding
  (with ``J = T``, so a position's scale depends on the length of the input).
- ``"rope"``: rotary embedding applied to queries and keys in every attention layer.
- ``"alibi"``: a per-head linear distance penalty added to the attention scores.

The first four act on the input, the last two inside attention: the model builds one
``RotaryEmbedding`` or ``ALiBi`` and gives it to every attention layer when it is
constructed (nothing positional is passed on a forward call). Each scheme is one row of
:data:`~mini_transformer.schemes.SCHEMES`; nothing else in the model compares scheme names.

Initialisation follows GPT-2 (Radford et al. 2019, as in nanoGPT): every linear and
embedding weight :math:`\sim \mathcal{N}(0, 0.02^2)`, biases zero, and the two projections
that write into the residual stream in each block (``attn.out_proj`` and ``ffn.linear2``)
use std :math:`0.02/\sqrt{2 n_\text{layers}}`, because ``2 n_layers`` of them are summed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from .alibi import ALiBi
from .attention import MultiHeadAttention
from .checks import (
    check_bool,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_probability,
    check_size,
    check_tensor,
)
from .layers import FeedForward, LayerNorm, TransformerBlock
from .positional import RotaryEmbedding

# The scheme table lives in schemes.py; POSITIONAL_SCHEMES is importable from here too.
from .schemes import EXTRAPOLATING_SCHEMES, SCHEMES
from .schemes import POSITIONAL_SCHEMES as POSITIONAL_SCHEMES
from .tasks import IGNORE_INDEX  # -100: targets the loss skips (unscored positions)

__all__ = [
    "TransformerConfig",
    "TransformerLM",
]


@dataclass
class TransformerConfig:
    """Hyper-parameters of :class:`TransformerLM` (validated on construction).

    Attributes:
        vocab_size: number of token ids, ``>= 1``.
        block_size: the context length the model is trained on, ``>= 1``.
        d_model: width of the residual stream, divisible by ``n_heads``.
        n_heads: attention heads per layer (``d_head = d_model // n_heads``; even for ``"rope"``).
        n_layers: number of Transformer blocks.
        d_ff: hidden size of the feed-forward blocks; ``None`` means ``4 * d_model``.
        dropout: probability in ``[0, 1)`` (embedding, attention, residual and FFN dropout).
        positional: one of :data:`~mini_transformer.schemes.POSITIONAL_SCHEMES`.
        norm_position: ``"pre"`` (final LayerNorm before the head) or ``"post"``.
        bias: biases in the linear layers and LayerNorms (``False``: none, slightly faster).
        fused_attention: use PyTorch's fused attention kernel.
        tie_weights: the LM head shares its weight with the token embedding.
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
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        self.d_ff = check_int("d_ff", self.d_ff, low=1, why=" or None")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={self.d_model} "
                f"and n_heads={self.n_heads}"
            )
        check_choice("positional", self.positional, POSITIONAL_SCHEMES)
        if SCHEMES[self.positional].rotary and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                "d_model // n_heads must be even for positional='rope' (it rotates pairs), "
                f"got {self.d_model // self.n_heads}"
            )
        check_choice("norm_position", self.norm_position, ("pre", "post"))
        self.dropout = check_probability("dropout", self.dropout)
        for name in ("bias", "fused_attention", "tie_weights"):
            setattr(self, name, check_bool(name, getattr(self, name)))
        d, L = self.d_model, self.n_layers  # parameters, float32, before building the model
        n_params = self.vocab_size * d * 2 + L * (4 * d * d + 2 * d * self.d_ff)
        check_size(
            "the parameters (from vocab_size, d_model, d_ff, n_layers)", (n_params,), torch.float32
        )

    @property
    def d_head(self) -> int:
        """Per-head dimension ``d_model // n_heads``."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        """A plain dict (JSON-able; stored in checkpoints instead of a pickled object)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TransformerConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error (a sign of a foreign file)."""
        if not isinstance(d, dict):
            raise TypeError(f"config must be a dict, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown TransformerConfig fields {unknown}; known: {sorted(known)}")
        return cls(**d)


class TransformerLM(nn.Module):
    """A GPT-style causal language model: predicts token ``t + 1`` from tokens ``0..t``.

    Example::

        >>> cfg = TransformerConfig(vocab_size=84, block_size=64, d_model=64, n_heads=4, n_layers=2)
        >>> model = TransformerLM(cfg)
        >>> logits, loss = model(torch.zeros(2, 10, dtype=torch.long))
        >>> logits.shape
        torch.Size([2, 10, 84])
    """

    #: Check that token ids lie in ``0..vocab_size-1`` on every call (see ``_check_idx``).
    check_token_ids: bool = True

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        scheme = SCHEMES[c.positional]
        self.embed_scale = math.sqrt(c.d_model) if scheme.scale_embeddings else 1.0
        self.pos_emb: nn.Module | None = scheme.input(c)
        # attention-side schemes: one instance, shared by every attention layer
        self.rotary = RotaryEmbedding(c.d_head, max_len=c.block_size) if scheme.rotary else None
        self.alibi = ALiBi(c.n_heads, c.block_size) if scheme.alibi else None
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(self._block() for _ in range(c.n_layers))
        # Pre-LN never normalises the residual stream inside the blocks: one final LN does.
        self.ln_f = LayerNorm(c.d_model, bias=c.bias) if c.norm_position == "pre" else nn.Identity()
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self._init_weights()
        if c.tie_weights:  # the same matrix maps ids to vectors and vectors to logits
            self.lm_head.weight = self.tok_emb.weight

    def _block(self) -> TransformerBlock:
        """One causal block: attention (with the shared rotary/ALiBi) and a feed-forward block."""
        c = self.config
        attn = MultiHeadAttention(
            c.d_model,
            c.n_heads,
            dropout=c.dropout,
            bias=c.bias,
            fused_attention=c.fused_attention,
            rotary=self.rotary,
            alibi=self.alibi,
        )
        ffn = FeedForward(c.d_model, c.d_ff, dropout=c.dropout, bias=c.bias)
        return TransformerBlock(
            attn, ffn, norm_position=c.norm_position, causal=True, dropout=c.dropout, bias=c.bias
        )

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

    # ------------------------------------------------------------------ forward

    def _check_idx(
        self, idx: torch.Tensor, name: str = "idx", allow_ignore: bool = False
    ) -> tuple[int, int]:
        check_tensor(name, idx, integer=True, ndim=2, dims="(B, T) of token ids", nonempty=True)
        B, T = idx.shape
        c = self.config
        if T > c.block_size and not SCHEMES[c.positional].extrapolates:
            raise ValueError(
                f"sequence length T={T} exceeds block_size={c.block_size}: a learned position "
                "embedding has no vector for unseen positions (crop the input, or use a scheme "
                f"from {EXTRAPOLATING_SCHEMES})"
            )
        table = getattr(self.pos_emb, "max_len", T)  # an input-side table's length
        if T > table:
            raise ValueError(f"T={T} exceeds the {c.positional} table's max_len={table}")
        # A data-dependent check: reading min/max makes a GPU host wait, so it is skipped
        # when compiled and when the caller checked the ids already (the training loop
        # checks the whole corpus once and sets ``check_token_ids = False``).
        if self.check_token_ids and not torch.compiler.is_compiling():
            ids = idx[idx != IGNORE_INDEX] if allow_ignore else idx
            if allow_ignore and ids.numel() == 0:
                raise ValueError(
                    f"every entry of {name} is {IGNORE_INDEX} (ignored): the loss would be NaN"
                )
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= c.vocab_size:
                bad = lo if lo < 0 else hi
                raise ValueError(f"{name} contains token id {bad}, outside 0..{c.vocab_size - 1}")
        return B, T

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Next-token logits at every position, and the loss if ``targets`` are given.

        Args:
            idx: token ids, integer tensor ``(B, T)``. ``T`` may exceed ``block_size`` for
                every scheme except ``"learned"`` (evaluation past the trained context).
            targets: ``(B, T)`` ids of the next tokens, or ``None``. Entries equal to
                ``IGNORE_INDEX`` (-100, PyTorch's convention) are not scored, so the
                synthetic tasks of :mod:`mini_transformer.data` can mark unscored positions.

        Returns:
            ``(logits, loss)``: logits ``(B, T, vocab_size)``; loss the mean cross-entropy
            :math:`-\\frac{1}{BT}\\sum_{b,t}\\log p(\\text{targets}_{b,t})` (in nats, over the
            scored positions), or ``None``.
        """
        B, T = self._check_idx(idx)
        if targets is not None:
            self._check_idx(targets, "targets", allow_ignore=True)
            if targets.shape != idx.shape:
                raise ValueError(
                    f"targets must have the shape of idx {tuple(idx.shape)}, "
                    f"got {tuple(targets.shape)}"
                )
        x = self.tok_emb(idx)  # (B, T, d_model)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        if self.pos_emb is not None:
            x = self.pos_emb(x)  # added (learned, sinusoidal) or multiplied (memn2n)
        x = self.drop(x)
        for block in self.blocks:
            x = block(x)  # (B, T, d_model)
        x = self.ln_f(x)
        logits = self.lm_head(x)  # (B, T, vocab_size)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.reshape(B * T, -1).float(), targets.reshape(B * T), ignore_index=IGNORE_INDEX
            )
        return logits, loss

    @torch.no_grad()
    def attention_weights(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """The attention weights of every layer for input ``idx`` (for plotting).

        Returns a list of ``n_layers`` tensors of shape ``(B, n_heads, T, T)``; row ``t`` of
        a head is the distribution over positions ``0..t`` that query ``t`` attends to (the
        causal mask makes the upper triangle exactly zero). One ordinary forward pass in
        eval mode (no dropout) with every attention layer's ``keep_weights`` on (so the
        from-scratch path computes the maps); the model's mode is left as it was.
        """
        was_training = self.training
        attns = [block.attn for block in self.blocks]
        self.eval()
        try:
            for attn in attns:
                attn.keep_weights = True
            self(idx)
            return [attn.last_weights for attn in attns]  # each (B, n_heads, T, T)
        finally:
            for attn in attns:
                attn.keep_weights, attn.last_weights = False, None
            self.train(was_training)

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample ``max_new_tokens`` tokens after ``idx``, one at a time.

        Each step feeds the last ``block_size`` tokens (the context the model was trained
        on; every scheme is cropped, a learned one must be), divides the last logits by
        ``temperature``, keeps the ``top_k`` largest (if given) and samples from the softmax.
        ``temperature=0`` picks the most likely token (greedy). Sampling happens on the CPU
        with ``generator``, so a seeded CPU generator gives the same text on any device.

        Returns:
            ``(B, T + max_new_tokens)`` token ids (the prompt included). The model's
            train/eval mode is restored afterwards.
        """
        if isinstance(idx, torch.Tensor) and idx.dim() == 2:  # the prompt is cropped: check that
            self._check_idx(idx[:, -self.config.block_size :])
        else:
            self._check_idx(idx)
        check_int("max_new_tokens", max_new_tokens, low=0)
        temperature = check_float("temperature", temperature, low=0)
        if top_k is not None:
            check_int("top_k", top_k, low=1, high=self.config.vocab_size, why=" (or None)")
        if generator is not None:
            check_instance("generator", generator, torch.Generator, "a CPU torch.Generator")
            if generator.device.type != "cpu":
                raise ValueError(
                    "generator must be a CPU torch.Generator (sampling runs on the CPU), "
                    f"got one on {generator.device}"
                )
        check_size(
            "the output (B, T + max_new_tokens)",
            (idx.shape[0], idx.shape[1] + max_new_tokens),
            torch.long,
        )
        was_training = self.training
        self.eval()
        try:
            for _ in range(max_new_tokens):
                context = idx[:, -self.config.block_size :]  # (B, <= block_size)
                logits, _ = self(context)
                logits = logits[:, -1, :].float().cpu()  # (B, vocab_size)
                if temperature == 0:
                    next_id = logits.argmax(dim=-1, keepdim=True)
                else:
                    scaled = logits / temperature
                    if not torch.isfinite(scaled).all():  # a tiny temperature overflows:
                        # shift first (softmax ignores it) and divide in float64 (where the
                        # temperature is not 0), so the limit is greedy, not NaN
                        shifted = (logits - logits.amax(dim=-1, keepdim=True)).double()
                        scaled = shifted / temperature
                    logits = scaled
                    if top_k is not None:
                        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
                        logits = logits.masked_fill(logits < kth, float("-inf"))
                    probs = F.softmax(logits, dim=-1)
                    next_id = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
                idx = torch.cat([idx, next_id.to(idx.device, idx.dtype)], dim=1)
        finally:
            self.train(was_training)
        return idx

    # ------------------------------------------------------------------ accounting

    def _component(self, name: str) -> str:
        if name.startswith("tok_emb."):
            return "embeddings"
        if name.startswith(("pos_emb.", "rotary.")):
            return "positional"
        if ".attn." in name:
            return "attention"
        if ".ffn." in name:
            return "ffn"
        if name.startswith("ln_f.") or ".ln1." in name or ".ln2." in name:
            return "norms"
        if name.startswith("lm_head."):
            return "head"
        return "other"

    def num_parameters(self, by_component: bool = False) -> int | dict[str, int]:
        """Number of trainable parameters (a tied matrix counted once).

        With ``by_component=True``: ``{"embeddings", "positional", "attention", "ffn",
        "norms", "head", "total"}`` (``head`` is 0 when tied; only ``"learned"`` has
        positional parameters).
        """
        check_bool("by_component", by_component)
        counts = dict.fromkeys(("embeddings", "positional", "attention", "ffn", "norms", "head"), 0)
        for name, p in self.named_parameters():  # shared parameters are yielded once
            counts[self._component(name)] = counts.get(self._component(name), 0) + p.numel()
        total = sum(counts.values())
        if not by_component:
            return total
        counts["total"] = total
        return counts

    def flops_per_token(self, T: int | None = None) -> float:
        r"""Training FLOPs per token (forward + backward), as in PaLM (Chowdhery et al. 2022, B).

        .. math:: 6N + 12\, n_\text{layers}\, d_\text{model}\, T

        ``N`` counts the parameters that take part in matrix multiplies: all of them except
        the position table (a lookup). The token embedding is a lookup too, but when tied
        its matrix is also the LM head, a ``d_model x vocab_size`` matmul, so it stays in
        ``N`` (nanoGPT's convention); untied, the embedding is left out and the head kept.
        Each parameter costs 2 FLOPs per token forward (multiply + add) and 4 backward,
        hence 6N (Kaplan et al. 2020). The second term is attention's ``QK^T`` and
        ``AV`` products, :math:`2 \cdot 2 T d_\text{model}` per token per layer forward,
        times 3 for forward+backward, over the full ``T x T`` score matrix (the causal
        half is not subtracted, as in PaLM).

        Args:
            T: sequence length (default ``block_size``).
        """
        T = self.config.block_size if T is None else check_int("T", T, low=1)
        parts = self.num_parameters(by_component=True)
        n = parts["total"] - parts["positional"]
        if not self.config.tie_weights:
            n -= parts["embeddings"]
        c = self.config
        return float(6 * n + 12 * c.n_layers * c.d_model * T)
