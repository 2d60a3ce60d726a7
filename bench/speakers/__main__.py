"""``python -m bench.speakers SUBCOMMAND [ARGS...]``: run one script of bench/speakers/ (bench/_runner.py)."""

from bench._runner import main

if __name__ == "__main__":
    main(__package__)
