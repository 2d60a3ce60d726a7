"""The speaker models' benchmarks: the MLX ports checked against the torch originals
(``python -m bench.speakers check-segmentation``). The torch side runs in a virtual environment
of its own (torch, pyannote.audio), never a dependency: a worker script run by its interpreter."""
