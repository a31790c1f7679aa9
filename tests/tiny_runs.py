"""Arguments for a lab run of a few steps on short sequences, shared by the tests of the lab tool.

(tests/ is on ``sys.path`` under pytest's default import mode, so tests import this directly.)
"""

# --seeds comes last so that a test may append its own (argparse keeps the last value).
TINY_LAB = ["--steps", "2", "--train-length", "6", "--offset", "2"]
TINY_LAB += ["--eval-samples", "4", "--batch-size", "4", "--seeds", "0"]
