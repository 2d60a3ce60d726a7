"""Streaming transcription: AlignAtt over audio replayed (or received) chunk by chunk.

    session = StreamingSession(model, StreamingOptions())
    for chunk in chunks:                      # live audio: 16 kHz mono float32
        session.insert_audio(chunk)
        for word in session.process():
            print(word.start, word.text, word.emitted_at)
    session.finish()

A session's ``state()`` is plain data (JSON-able values and numpy arrays; ``pack_state`` makes
bytes of it): ``StreamingSession.restore`` continues it exactly, in this process or another.
``StreamingEngine`` replays media files through sessions, one resumable ``Step`` per chunk.
"""

from transcriber.engines.streaming.options import StreamingOptions

# The rest imports numpy and MLX: loaded on first use, so that the options (and the CLI's
# --help, which reads them) stay light.
_LAZY = {"StreamingEngine": ".engine", "pack_state": ".engine", "unpack_state": ".engine",
         "decide": ".policy", "most_attended_frame": ".policy",
         "token_scores": ".policy", "StreamingSession": ".session"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["StreamingOptions", "StreamingSession", "StreamingEngine", "pack_state", "unpack_state",
           "decide", "most_attended_frame", "token_scores"]
