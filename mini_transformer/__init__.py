"""mini_transformer: the companion package of the book *Where Is the Token?*

Every chapter imports it; readers import it in the exercises. One module per idea:

- :mod:`~mini_transformer.positional`: scalar, binary, sinusoidal and learned position encodings
  (chapters 1-3), beside :mod:`~mini_transformer.memn2n` and :mod:`~mini_transformer.alibi`.
- :mod:`~mini_transformer.attention`: masked scaled dot-product and multi-head attention, and
  RoPE where it acts on queries and keys (chapters 4 and 2), beside
  :mod:`~mini_transformer.masks` and :mod:`~mini_transformer.additive` (Bahdanau's attention).
- :mod:`~mini_transformer.layers`: LayerNorm, feed-forward, Pre-/Post-LN blocks (chapter 5).
- :mod:`~mini_transformer.model`: the decoder-only language model and its positional schemes.
- :mod:`~mini_transformer.data`: the bundled Shakespeare corpus, tokenizer and batches, beside
  :mod:`~mini_transformer.tasks` (chapter 3's copy task).
- :mod:`~mini_transformer.train`: the chapter-6 training loop (its command line:
  :mod:`~mini_transformer.cli`), built from :mod:`~mini_transformer.core` (settings, schedule,
  step, loss estimate), :mod:`~mini_transformer.checkpoints` (files) and
  :mod:`~mini_transformer.hardware` (device, precision, peak FLOP/s).
- The chapters' experiments: :mod:`~mini_transformer.lab` (chapter 3),
  :mod:`~mini_transformer.scoring` (chapter 4), :mod:`~mini_transformer.stability` (chapter 5).
- :mod:`~mini_transformer.exercises` (the checkers), :mod:`~mini_transformer.plotting` (figure
  defaults) and :mod:`~mini_transformer.checks` (the argument checks every input goes through).
"""

__version__ = "0.3.0"

# The seven modules of the book's contract, importable as attributes (d2l's habit):
# ``import mini_transformer as mt; mt.attention.causal_mask(4)``. ``train`` and ``exercises``
# load on first use: ``python -m mini_transformer.train`` would warn that train was imported
# before it ran, and a model needs none of the checkers.
from . import attention, data, layers, model, positional  # noqa: E402

__all__ = ["attention", "data", "exercises", "layers", "model", "positional", "train"]


def __getattr__(name: str):
    if name in ("train", "exercises"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
