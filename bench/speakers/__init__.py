"""The speakers pass: our MLX ports checked against the originals on torch (run in a virtual
environment of their own, never a dependency), and their speed.

Run ``python -m bench.speakers --help`` for the subcommands (bench/README.md).
"""
