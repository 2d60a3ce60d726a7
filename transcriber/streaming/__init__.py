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

from .engine import StreamingEngine, pack_state, unpack_state
from .options import StreamingOptions
from .policy import decide, most_attended_frame, token_scores
from .session import StreamingSession

__all__ = ["StreamingOptions", "StreamingSession", "StreamingEngine", "pack_state", "unpack_state",
           "decide", "most_attended_frame", "token_scores"]
