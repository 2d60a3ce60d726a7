"""``python -m transcriber.app`` is the ``transcribe`` command."""

from transcriber.app.cli.main import main

main(prog_name="transcribe")
