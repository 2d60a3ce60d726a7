"""How a decode pass ended: the one name for it in the loop, its step hooks, the AlignAtt
policy and the streaming session. No model here (the policy is pure numpy)."""

from __future__ import annotations

import enum


class Ending(enum.Enum):
    """Why a pass ended; ``CONTINUE`` is a step hook's (or the policy's) "not ended: keep the
    token and decode the next one"."""

    CONTINUE = "continue"
    EOT = "eot"  # the text ended
    LENGTH = "length"  # the text context is full
    BUDGET = "budget"  # the token budget is spent
    STOP = "stop"  # AlignAtt: the next token looks at the end of the audio (not kept)
    REWIND = "rewind"  # AlignAtt: attention jumped back; the pass is discarded
    NO_SPEECH = "no_speech"  # the no-speech rule (nonspeech.NoSpeechRule) ended it

    def __str__(self) -> str:
        return self.value
