"""A streaming session: audio in, committed words out, state as plain data.

    session = StreamingSession(model, StreamingOptions())
    for chunk in chunks:
        session.insert_audio(chunk)
        words = session.process()     # newly committed words
    words = session.finish()          # the rest

Each ``process()`` encodes the buffer (only its real length: no padding to 30 s; ``finish()``
pads to a full window), runs one AlignAtt pass after the buffer's committed tokens (fed as a
prompt, never re-decoded), and commits the new words whose audio is complete: a word is held
back while the token after it could still continue it, or while it ends inside a UTF-8
character. The committed text of audio that leaves the buffer becomes the prompt of later
passes. A pass that finds no speech, rewinds, or overruns its token budget commits nothing; one
whose text loops (``nonspeech.GATE.repeats``) commits nothing and clears the prompt that primed
it. Silence is not encoded (``QUIET_FRAMES``), nor its log-mel computed unless a pass needs it.

Frames: ``MelBuffer`` frames (10 ms) count from the stream's start; encoder positions (20 ms)
count from the buffer's start: position p is stream frame ``buffer.start + 2 * p``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Optional

import numpy as np

from transcriber.constants import FRAMES_PER_SECOND, HOP_LENGTH, N_FRAMES
from transcriber.engines.context import SHORT_WINDOW_PAD, WhisperContext
from transcriber.engines.decoding.ending import Ending
from transcriber.model.mel import normalize
from transcriber.transcript.text import is_attached_mark
from transcriber.model.whisper import Whisper
from transcriber.engines.nonspeech import GATE, ISOLATION, MIN_JUDGED_FRAMES, caption_open, is_sound_tag, outside_captions
from transcriber.engines.timing import start_at_onsets, time_offsets
from transcriber.transcript.types import Word
from transcriber.engines.streaming.alignatt import AlignAttPass, PassResult
from transcriber.engines.streaming.melbuffer import SILENCE, MelBuffer
from transcriber.engines.streaming.options import StreamingOptions
from transcriber.engines.streaming.rereading import OneShotReading
from transcriber.engines.streaming.state import SessionState
from transcriber.engines.streaming.words import CommittedWord, commit_count, context_tail, cut_frame, punctuated_context, word_frames

_log = logging.getLogger(__name__)

STATE_VERSION = 1
# Mel frames of audio kept when a pass finds no speech before any committed word. Whisper's
# no-speech probability is a poor judge of a few seconds of audio: the multilingual base model
# gave 0.95 to the first 3 s of the German reading (speech from its first frame); 5 s keeps
# that speech for the next pass, where it fell to 0.86 and the text was decoded.
NO_SPEECH_KEEP = 500
MIN_PASS_FRAMES = 10  # the last pass needs at least 0.1 s of audio
# Any other pass needs 1.5 s: on less (unpadded), base wrote " C C C C C C C C" for the first
# second of the French clip and committed it; with 1.5 s it wrote the right text.
MIN_EARLY_PASS_FRAMES = 150
# The stream's first words wait for 2 s of audio, and a pass before the first committed word
# over less than ``PADDED_BELOW`` frames is encoded with ``FIRST_PASS_PAD`` frames of silence
# after it, as one-shot pads a short window. The first pass used to wait for 4 s, for
# punctuation: the LJSpeech reading decoded from 2 s began " printing in the only" and the
# unpunctuated text kept later passes unpunctuated (3 of 13 sentence ends). Since marks are kept (``policy.decide``) the
# later passes punctuate anyway: 2 s gives the same podcast (25 of 26 ends, same errors) and
# dev set within the spread (WER 3.99% vs 4.11%), mean lag 1.13 -> 0.98 s, first words 1.4 s
# after their audio instead of 2.8 s. Unpadded, base misheard the Russian clip's first word
# from 2 or 3 s ("Битняга", WER 11 -> 22%); padded it hears it as from 4 s. Longer buffers are
# not padded: over a music intro (nothing committed, 5 s kept) the padded passes made tiny.en
# write " Thank you." on the Brahms.
FIRST_PASS_FRAMES = 200
# One-shot's pad (10 s). 3 s would encode 500 frames instead of 1200 for the same tiny.en WER on
# the dev set, but base misheard the Russian clip's first word again ("Битняга").
FIRST_PASS_PAD = SHORT_WINDOW_PAD // HOP_LENGTH
PADDED_BELOW = 400
BUDGET_SLACK = 8  # tokens allowed on top of the per-second budget
# Silence (``nonspeech.GATE``) is not decoded: once this many mel frames have passed with
# nothing loud since the last committed word (or the buffer's start), passes stop until sound
# comes back. The first of them still run, so the mark that ends the last sentence is committed.
QUIET_FRAMES = 200
QUIET_KEEP = 100  # mel frames of a silent buffer kept when no committed word holds it
SPEECH_GAP = ISOLATION  # seconds: a pass starting this soon after the last emitted word goes on from speech
REPEAT_CONTEXT = 48  # prompt tokens a pass's text is judged with for repetition


class StreamingSession:
    """One stream's AlignAtt decoder. Not thread-safe; one session per stream."""

    def __init__(self, model: Whisper, options: StreamingOptions = StreamingOptions(), *,
                 start_sample: int = 0):
        """A session whose first sample is ``start_sample`` of the source (times are source time)."""
        self.model, self.options = model, options
        self._whisper = WhisperContext(model, options.task, options.language)
        self._s = SessionState(MelBuffer(model.dims.n_mels, start_sample), self._whisper.language)
        self._tokenizer = self._whisper.tokenizer()
        self._delay = time_offsets(model.name).stream_delay  # the words' times, not their frames
        self._static = self._encode(options.static_init_prompt)
        self._s.prompt = self._encode(options.initial_prompt)
        self._pass = self._make_pass()
        # reads a doubted pass's buffer again (``_speech``)
        self._one_shot = OneShotReading(model, options.task, lambda n_mel: self._whisper.encode(self._mel(n_mel, True)))
        self._saved_options = (options, options.to_dict())  # state() runs every chunk: asdict once
        self._judged = False  # the last pass judged the buffer not speech (``_decode``)

    # -- setup ------------------------------------------------------------------------------------

    def _make_pass(self) -> AlignAttPass:
        return AlignAttPass(self.model, self._tokenizer, self.options)

    def _encode(self, text: Optional[str]) -> list[int]:
        return self._tokenizer.encode(" " + text.strip()) if text and text.strip() else []

    # -- public API -------------------------------------------------------------------------------

    @property
    def language(self) -> Optional[str]:
        """The language being transcribed (None until detected)."""
        return self._s.language

    @property
    def finished(self) -> bool:
        return self._s.finished

    @property
    def audio_offset(self) -> int:
        """Source sample just after the audio inserted so far: where a resumed replay starts."""
        return self._s.buffer.origin_sample + self._s.buffer.received

    @property
    def time(self) -> float:
        """Source time (seconds) of the end of the audio inserted so far."""
        return self._s.buffer.end_time

    def insert_audio(self, samples: np.ndarray) -> None:
        """Append 16 kHz mono float32 samples. Past ``audio_max_len`` the oldest audio leaves the
        buffer (its committed text goes to the prompt). Insert at most a few seconds between
        ``process()`` calls: audio that leaves the buffer undecoded is not transcribed."""
        if self._s.finished:
            raise RuntimeError("insert_audio() after finish()")
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        loud = GATE.last_loud(samples)
        if loud is not None:
            self._s.last_sound = (self._s.buffer.received + loud) // HOP_LENGTH
        self._s.audio = np.concatenate([self._s.audio, samples])
        # silence is likely dropped unencoded (``_quiet``): its log-mel waits until a pass needs it
        self._s.buffer.append(samples, defer=loud is None)
        self._slide(hard_only=True)

    def process(self) -> list[Word]:
        """Decode the buffer; the words committed by this call."""
        if self._s.finished:
            raise RuntimeError("process() after finish()")
        return self._step(is_last=False)

    def finish(self) -> list[Word]:
        """The end of the audio: decode what is left and commit everything."""
        if self._s.finished:
            return []
        words = self._step(is_last=True)
        if not self._judged:
            words += self._guard()
        self._s.finished = True
        return words

    # -- one step ---------------------------------------------------------------------------------

    def _step(self, is_last: bool) -> list[Word]:
        self._judged = False
        if self._s.buffer.n_frames < self._min_frames(is_last):
            return []
        if self._is_quiet(is_last):
            words = [] if is_last else self._close()
            self._settle_quiet()
            return words
        words = self._decode(is_last)
        self._keep_audio()
        return words

    def _decode(self, is_last: bool) -> list[Word]:
        """One AlignAtt pass over the buffer: the words it commits. ``_judged`` tells whether
        it judged the buffer not speech (no speech, or audio running backwards)."""
        s, buf = self._s, self._s.buffer
        n_mel = buf.n_frames - buf.n_frames % 2  # whole encoder positions
        if n_mel < self._min_frames(is_last):
            return []
        base = self._whisper.encode(self._mel(n_mel, is_last))
        n_positions = n_mel // 2  # 20 ms encoder positions
        if s.language is None and not self._detect_language(base, n_mel, is_last):
            return []
        result = self._run_pass(base, n_positions, is_last)
        _log.debug("pass at %.2f s over %.2f s: %s, %r (+%r), no-speech %.2f", buf.end_time, n_mel / FRAMES_PER_SECOND,
                   result.reason, self._tokenizer.decode(result.tokens), result.next_token,
                   result.no_speech_prob)
        if result.reason is Ending.NO_SPEECH or (result.reason is Ending.EOT and not result.tokens):
            self._judged = result.reason is Ending.NO_SPEECH
            if not s.words:  # only silence, noise or music in the buffer: keep just its end
                buf.drop_until(buf.end - NO_SPEECH_KEEP)
            return []
        if result.reason in (Ending.REWIND, Ending.BUDGET):
            return []
        if self._repeats(result):
            self._restart()
            return []
        if self._backwards(result, n_mel, is_last):
            self._judged = True
            return []
        words = self._commit(result, n_positions, is_last)
        self._slide(hard_only=False)
        return words

    def _min_frames(self, is_last: bool) -> int:
        """Mel frames a pass needs; the stream's first words (nothing committed yet) wait longer."""
        return MIN_PASS_FRAMES if is_last else FIRST_PASS_FRAMES if self._first() else MIN_EARLY_PASS_FRAMES

    def _first(self) -> bool:
        """Nothing committed yet in this stream (nor a prompt given)."""
        return not (self._s.words or self._s.prompt or self._s.last_end)

    def _covered(self) -> int:
        """Stream frame where the committed words in the buffer end (its start without)."""
        return self._s.words[-1].end if self._s.words else self._s.buffer.start

    def _is_quiet(self, is_last: bool) -> bool:
        """Nothing to decode: silence since the last committed word for ``QUIET_FRAMES`` (on the
        last pass: a buffer with no sound at all)."""
        s, buf = self._s, self._s.buffer
        sound = -1 if s.last_sound is None else s.last_sound
        return sound <= buf.start if is_last else buf.end - max(sound, self._covered()) >= QUIET_FRAMES

    def _settle_quiet(self) -> None:
        """A silent buffer without committed words keeps only its end; one with may drop sentences."""
        if self._s.words:
            self._slide(hard_only=False)
        else:
            self._s.buffer.drop_until(max(self._s.buffer.start, self._s.buffer.end - QUIET_KEEP))
        self._keep_audio()

    def _close(self) -> list[Word]:
        """The audio went quiet after sound no committed word holds: the speech before the pause
        is over: decoded as the last pass decodes the end (padded, every word committed), once
        per pause, then what is still unheard is read alone (``_guard``). A line's last word was
        held back for the next pass and the quiet came first (" He could wait no", " longer."
        lost); a line whose pass looped (" In 1813 in 1813 in 1813") was lost whole."""
        s = self._s
        if s.last_sound is None or s.closed_at == s.last_sound or s.last_sound <= self._covered():
            return []
        s.closed_at = s.last_sound
        words = self._decode(is_last=True)
        found = [] if self._judged else self._guard()
        if found:  # their audio is read: the next pass goes on after them, with them as its prompt
            buf = s.buffer
            s.prompt = context_tail(self._tokenizer, s.prompt + [t for w in s.words for t in w.tokens]
                                    + [t for w in found for t in w.tokens], self.model.dims.n_text_ctx // 2)
            s.words, s.last_frame = [], None
            buf.drop_until(min(buf.end, round((found[-1].end - buf.seconds(0)) * FRAMES_PER_SECOND)))
        return words + found

    def _guard(self) -> list[Word]:
        """The voiced stretches after the committed words that no pass gave a word, read alone
        (``OneShotReading.unheard``); their words are emitted."""
        s, buf = self._s, self._s.buffer
        self._keep_audio()
        words = self._one_shot.unheard(s.audio, buf.seconds(s.audio_start / HOP_LENGTH), buf.n_frames / FRAMES_PER_SECOND,
                                       s.last_end, self._tokenizer)
        words = [replace(w, emitted_at=buf.end_time) for w in words]
        s.last_end = words[-1].end if words else s.last_end
        return words

    def _keep_audio(self) -> None:  # the samples after the committed words (``SessionState.audio``)
        self._s.keep_audio_from(max(self._covered(), self._s.buffer.start) * HOP_LENGTH)

    def _repeats(self, result: PassResult) -> bool:
        """The pass's text repeats a word or phrase past what speech does (``GATE.repeats``),
        judged after the committed text before it, so a loop spread over passes counts."""
        if not result.tokens:
            return False
        tok = self._tokenizer
        before = self._s.prompt[-REPEAT_CONTEXT:] + [t for w in self._s.words for t in w.tokens]
        new = tok.decode(result.tokens)
        return GATE.repeats(tok.decode(before) + new, len(new.split()))

    def _backwards(self, result: PassResult, n_mel: int, is_last: bool) -> bool:
        """A pass the model is unsure of (``GATE.is_doubtful``) over audio that runs backwards
        (``GATE.runs_backwards``, over the buffer's ``n_mel`` frames) commits nothing, and a buffer
        without committed words keeps only its end, as over music. Over too little audio to tell
        (``MIN_JUDGED_FRAMES``) such a pass waits for more when its audio leans backwards
        (``GATE.leans_backwards``), but for the last one: the reversed voice's first 2 s (" You're",
        -0.029; a TIMIT sentence's -0.000, the dev set's first passes +0.18 and more). Audio
        judged backwards stays so while the buffer holds it (``backwards_until``): a second more
        of a LibriSpeech sentence played backwards turned its buffer's -0.050 over 3 s into
        -0.011 over 4 s, and 10 words were written. (Forward speech is never judged backwards:
        +0.034 at the least over what the gate judges, ``nonspeech.BACKWARDS_BELOW``.)"""
        if not len(result.logprobs) or not GATE.is_doubtful(float(result.no_speech_prob),
                                                             float(np.mean(result.logprobs))):
            return False
        s, buf = self._s, self._s.buffer
        mel = normalize(buf.raw()[:n_mel])
        judged_before = s.backwards_until is not None and buf.start < s.backwards_until
        if n_mel < MIN_JUDGED_FRAMES and not judged_before:
            return not is_last and GATE.leans_backwards(mel)
        if GATE.runs_backwards(mel):
            s.backwards_until = buf.start + n_mel
        elif not judged_before:
            return False
        if not s.words:
            buf.drop_until(buf.end - NO_SPEECH_KEEP)
        return True

    def _restart(self) -> None:
        """After a loop: forget the prompt and committed words that primed it (their audio goes
        too), so the next pass decodes the audio as it is, as one-shot drops its prompt when
        falling back to a high temperature."""
        s, buf = self._s, self._s.buffer
        if s.words:
            buf.drop_until(max(buf.start, min(s.words[-1].end, buf.end)))
        s.words, s.prompt = [], []
        s.last_frame = None

    def _mel(self, n_mel: int, is_last: bool) -> np.ndarray:
        """The encoder's input: the buffer's real frames only (cheaper, and Whisper copes), but
        on the last pass padded with silence to a full window as Whisper was trained: seeing
        the speech end, it ends the text instead of running on over a cut-off (with 10 s or 20 s
        of silence, tiny.en ended a 3 s file with other words: dev set WER 3.99 -> 4.35%); before the
        first committed word, under ``PADDED_BELOW`` frames, ``FIRST_PASS_PAD`` frames of silence."""
        raw = self._s.buffer.raw()[:n_mel]
        first = self._first() and n_mel < PADDED_BELOW
        total = N_FRAMES if is_last else min(N_FRAMES, n_mel + FIRST_PASS_PAD) if first else n_mel
        if total > n_mel:
            raw = np.concatenate([raw, np.full((total - n_mel, raw.shape[1]), SILENCE, np.float32)])
        return normalize(raw)

    def _detect_language(self, base, n_mel: int, is_last: bool) -> bool:
        """Multilingual model, language not given: once enough audio is buffered (or at the
        end), detect it from the <|startoftranscript|> logits, unless they say no speech."""
        if not is_last and n_mel < self.options.language_detect_seconds * FRAMES_PER_SECOND:
            return False
        language, probability, no_speech = self._whisper.detect_language(base)
        threshold = self.options.no_speech.undecoded_above
        if threshold is not None and no_speech > threshold:
            self._s.buffer.drop_until(self._s.buffer.end - NO_SPEECH_KEEP)
            return False
        _log.debug("language %s (%.2f)", language, probability)
        self._s.language = language
        self._tokenizer = self._whisper.tokenizer(language)
        self._static = self._encode(self.options.static_init_prompt)
        self._pass = self._make_pass()
        return True

    def _prompt(self) -> tuple[list[int], int, int]:
        """Decoder prompt, the index of <|startoftranscript|>, and where committed text starts."""
        tok = self._tokenizer
        committed = [t for w in self._s.words for t in w.tokens]
        room = self.model.dims.n_text_ctx // 2 - len(committed)
        context = context_tail(tok, self._s.prompt, max(0, min(self.options.max_context_tokens, room)
                                                         - len(self._static)))
        if self.options.punctuated_prompt:
            context = punctuated_context(tok, context)
        prompt = ([tok.sot_prev] + self._static + context) if (self._static or context) else []
        sot_index = len(prompt)
        prompt += list(tok.sot_sequence_including_notimestamps)
        sample_begin = len(prompt)
        return prompt + committed, sot_index, sample_begin

    def _run_pass(self, base, n_positions: int, is_last: bool) -> PassResult:
        s, buf = self._s, self._s.buffer
        prompt, sot_index, sample_begin = self._prompt()
        covered = s.words[-1].end if s.words else buf.start  # stream frame
        undecoded = max(0.0, (buf.end - covered) / FRAMES_PER_SECOND)
        max_new = math.ceil(self.options.max_tokens_per_second * undecoded) + BUDGET_SLACK
        last = None if s.last_frame is None else (s.last_frame - buf.start) // 2
        return self._pass.run(base, prompt, sot_index, sample_begin, n_positions, last, max_new, is_last)

    def _commit(self, result: PassResult, n_positions: int, is_last: bool) -> list[Word]:
        """The pass's complete words that are speech (``_speech``), committed and as ``Word``s."""
        s = self._s
        first, last_end_before, before = self._first(), s.last_end, len(s.words)
        out = self._speech(self._new_words(result, n_positions, is_last), result, n_positions, before, first, is_last)
        if not out:
            return []
        # a start in the quiet before the voice moves to its onset (timing.start_at_onsets, 10 ms
        # frames); no lead: the attended frames' SHIFT is not one-signed (dev set: 13 of 24 late)
        buf = s.buffer
        levels = 10 * np.log10(np.maximum(np.sum(10.0 ** buf.raw().astype(np.float64), axis=1), 1e-20))
        times = start_at_onsets([(w.start, w.end) for w in out], levels, buf.seconds(buf.start),
                                1 / FRAMES_PER_SECOND, last_end_before, lead=0.0)
        out = [replace(w, start=a, end=b) for w, (a, b) in zip(out, times)]
        s.last_end = out[-1].end
        return out

    def _new_words(self, result: PassResult, n_positions: int, is_last: bool) -> list[Word]:
        """Commit the pass's complete words (``CommittedWord``s) and return them as ``Word``s."""
        s, buf, tok = self._s, self._s.buffer, self._tokenizer
        texts, groups = tok.split_to_word_tokens(result.tokens) if result.tokens else ([], [])
        count = commit_count(tok, texts, groups, result.next_token, is_last or result.reason is Ending.EOT, is_last)
        out: list[Word] = []
        index, now, last_end = 0, buf.end_time, s.last_end
        for text, tokens in zip(texts[:count], groups[:count]):
            frames = result.frames[index: index + len(tokens)]
            probs = np.exp(result.logprobs[index: index + len(tokens)])
            index += len(tokens)
            following = result.frames[index] if index < len(result.frames) else result.next_frame
            # a closing mark attends where the next sound is, maybe past a pause: not the word's end
            spoken = [f for t, f in zip(tokens, frames) if not is_attached_mark(tok.decode([t]))] or frames
            start, end = word_frames(spoken, following, n_positions)
            committed = CommittedWord(tokens, buf.start + 2 * start, buf.start + 2 * end, text)
            s.words.append(committed)
            s.last_frame = buf.start + 2 * spoken[-1]  # a mark's frame says little (policy.decide)
            if "\ufffd" in text or not text.strip():
                continue  # invalid bytes or bare space at the very end: kept as tokens, not shown
            begin = min(max(buf.seconds(committed.start) + self._delay, last_end), now)
            finish = min(max(buf.seconds(committed.end) + self._delay, begin), now)
            out.append(Word(begin, finish, text, float(np.mean(probs)), emitted_at=now, tokens=tuple(tokens),
                            logprob=float(np.sum(np.log(probs))), no_speech_prob=float(result.no_speech_prob)))
            last_end = finish
        return out

    def _speech(self, out: list[Word], result: PassResult, n_positions: int, before: int, first: bool,
                is_last: bool) -> list[Word]:
        """The pass's new words (``out``; committed: ``self._s.words[before:]``) that are speech
        (``GATE``). A sound caption or a guess inside a sure pass stays in the state as tokens
        only; a pass that is a guess as a whole after a pause (over music: nonspeech.py) goes with
        its audio. Kept as a prefix, the guesses made the model end every later pass at once (an
        empty text), and 100 s of speech after 15 s of music were lost. A guess that goes on from
        speech (an unsure word of a translation) stays a prefix: forgetting it cut the buffer to
        its last seconds, and the next passes looped ("charming, charming, ..."). A short text
        just after a sound caption (``caption_end``) must be sure (``nonspeech.ISOLATION``). A
        pass after a pause that its scores doubt (the stream's ``first`` words sooner: see
        ``nonspeech.FIRST_WORDS_CORNER``) is judged again as one-shot
        (``OneShotReading.refuses_doubted``; on the ``is_last`` pass, from the same audio)."""
        s = self._s
        after_speech = bool(out) and s.last_end > 0 and out[0].start - s.last_end < SPEECH_GAP
        outside, _ = outside_captions([w.text for w in out], caption_open(self._tokenizer.decode(  # "[Music ...]"
            s.prompt[-REPEAT_CONTEXT:] + [t for w in s.words[:before] for t in w.tokens])))
        captions = [w.end for w, o in zip(out, outside) if not o or is_sound_tag(w.text)]
        s.caption_end = captions[-1] if captions else s.caption_end
        after_caption = (bool(out) and s.caption_end is not None and s.caption_end >= s.last_end
                         and out[0].start - s.caption_end < ISOLATION)
        kept = GATE.speech_words([w for w, o in zip(out, outside) if o], after_speech, after_caption)
        if kept and not after_speech and self._one_shot.refuses_doubted(
                result, "".join(w.text for w in kept), first, is_last, 2 * n_positions, self._tokenizer, s.language):
            kept = []
        if out and not kept and not after_speech:
            self._forget(before)
        return kept

    # -- buffer -----------------------------------------------------------------------------------

    def _forget(self, keep: int) -> None:
        """Drop the committed words from index ``keep`` on and the audio up to their end; the
        words before them leave the buffer for the prompt, as at a cut."""
        s, buf = self._s, self._s.buffer
        end = s.words[-1].end
        for w in s.words[:keep]:
            s.prompt.extend(w.tokens)
        s.prompt = context_tail(self._tokenizer, s.prompt, self.model.dims.n_text_ctx // 2)
        s.words, s.last_frame = [], None
        buf.drop_until(max(buf.start, min(end, buf.end)))

    def _slide(self, hard_only: bool) -> None:
        """Keep the buffer under ``audio_max_len``; past ``audio_trim_len`` drop committed
        sentences down to ``audio_keep_len``. Committed words before the cut go to the prompt
        context."""
        s, buf, o = self._s, self._s.buffer, self.options
        trim_len, keep_len = o.window(english=s.language == "en" and o.task == "transcribe")
        trim = None if hard_only or trim_len is None else trim_len * FRAMES_PER_SECOND
        keep_frames = None if keep_len is None else keep_len * FRAMES_PER_SECOND
        cut, keep = cut_frame(s.words, buf.start, buf.end, o.audio_max_len * FRAMES_PER_SECOND, trim, keep_frames)
        if cut is None:
            return
        gone, s.words = s.words[:keep], s.words[keep:]
        for w in gone:
            s.prompt.extend(w.tokens)
        s.prompt = context_tail(self._tokenizer, s.prompt, self.model.dims.n_text_ctx // 2)
        buf.drop_until(cut)

    # -- state ------------------------------------------------------------------------------------

    def state(self) -> dict:
        """Everything needed to resume: JSON-able values and numpy arrays (``buffer.final``,
        ``buffer.tail``). ``audio_offset`` is the source sample where the replay resumes."""
        return {"version": STATE_VERSION, "model": self.model.name, "options": self._options_dict(),
                "audio_offset": self.audio_offset, **self._s.to_dict()}

    def _options_dict(self) -> dict:
        if self._saved_options[0] is not self.options:
            self._saved_options = (self.options, self.options.to_dict())
        return dict(self._saved_options[1])

    @classmethod
    def restore(cls, model: Whisper, options: StreamingOptions, state: dict) -> "StreamingSession":
        """A session that continues exactly where the one that saved ``state`` stood."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported streaming state version {state.get('version')!r}")
        if state.get("model") and state["model"] != model.name:
            raise ValueError(f"state was saved with model {state['model']!r}, not {model.name!r}")
        session = cls(model, replace(options, language=state["language"] or options.language))
        session.options = options
        session._s = SessionState.from_dict(state)
        return session
