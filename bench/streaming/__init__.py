"""The streaming mode: streaming against one-shot on the dev set (RTF, WER, how late words come
out), where a replay's time goes pass by pass, how late a recording being made reaches the
subtitles on disk (``transcribe follow``), and the time asymmetry behind the non-speech gate.

Run ``python -m bench.streaming --help`` for the subcommands (bench/README.md).
"""
