"""Streaming transcription: AlignAtt over audio replayed (or received) chunk by chunk.

    from transcriber.streaming import StreamingOptions, StreamingSession, stream
    for word in stream("talk.mp3", model, StreamingOptions(chunk_seconds=1.0)):
        print(word.start, word.text, word.emitted_at)

A session's ``state()`` is plain data (JSON-able values and numpy arrays; ``pack_state`` makes
bytes of it): ``StreamingSession.restore`` continues it exactly, in this process or another.
"""

from .options import StreamingOptions
from .policy import Decision, decide, most_attended_frame, token_scores
from .replay import pack_state, replay, stream, transcribe_stream, unpack_state, words_to_transcript
from .session import StreamingSession

__all__ = ["StreamingOptions", "StreamingSession", "stream", "replay", "transcribe_stream",
           "words_to_transcript", "pack_state", "unpack_state", "Decision", "decide",
           "most_attended_frame", "token_scores"]
