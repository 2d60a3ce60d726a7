"""Tools for the tests and the benchmarks, not part of the product: ``scoring`` (the text
normaliser, WER, CER, word start errors against forced alignments) and ``podcast`` (a test
podcast built from the evaluation recordings, and its scorecard).

Not shipped: the wheel holds ``transcriber`` and ``jobs`` only (pyproject.toml's package list),
and neither imports this package (tests/test_structure.py). The tests find it at the
repository's root (pytest's ``pythonpath``); the bench scripts put the root on ``sys.path``.
"""
