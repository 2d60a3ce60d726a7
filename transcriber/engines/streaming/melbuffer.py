"""The streaming audio buffer, kept as log-mel frames: only new audio is transformed.

A stream's frame ``t`` is the STFT window centred on sample ``t * HOP_LENGTH`` of the stream,
reflect-padded at the stream's start (as torch.stft does) and zero-padded after the audio
received so far (as Whisper pads a file's last window). A frame whose window lies wholly inside
the audio received is *final* and computed once; the few frames whose window reaches past the
end (at most two) are recomputed when they are needed. The frames are computed by the one log-mel
computation, ``transcriber.model.mel.log_mel_frames``, as one-shot's are; the buffer only keeps track
of which samples each frame needs. The result equals the log-mel of the whole stream computed at
once (``raw_log_mel``; ``transcriber.model.mel.log_mel_spectrogram`` with zero padding), to the bit.

Audio appended with ``defer=True`` (silence, which the session will likely never encode) is kept
as samples only: its frames are computed when ``raw()`` needs them, or never if they are dropped
first. The log-mel was the whole cost of a stream of silence (a float64 matmul per chunk, ~10 ms
on a loaded 2-core machine where numpy's BLAS threads wait on each other). A frame's value does
not depend on how many frames are computed with it, so deferring changes no value.

Values are kept as raw log10 power. Whisper's normalisation (floor 8 decades under the loudest
frame, then (x + 4) / 4: ``transcriber.model.mel.normalize``) depends on the loudest frame of the
window, so it is applied to the buffer when it is encoded.
"""

from __future__ import annotations

import numpy as np

from transcriber.constants import HOP_LENGTH, N_FFT, SAMPLE_RATE
from transcriber.model.mel import log_mel_frames

PAD = N_FFT // 2  # samples each side of a frame's centre
SILENCE = -10.0  # raw log10 mel of digital silence (the 1e-10 floor)


def raw_log_mel(audio: np.ndarray, n_mels: int) -> np.ndarray:
    """Raw log10 mel of a whole stream at once, (len(audio) // HOP_LENGTH, n_mels).

    The reference ``MelBuffer`` must match: reflect padding at the start, zeros after the end.
    """
    audio = np.asarray(audio, dtype=np.float32)
    if len(audio) <= PAD:
        return np.zeros((0, n_mels), dtype=np.float32)
    padded = np.concatenate([audio[1: PAD + 1][::-1], audio, np.zeros(PAD, dtype=np.float32)])
    return log_mel_frames(padded, len(audio) // HOP_LENGTH, n_mels)


class MelBuffer:
    """Log-mel frames of the recent audio of a stream.

    ``start`` (frames) is where the buffer begins in the stream; frames before it were dropped.
    Times: stream frame ``t`` is at ``origin + t * HOP_LENGTH / SAMPLE_RATE`` seconds of the
    source, ``origin`` being where the stream started in the source file.
    """

    def __init__(self, n_mels: int, origin_sample: int = 0):
        self.n_mels = n_mels
        self.origin_sample = origin_sample  # source sample of the stream's first sample
        self.received = 0  # samples of the stream so far
        self.start = 0  # stream frame of the buffer's first frame
        self.final = np.zeros((0, n_mels), dtype=np.float32)  # final frames from `start` on
        # The padded stream from padded index `tail_start` on (padded index = sample + PAD):
        # what frames not yet final will need. Before PAD + 1 samples arrive, the raw samples.
        self.tail = np.zeros(0, dtype=np.float32)
        self.tail_start = 0

    # -- sizes ------------------------------------------------------------------------------------

    @property
    def n_final(self) -> int:
        """Stream frames computed for good (from 0, dropped ones included)."""
        return self.start + len(self.final)

    @property
    def end(self) -> int:
        """Stream frames available (final or not): one per HOP_LENGTH samples received."""
        return self.received // HOP_LENGTH if self.received > PAD else 0

    @property
    def n_ready(self) -> int:
        """Stream frames whose window lies wholly inside the audio received (final, computed or
        deferred)."""
        if self.received <= PAD:
            return 0
        return min(max(0, (PAD + self.received - N_FFT) // HOP_LENGTH + 1), self.end)

    @property
    def n_frames(self) -> int:
        """Frames in the buffer."""
        return max(0, self.end - self.start)

    def seconds(self, frame: float) -> float:
        """Source time of a stream frame."""
        return self.origin_sample / SAMPLE_RATE + frame * HOP_LENGTH / SAMPLE_RATE

    @property
    def end_time(self) -> float:
        """Source time of the end of the audio received."""
        return (self.origin_sample + self.received) / SAMPLE_RATE

    # -- audio in ---------------------------------------------------------------------------------

    def append(self, samples: np.ndarray, defer: bool = False) -> None:
        """Add samples: the frames they complete are computed now, once (with ``defer``: when
        ``raw()`` needs them, or never if they are dropped before)."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if samples.size == 0:
            return
        started = self.received > PAD
        self.received += samples.size
        self.tail = np.concatenate([self.tail, samples])
        if not started:
            if self.received <= PAD:
                return
            # the stream's start is known: reflect-pad it once
            self.tail = np.concatenate([self.tail[1: PAD + 1][::-1], self.tail])
            self.tail_start = 0
        if not defer:
            self._compute()

    def _compute(self) -> None:
        """Compute the ready frames not computed yet; the tail keeps what later frames need."""
        n_ready = self.n_ready
        new = n_ready - self.n_final
        if new <= 0:
            return
        offset = self.n_final * HOP_LENGTH - self.tail_start
        frames = log_mel_frames(self.tail[offset:], new, self.n_mels)
        self.final = np.concatenate([self.final, frames])
        self._trim_tail(n_ready)

    def _trim_tail(self, frame: int) -> None:
        """Forget the samples before the window of stream frame ``frame``."""
        keep_from = frame * HOP_LENGTH  # padded index the frame's window starts at
        self.tail = self.tail[keep_from - self.tail_start:]
        self.tail_start = keep_from

    # -- frames out -------------------------------------------------------------------------------

    def raw(self) -> np.ndarray:
        """Raw log10 mel of the buffer, (n_frames, n_mels): final frames + the edge frames."""
        self._compute()
        pending = self.end - self.n_final
        if pending <= 0:
            return self.final[: self.n_frames]
        offset = self.n_final * HOP_LENGTH - self.tail_start
        padded = np.concatenate([self.tail[offset:], np.zeros(N_FFT, dtype=np.float32)])
        return np.concatenate([self.final, log_mel_frames(padded, pending, self.n_mels)])

    def drop_until(self, frame: int) -> int:
        """Forget frames before stream frame ``frame`` (not past the ready ones; deferred frames
        dropped are never computed). Returns the number of frames dropped."""
        frame = min(max(frame, self.start), self.n_ready)
        dropped = frame - self.start
        if frame > self.n_final:  # past the computed frames: the next to compute is `frame`
            self._trim_tail(frame)
        self.final = self.final[dropped:]
        self.start = frame
        return dropped

    # -- state ------------------------------------------------------------------------------------

    def state(self) -> dict:
        return {"n_mels": self.n_mels, "origin_sample": self.origin_sample, "received": self.received,
                "start": self.start, "tail_start": self.tail_start,
                "final": self.final.copy(), "tail": self.tail.copy()}

    @classmethod
    def from_state(cls, d: dict) -> "MelBuffer":
        buf = cls(int(d["n_mels"]), int(d["origin_sample"]))
        buf.received, buf.start, buf.tail_start = int(d["received"]), int(d["start"]), int(d["tail_start"])
        buf.final = np.asarray(d["final"], dtype=np.float32).reshape(-1, buf.n_mels)
        buf.tail = np.asarray(d["tail"], dtype=np.float32).reshape(-1)
        return buf
