"""Ours against the peers, end to end on recordings: faster-whisper and whisper.cpp on the same
weights (time ratios, WER, word times, recall, the podcast, other languages), and ours alone on
the dev set, non-speech, memory on long files and the job runner's costs (folders, Ray).

Run ``python -m bench.peers --help`` for the subcommands (bench/README.md).
"""
