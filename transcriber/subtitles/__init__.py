"""Words become files: subtitle cues (cues.py) and their lines (lines.py), one module per output
format under formats/ (its entry: extension, media type, options, whether HTTP offers it),
writing files whole (files.py) and subtitles muxed into a video (embed.py). Knows no engine."""
