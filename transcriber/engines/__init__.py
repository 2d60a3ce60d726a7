"""The engines: audio in, words out. ``Engine.steps(source, state)`` (engine.py), the two modes
by name (modes.py: the only module that knows there are two), one-shot (oneshot.py), streaming
AlignAtt (streaming/), the decoding both use (decoding/), word times (timing.py), the non-speech
rules (nonspeech.py) and language detection (detect.py, context.py). Engines know no app."""
