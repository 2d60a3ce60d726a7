"""A non-speech set wider than the dev set's three files, synthesized (nothing committed but this
code), and the words each mode writes over each class.

    .venv/bin/python -m bench.peers nonspeech-set                  # every class, both modes
    .venv/bin/python -m bench.peers nonspeech-set --classes babble,applause --modes stream --seconds 20

Classes (``CLASSES``): noise colours (white, pink, brown), a steady tone with harmonics, log
sweeps, clicks, mains hum, beeps, an animal-like call (harmonic glides), laughter-like voiced
bursts, plucked-string music, rain-like ambience, applause-like clap bursts, and babble: six
voices of the dev set's short_en readings, each played backwards (speech's spectrum and rhythm,
no words). Every class is deterministic (seeded), 16 kHz mono, -20 dBFS RMS (sparse ones lower:
peaks stay under 0.9). The babble
and the reversed voice need the recordings (--data, else $TRANSCRIBER_TEST_DATA, else
../shared/data). Newer classes: a single reversed voice, bird-like chirps, an engine, wind gusts,
dog-like barks; and ``--recordings DIR``: every WAV file there a class (played over and over at
the same level), e.g. the six sounds pygame's wheel ships (house_lo: a music loop; boom,
car_door, punch, whiff, secosmic_lo: effects), LGPL like pygame (`pip download pygame`, unzip
pygame/examples/data).
Prints a markdown table: words written per class and mode, and what they were.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import wave
from pathlib import Path
from typing import Callable, Optional

import numpy as np

SR = 16000
LEVEL_DB = -20.0  # RMS of every class, dBFS
BABBLE_SOURCES = ["ls_1089-134686-0001", "ls_1089-134691-0001", "ls_7729-102255-0039", "ls_mlx_ls_test",
                  "ls_icefall_1221-135766-0002", "jfk"]


def _level(x: np.ndarray, db: float = LEVEL_DB, peak: float = 0.9) -> np.ndarray:
    """``x`` at ``db`` RMS, or quieter where that would take a peak past ``peak`` (clicks)."""
    rms = float(np.sqrt(np.mean(x * x))) or 1.0
    gain = min(10 ** (db / 20) / rms, peak / (float(np.max(np.abs(x))) or 1.0))
    return (x * gain).astype(np.float32)


def _coloured(n: int, rng, exponent: float) -> np.ndarray:
    """Noise whose power falls as 1/f**exponent (0 white, 1 pink, 2 brown)."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / SR)
    f[0] = f[1]
    return np.fft.irfft(spectrum / f ** (exponent / 2), n)


def _t(n: int) -> np.ndarray:
    return np.arange(n) / SR


def white(n, rng, data):
    return _coloured(n, rng, 0)


def pink(n, rng, data):
    return _coloured(n, rng, 1)


def brown(n, rng, data):
    return _coloured(n, rng, 2)


def tone(n, rng, data):
    t = _t(n)
    return sum(np.sin(2 * np.pi * 440 * k * t) / k for k in range(1, 5))


def sweep(n, rng, data):
    """Log sweeps 80 Hz -> 6 kHz, 3 s each, one after another."""
    period = 3 * SR
    t = (np.arange(n) % period) / SR
    f0, f1, length = 80.0, 6000.0, 3.0
    k = np.log(f1 / f0) / length
    return np.sin(2 * np.pi * f0 * (np.exp(k * t) - 1) / k)


def clicks(n, rng, data):
    """A metronome (2 a second) and random clicks between."""
    x = np.zeros(n)
    click = np.exp(-np.arange(80) / 10) * rng.standard_normal(80)
    starts = list(range(0, n - 80, SR // 2)) + list(rng.integers(0, n - 80, int(n / SR * 3)))
    for s in starts:
        x[s:s + 80] += click
    return x


def hum(n, rng, data):
    t = _t(n)
    return sum(np.sin(2 * np.pi * 50 * k * t) / k for k in range(1, 8)) + 0.05 * rng.standard_normal(n)


def beeps(n, rng, data):
    """1 kHz beeps, 0.3 s on, 0.7 s off, over faint noise."""
    t = _t(n)
    on = (t % 1.0) < 0.3
    return np.sin(2 * np.pi * 1000 * t) * on + 0.01 * rng.standard_normal(n)


def animal(n, rng, data):
    """Calls: harmonic glides (a rising then falling fundamental, 200-900 Hz), 0.5-1.5 s each,
    with pauses between (whale- or bird-like)."""
    x, pos = np.zeros(n), 0
    while pos < n:
        length = int(rng.uniform(0.5, 1.5) * SR)
        seg = min(length, n - pos)
        u = np.arange(seg) / length
        f = rng.uniform(200, 400) + rng.uniform(200, 500) * np.sin(np.pi * u)
        phase = 2 * np.pi * np.cumsum(f) / SR
        call = sum(np.sin(k * phase) / k ** 1.5 for k in range(1, 6)) * np.sin(np.pi * u) ** 2
        x[pos:pos + seg] = call
        pos += seg + int(rng.uniform(0.3, 1.2) * SR)
    return x


def _formants(x: np.ndarray, formants=((700, 110), (1220, 120), (2600, 160))) -> np.ndarray:
    """``x`` through resonators at the formants of an open vowel (/a/)."""
    out = np.zeros_like(x)
    for freq, bw in formants:
        r = np.exp(-np.pi * bw / SR)
        a1, a2 = -2 * r * np.cos(2 * np.pi * freq / SR), r * r
        y = np.zeros_like(x)
        y1 = y2 = 0.0
        for i, v in enumerate(x):  # a two-pole resonator
            y0 = v - a1 * y1 - a2 * y2
            y[i], y2, y1 = y0, y1, y0
        out += y
    return out


def laughter(n, rng, data):
    """Laughter-like: groups of 4-7 voiced "ha" bursts (a 180-260 Hz pulse train through /a/'s
    formants, an aspirated onset), 5 a second, pauses between groups."""
    src, pos = np.zeros(n), 0
    while pos < n:
        for _ in range(int(rng.integers(4, 8))):
            length = int(0.12 * SR)
            if pos + length >= n:
                break
            f0 = rng.uniform(180, 260)
            pulses = np.zeros(length)
            pulses[(np.arange(0, length, SR / f0)).astype(int)] = 1.0
            env = np.sin(np.pi * np.arange(length) / length)
            src[pos:pos + length] = pulses * env + 0.2 * rng.standard_normal(length) * env
            pos += int(0.2 * SR)
        pos += int(rng.uniform(0.6, 1.5) * SR)
    return _formants(src)


def music(n, rng, data):
    """Plucked strings (Karplus-Strong) playing arpeggios of a I-vi-IV-V progression."""
    chords = [[60, 64, 67], [57, 60, 64], [53, 57, 60], [55, 59, 62]]
    x, pos, step, i = np.zeros(n), 0, int(0.25 * SR), 0
    while pos < n:
        note = chords[(i // 8) % 4][i % 3] + 12 * ((i // 3) % 2)
        period = int(SR / (440 * 2 ** ((note - 69) / 12)))
        buf = rng.uniform(-1, 1, period)
        length = min(SR, n - pos)
        out = np.empty(length)
        for k in range(length):
            out[k] = buf[k % period]
            buf[k % period] = 0.996 * 0.5 * (buf[k % period] + buf[(k + 1) % period])
        x[pos:pos + length] += out
        pos += step
        i += 1
    return x


def rain(n, rng, data):
    """Ambience: pink noise, low-passed, with random droplets."""
    x = 0.3 * _coloured(n, rng, 1.5)
    drop = np.exp(-np.arange(200) / 30) * np.sin(2 * np.pi * 2500 * np.arange(200) / SR)
    for s in rng.integers(0, n - 200, int(n / SR * 15)):
        x[s:s + 200] += rng.uniform(0.2, 1.0) * drop * np.std(x) * 6
    return x


def applause(n, rng, data):
    """Applause-like: claps (5-15 ms decaying band noise) at 20-60 a second, swelling and
    fading in bursts of 3-6 s, with quiet between."""
    x, pos = np.zeros(n), int(0.3 * SR)
    while pos < n:
        length = int(rng.uniform(3, 6) * SR)
        rate = rng.uniform(20, 60)
        for s in np.sort(rng.integers(pos, min(n, pos + length), int(rate * length / SR))):
            m = int(rng.uniform(0.005, 0.015) * SR)
            if s + m < n:
                env = np.sin(np.pi * min(1.0, (s - pos) / length)) + 0.05
                x[s:s + m] += env * rng.standard_normal(m) * np.exp(-np.arange(m) / (m / 4))
        pos += length + int(rng.uniform(0.5, 2) * SR)
    return x


def _reversed_reading(data: Path, name: str) -> np.ndarray:
    """The dev set's short_en reading ``name``, played backwards."""
    from transcriber.media.audio import load_audio

    return load_audio(str(data / "audio" / "short_en" / f"{name}.flac"))[::-1]


def babble(n, rng, data):
    """Six readings of the dev set, each reversed and looped from its own offset, mixed."""
    x = np.zeros(n)
    for name in BABBLE_SOURCES:
        voice = _reversed_reading(data, name)
        voice = voice / (np.sqrt(np.mean(voice * voice)) or 1.0)
        reps = np.tile(voice, n // len(voice) + 2)
        start = int(rng.integers(0, len(voice)))
        x += reps[start:start + n]
    return x


def reversed_voice(n, rng, data):
    """One reading of the dev set played backwards, looped: a single voice's pitch, formants and
    rhythm, no words (babble's hardest case: nothing masks it)."""
    voice = _reversed_reading(data, BABBLE_SOURCES[int(rng.integers(0, len(BABBLE_SOURCES)))])
    return np.tile(voice, n // len(voice) + 1)[:n]


def _groups(n, rng, sizes, lengths, within, pause, burst: Callable) -> np.ndarray:
    """Bursts ``burst(m, rng)`` of ``lengths`` seconds (uniform in the range), ``within`` seconds
    apart, in groups of ``sizes`` (integers, high excluded), ``pause`` seconds between groups."""
    x, pos = np.zeros(n), int(0.2 * SR)
    while pos < n:
        for _ in range(int(rng.integers(*sizes))):
            m = int(rng.uniform(*lengths) * SR)
            if pos + m >= n:
                break
            x[pos:pos + m] = burst(m, rng)
            pos += m + int(rng.uniform(*within) * SR)
        pos += int(rng.uniform(*pause) * SR)
    return x


def _chirp(m, rng):
    f = np.linspace(rng.uniform(4000, 5500), rng.uniform(1800, 2600), m)
    return np.sin(2 * np.pi * np.cumsum(f) / SR) * np.hanning(m)


def birds(n, rng, data):
    """Chirps: fast falling glides (5-2 kHz, 30-80 ms) in trills of 3-8, pauses between."""
    return _groups(n, rng, (3, 9), (0.03, 0.08), (0.02, 0.06), (0.3, 1.5), _chirp)


def engine(n, rng, data):
    """A motor: harmonics of a 25-40 Hz firing rate that wanders, over brown noise."""
    t = _t(n)
    rate = 32 + 6 * np.sin(2 * np.pi * 0.1 * t + rng.uniform(0, 6.3))
    phase = 2 * np.pi * np.cumsum(rate) / SR
    body = sum(np.sin(k * phase) / k for k in range(1, 12))
    return body + 0.5 * _coloured(n, rng, 2) / (np.std(_coloured(n, rng, 2)) or 1.0)


def wind(n, rng, data):
    """Gusts: pink noise whose loudness swells and falls over seconds, with a whistle."""
    t = _t(n)
    gust = 0.3 + np.abs(np.sin(2 * np.pi * 0.15 * t + rng.uniform(0, 6.3))) ** 2
    whistle = 0.05 * np.sin(2 * np.pi * np.cumsum(700 + 200 * gust) / SR)
    noise = _coloured(n, rng, 1)
    return gust * (noise / (np.std(noise) or 1.0) + whistle)


def _bark(m, rng):
    f0 = np.linspace(rng.uniform(500, 600), rng.uniform(350, 420), m)
    pulses = (np.diff(np.floor(np.cumsum(f0) / SR), prepend=0) > 0).astype(float)
    env = np.exp(-np.arange(m) / (m / 3)) * np.minimum(1, np.arange(m) / 80)
    return (pulses + 0.3 * rng.standard_normal(m)) * env


def dog(n, rng, data):
    """Barks: 0.1-0.25 s bursts of a falling 400-600 Hz pulse train with noise through a wide
    formant, in groups of 1-3, pauses between."""
    return _formants(_groups(n, rng, (1, 4), (0.1, 0.25), (0.1, 0.3), (0.8, 2.5), _bark), ((900, 300), (1800, 400)))


CLASSES: dict[str, Callable] = {f.__name__: f for f in (white, pink, brown, tone, sweep, clicks, hum, beeps, animal,
                                                        laughter, music, rain, applause, babble, reversed_voice,
                                                        birds, engine, wind, dog)}


def synthesize(name: str, seconds: float = 15.0, data: Optional[Path] = None, seed: int = 0) -> np.ndarray:
    """``seconds`` of class ``name``, float32 at 16 kHz, ``LEVEL_DB`` RMS (peaks at most 0.9),
    faded in and out."""
    n = int(seconds * SR)
    x = np.asarray(CLASSES[name](n, np.random.default_rng(seed), data), dtype=np.float64)[:n]
    fade = min(n // 2, SR // 20)
    x[:fade] *= np.linspace(0, 1, fade)
    x[n - fade:] *= np.linspace(1, 0, fade)
    return _level(x)


def recorded(path: Path, seconds: float = 15.0, seed: int = 0) -> np.ndarray:
    """``seconds`` of a recording (any format ffmpeg reads): played over and over, a short one
    (under 3 s: a door, a punch) with 0.5-2 s of quiet between, at ``LEVEL_DB`` (peaks at most 0.9)."""
    from transcriber.media.audio import load_audio

    sound, n, rng = load_audio(str(path)).astype(np.float64), int(seconds * SR), np.random.default_rng(seed)
    x, pos = np.zeros(n), 0
    while pos < n:
        m = min(len(sound), n - pos)
        x[pos:pos + m] += sound[:m]
        pos += m + (int(rng.uniform(0.5, 2.0) * SR) if len(sound) < 3 * SR else 0)
    return _level(x)


def write_wav(path: Path, samples: np.ndarray) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def words_written(engine, path: Path) -> list:
    """The words a mode's engine writes for ``path`` (what reaches the outputs)."""
    from transcriber.transcript.transforms import assemble

    steps = list(engine.steps(path))
    return assemble([s for step in steps for s in step.segments], "en", None).words


def data_folder(given: Optional[str] = None) -> Path:
    root = Path(__file__).resolve().parents[2]
    return Path(given or os.environ.get("TRANSCRIBER_TEST_DATA") or root.parent / "shared" / "data")


def main():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import tempfile

    import transcriber
    from transcriber.engines.modes import make_engine

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--classes", default=",".join(CLASSES))
    ap.add_argument("--modes", default="oneshot,stream")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--data")
    ap.add_argument("--recordings", help="a folder of non-speech recordings: each file a class too "
                    "(pygame's wheel ships six: pygame/examples/data/*.wav, LGPL)")
    args = ap.parse_args()
    model = transcriber.load_model(args.model)
    modes = args.modes.split(",")
    engines = {m: make_engine(m, model) for m in modes}
    data = data_folder(args.data)
    print(f"| class ({args.seconds:g} s, seed {args.seed}) | " + " | ".join(f"{m} words" for m in modes) + " | what was written |")
    print("|---|" + "---:|" * len(modes) + "---|")
    with tempfile.TemporaryDirectory() as tmp:
        sources = {name: lambda name=name: synthesize(name, args.seconds, data, args.seed)
                   for name in args.classes.split(",") if name}
        for file in sorted(Path(args.recordings).glob("*.wav")) if args.recordings else []:
            sources[file.stem] = lambda file=file: recorded(file, args.seconds, args.seed)
        for name, make in sources.items():
            path = write_wav(Path(tmp) / f"{name}.wav", make())
            counts, said = [], []
            for m in modes:
                t0 = time.perf_counter()
                words = words_written(engines[m], path)
                counts.append(str(len(words)))
                if words:
                    said.append(f"{m}: " + "".join(w.text for w in words).strip()
                                + " (" + ", ".join(f"{w.probability:.2f}" for w in words[:6]) + ")")
                print(f"  {name} {m}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            print(f"| {name} | " + " | ".join(counts) + " | " + "; ".join(said) + " |", flush=True)


if __name__ == "__main__":
    main()
