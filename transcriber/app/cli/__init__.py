"""The ``transcribe`` command: its commands (main.py), flags (flags.py), what it prints while it
works (progress.py) and after (report.py)."""
