"""Using transcriber from Python: one-shot transcription, then subtitles from the words.

    python examples/api_example.py [MEDIA]
"""

import sys
from pathlib import Path

import transcriber
from transcriber.subtitles.cues import CueOptions
from transcriber.subtitles.formats import write_srt

path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("jfk.flac")
model = transcriber.load_model("tiny.en")  # converted once from the PyPI package, then cached
transcript = transcriber.transcribe(path, model)

print(f"{path.name}: {transcript.duration:.1f} s, language {transcript.language}")
print(transcript.text)
for word in transcript.words[:5]:
    print(f"  {word.start:6.2f} - {word.end:6.2f}  {word.text.strip():15s} p={word.probability:.2f}")
print(write_srt(transcript, CueOptions(max_line_chars=32)))
