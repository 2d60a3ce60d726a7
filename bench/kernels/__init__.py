"""The native kernels: the decoder step and encoder window over fresh processes, their precision
choices against MLX's float32 ops, the integer GEMM, the vocabulary projection, our weights in
whisper.cpp's ggml layout, and the install on Linux aarch64 under qemu.

Run ``python -m bench.kernels --help`` for the subcommands (bench/README.md).
"""
