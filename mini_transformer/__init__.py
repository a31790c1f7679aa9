"""mini_transformer: the companion package of the book *Where Is the Token?*

Every chapter of the book imports it; readers import it in the exercises.
One module per idea:

- :mod:`mini_transformer.positional`: scalar, binary, sinusoidal, MemN2N, learned and rotary
  position encodings (chapters 1-3).
- :mod:`mini_transformer.attention`: masked scaled dot-product and multi-head attention
  (chapter 4).
- :mod:`mini_transformer.layers`: LayerNorm, the feed-forward block, Pre-LN and Post-LN blocks
  (chapter 5).
- :mod:`mini_transformer.model`: the decoder-only language model (chapters 3 and 6).
- :mod:`mini_transformer.data`: the bundled Shakespeare corpus, tokenizer, batches, synthetic tasks.
- :mod:`mini_transformer.train`: the training loop, checkpoints and the command line.
- :mod:`mini_transformer.lab`: the length-extrapolation lab of chapter 3 (a command line).
- :mod:`mini_transformer.stability`: the Post-LN vs Pre-LN sweep of chapter 5 (a command line).
- :mod:`mini_transformer.exercises`: the checkers behind the chapters' exercises.
- :mod:`mini_transformer.plotting`: notebook set-up and figure defaults.
"""

__version__ = "0.1.0"
