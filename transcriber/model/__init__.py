"""The Whisper model: the MLX module (whisper.py; its sizes in dimensions.py, its decoder state
in state.py, its CPU-minded arithmetic in fastmath.py), how it runs (inference.py; the native
kernels' in transcriber/backend.py), and where models come from (loader.py, hf.py,
ct2.py, catalog.py).

Importing it changes nothing in MLX: loading a model binds MLX's matrix product to the fastest
BLAS measured on the machine (``blas.bind_once`` in ``loader.load_model``).
"""
