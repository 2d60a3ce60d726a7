"""The Whisper model (whisper.py), where models come from (loader.py, hf.py, ct2.py, catalog.py).

Importing this package binds MLX's matrix product to the fastest BLAS measured on the machine
(``blas.apply``: after ``import mlx.core``, before any matmul). Every module that multiplies
matrices imports the model, so this is the one place that needs to; ``import transcriber``
alone stays light (``transcribe --help``).
"""

from ..native import blas

blas.apply()
