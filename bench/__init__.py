"""The benchmarks: one package per family (peers, streaming, kernels), each run as ``python -m bench.FAMILY``."""
