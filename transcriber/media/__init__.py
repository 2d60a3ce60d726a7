"""Every way audio comes in: media files and their tracks (audio.py over ffmpeg, ffmpegtool.py),
files still being written (follow.py, growingfile.py, flacogg.py, pcmmkv.py), pipes, and what a
file holds (mediainfo.py). An ``AudioSource`` (source.py) is what the engines read. This room
knows no engine, no model and no app."""

# The containers whose audio can be decoded while the file is still being written (follow.py).
FOLLOWABLE = "WAV, FLAC, MKV/WebM, MP3, OGG/Opus, MPEG-TS and fragmented MP4"
