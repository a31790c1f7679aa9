"""mini_transformer: the companion package of the book *Where Is the Token?*

Every chapter of the book imports it; readers import it in the exercises.
One module per idea:

- :mod:`mini_transformer.positional`: scalar, binary, sinusoidal, learned and rotary position
  encodings (chapters 1-3), with :mod:`~mini_transformer.memn2n` (MemN2N's encoding) and
  :mod:`~mini_transformer.alibi` (ALiBi's attention bias) beside it.
- :mod:`mini_transformer.attention`: masked scaled dot-product and multi-head attention
  (chapter 4), with :mod:`~mini_transformer.masks` (causal and padding masks) and
  :mod:`~mini_transformer.additive` (Bahdanau's additive attention).
- :mod:`mini_transformer.layers`: LayerNorm, the feed-forward block, Pre-LN and Post-LN blocks
  and residual paths (chapter 5).
- :mod:`mini_transformer.model`: the decoder-only language model and its positional schemes
  (chapters 3 and 6).
- :mod:`mini_transformer.data`: the bundled Shakespeare corpus, tokenizer and batches, with
  :mod:`~mini_transformer.tasks` (chapter 3's synthetic tasks).
- :mod:`mini_transformer.train`: training the chapter-6 model: its public names and command
  line, built from :mod:`~mini_transformer.presets` (the run's settings),
  :mod:`~mini_transformer.loop` (the loop), :mod:`~mini_transformer.core` (the one step and
  schedule that chapters 3, 5 and 6 share), :mod:`~mini_transformer.checkpoints` (files)
  and :mod:`~mini_transformer.devices` (where it ran, peak FLOP/s).
- :mod:`mini_transformer.lab`: the length-extrapolation lab of chapter 3.
- :mod:`mini_transformer.stability`: the Post-LN vs Pre-LN experiments of chapter 5.
- :mod:`mini_transformer.scoring`: chapter 4's comparison of score functions.
- :mod:`mini_transformer.cli`: the rules every command line follows (the training command
  line here; the sweeps behind the committed results are repository tools in ``tools/``).
- :mod:`mini_transformer.exercises`: the checkers behind the chapters' exercises (the
  machinery in ``exercises/checking.py``, each chapter's exercises in a module of their own).
- :mod:`mini_transformer.plotting`: notebook set-up and figure defaults.
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
