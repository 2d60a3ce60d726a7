"""``python -m jobs`` is the ``transcribe`` command."""

from .cli import main

main(prog_name="transcribe")
