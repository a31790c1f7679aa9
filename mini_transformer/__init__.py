"""mini_transformer: the companion package of the book *Where Is the Token?*

Every chapter of the book imports it; readers import it in the exercises.
One module per idea:

- :mod:`mini_transformer.positional`: scalar, binary, sinusoidal and learned position
  encodings (chapters 1-3), with :mod:`~mini_transformer.memn2n` (MemN2N's encoding) and
  :mod:`~mini_transformer.alibi` (ALiBi's attention bias) beside it.
- :mod:`mini_transformer.attention`: masked scaled dot-product and multi-head attention, and
  RoPE where it acts on queries and keys (chapters 3-4), with :mod:`~mini_transformer.masks`
  (causal and padding masks) and :mod:`~mini_transformer.additive` (Bahdanau's attention).
- :mod:`mini_transformer.layers`: LayerNorm, the feed-forward block, Pre-LN and Post-LN blocks
  and residual paths (chapter 5).
- :mod:`mini_transformer.model`: the decoder-only language model and its positional schemes
  (chapters 3 and 6).
- :mod:`mini_transformer.data`: the bundled Shakespeare corpus, tokenizer and batches, with
  :mod:`~mini_transformer.tasks` (chapter 3's copy task).
- :mod:`mini_transformer.train`: training the chapter-6 model: its public names and command
  line, built from :mod:`~mini_transformer.core` (the settings, schedule, step and loss
  estimate that chapters 3, 5 and 6 share), :mod:`~mini_transformer.loop` (the run),
  :mod:`~mini_transformer.checkpoints` (files) and :mod:`~mini_transformer.hardware` (device,
  precision, peak FLOP/s).
- :mod:`mini_transformer.lab`: the length-extrapolation lab of chapter 3.
- :mod:`mini_transformer.stability`: the Post-LN vs Pre-LN experiments of chapter 5.
- :mod:`mini_transformer.scoring`: chapter 4's comparison of score functions.
- :mod:`mini_transformer.exercises`: the checkers behind the chapters' exercises.
- :mod:`mini_transformer.plotting`: notebook set-up and figure defaults.
- :mod:`mini_transformer.checks`: the argument checks every module's inputs go through.
"""

__version__ = "0.2.0"

# The seven modules of the book's contract, importable as attributes (d2l's habit):
# ``import mini_transformer as mt; mt.attention.causal_mask(4)``. ``train`` is loaded on first
# use: importing it here would make ``python -m mini_transformer.train`` warn that the module
# was already imported before it ran.
from . import attention, data, exercises, layers, model, positional  # noqa: E402

__all__ = ["attention", "data", "exercises", "layers", "model", "positional", "train"]


def __getattr__(name: str):
    if name == "train":
        import importlib

        return importlib.import_module(".train", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
