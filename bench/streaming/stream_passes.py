"""Where a streaming replay's time goes, pass by pass (issue 30 part 3).

    PYTHONPATH=. .venv/bin/python -m bench.streaming stream-passes             # harvard, jfk, a short file
    PYTHONPATH=. .venv/bin/python -m bench.streaming stream-passes --files jfk --passes  # every pass listed
    PYTHONPATH=. .venv/bin/python -m bench.streaming stream-passes --files dev # the dev set
    TRANSCRIBER_KERNELS=avx2 ... -m bench.streaming stream-passes --model base

Wraps the encoder call, the decoder's prompt pass and its one-token steps of the code on
``$PYTHONPATH`` (so the same script measures two revisions) and counts, per pass: mel frames
encoded, prompt tokens, tokens decoded, how the pass ended and the words it committed. Totals:
CPU seconds (the process's, all threads) of the whole replay, the encoder, the prompt passes,
the steps and the rest; one-shot's over the same files for scale. The CPU time of a wrapped
call is read around it after ``mx.eval``-ing nothing more than the call itself evaluates.

The floor: the multiply-adds the passes must do (each encoder call's convolutions, blocks and
attention over its positions, the cross-attention keys and values, each prompt pass's linears
and attention: ``encoder_macs``, ``prompt_macs``), and the seconds they take at this path's bf16
GEMM speed on the encoder's threads (the encoder's MLP shape over 1500 rows, measured here:
``gemm_speed``): what no scheduling or overhead cut can go under on this arithmetic. The
language is English unless ``--language`` says otherwise (none: detected, as a multilingual
model's stream does).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))
DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")
DEFAULT_FILES = "osr_us_000_0034_harvard,jfk,ls_7729-102255-0039"


class Meter:
    """CPU seconds, counts and floating-point work of the wrapped calls, and the stream's passes."""

    def __init__(self):
        self.cpu = Counter()
        self.count = Counter()
        self.flops = Counter()
        self.walls = Counter()  # wall seconds of the same calls
        self.passes: list[dict] = []


def encoder_macs(d, frames: int) -> int:
    """Multiply-adds of one encoder call over ``frames`` mel frames (S = frames / 2 positions):
    the two convolutions, each block's linears (4 D^2 attention, 8 D^2 MLP a position) and its
    attention's two S x S x D products, and the decoder's cross-attention keys and values."""
    s, dd = frames // 2, d.n_audio_state
    blocks = d.n_audio_layer * (12 * s * dd * dd + 2 * s * s * dd)
    return frames * 3 * d.n_mels * dd + s * 3 * dd * dd + blocks + d.n_text_layer * 2 * s * dd * d.n_text_state


def prompt_macs(d, tokens: int, positions: int) -> int:
    """Multiply-adds of a prompt pass of ``tokens`` over an encoded window of ``positions``: per
    layer the linears (4 D^2 self-attention, 2 D^2 cross-attention query and output, 8 D^2 MLP a
    token), the causal self-attention (~T^2 D) and the cross-attention (2 T S D); then the
    vocabulary projection of the two rows read."""
    dt = d.n_text_state
    layer = 14 * tokens * dt * dt + tokens * tokens * dt + 2 * tokens * positions * dt
    return d.n_text_layer * layer + 2 * d.n_vocab * dt


def gemm_speed(model):
    """(GFLOP/s, threads) of this path's GEMM on the encoder's MLP shape (1500 x D x 4D) on
    the encoder's threads, the best of 7; None without the kernels."""
    import numpy as np

    from transcriber import native

    found = native.ops()
    if found is None:
        return None
    d, threads = model.dims.n_audio_state, native.encoder_threads()
    rng = np.random.default_rng(0)
    w = found.kernels.gemm_pack(rng.standard_normal((4 * d, d), dtype=np.float32))
    a = rng.standard_normal((1500, d), dtype=np.float32)
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter()
        found.kernels.gemm(a, w, threads=threads)
        best = min(best, time.perf_counter() - t0)
    return 2 * 1500 * d * 4 * d / best / 1e9, threads


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default=DEFAULT_FILES,
                    help="comma-separated file stems of the manifest, or 'dev' (short_en + long_en, exact)")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--passes", action="store_true", help="list every pass")
    ap.add_argument("--modes", default="oneshot,stream")
    ap.add_argument("--language", default="en", help="the language given (as bench/peers/compare_faster_whisper.py "
                                                      "gives it); 'none': detected")
    ap.add_argument("--json", help="write the passes and totals here")
    args = ap.parse_args(argv)

    import transcriber

    rows = [json.loads(line) for line in (DATA / "manifest.jsonl").read_text().splitlines() if line.strip()]
    if args.files == "dev":
        paths = [DATA / r["file"] for r in rows if r["subset"] in ("short_en", "long_en")
                 and r["reference_quality"] in ("exact", "exact-ish")]
    else:
        paths = [DATA / r["file"] for s in args.files.split(",") for r in rows if Path(r["file"]).stem == s]
    model = transcriber.load_model(args.model)
    language = None if args.language == "none" else args.language
    options = transcriber.StreamingOptions(language=language)
    list(transcriber.stream(paths[-1], model, options=options))  # warm up
    transcriber.transcribe(paths[-1], model, language=language)
    _install(model)
    refs = {DATA / r["file"]: r["text"] for r in rows}
    report({mode: measure(model, paths, mode, refs, options) for mode in args.modes.split(",")}, args,
           gemm_speed(model))


_INSTALLED: dict = {}  # "meter": the Meter the wrappers record into; "pending": the current pass


def measure(model, paths, mode: str, refs: dict, options) -> Meter:
    """One mode over the files: the meter, with the WER (pooled) and the streamed words' mean lag."""
    import numpy as np

    import transcriber
    from evalkit.scoring import wer

    meter = _INSTALLED["meter"] = Meter()
    _INSTALLED["pending"].clear()
    t0, w0 = time.process_time(), time.perf_counter()
    words = [transcriber.transcribe(p, model, language=options.language).words if mode == "oneshot"
             else list(transcriber.stream(p, model, options=options)) for p in paths]
    meter.cpu["total"] = time.process_time() - t0
    meter.wall = time.perf_counter() - w0
    meter.wer = wer([refs[p] for p in paths], ["".join(w.text for w in ws) for ws in words])
    lags = [w.emitted_at - w.end for ws in words for w in ws if w.emitted_at is not None]
    meter.lag = float(np.mean(lags)) if lags else None
    return meter


def _install(model):
    """Wrap once; every wrapper records into ``_INSTALLED['meter']``."""
    import mlx.core as mx

    import transcriber.engines.context as context
    import transcriber.engines.decoding.loop as loop
    import transcriber.engines.streaming.alignatt as alignatt
    import transcriber.engines.streaming.session as session
    from transcriber.backend import inference_for

    pending = _INSTALLED["pending"] = {}  # the pass being measured

    def wrap(owner, name, key, record=None):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            meter = _INSTALLED["meter"]
            t0, w0 = time.process_time(), time.perf_counter()
            out = original(*args, **kwargs)
            meter.cpu[key] += time.process_time() - t0
            meter.walls[key] += time.perf_counter() - w0
            meter.count[key] += 1
            if record:
                record(meter, args, out)
            return out

        setattr(owner, name, timed)

    dims = model.dims

    def on_encode(meter, args, out):
        frames = int(args[1].shape[0])
        meter.count["frames"] += frames
        pending["frames"] = _INSTALLED["frames"] = frames
        meter.flops["encoder"] += 2 * encoder_macs(dims, frames)

    def on_prompt(meter, args, out):
        meter.count["prompt_tokens"] += len(args[2])
        pending["prompt"] = len(args[2])
        meter.flops["prompt_pass"] += 2 * prompt_macs(dims, len(args[2]), _INSTALLED.get("frames", 0) // 2)

    def on_run(meter, args, out):
        pending.update(reason=out.reason.name, tokens=len(out.tokens))

    def on_step(meter, args, out):
        if pending:
            meter.passes.append(dict(pending, words=len(out), at=round(args[0].time, 2), last=args[0].finished))
        pending.clear()

    wrap(context.WhisperContext, "encode", "encoder", on_encode)
    wrap(loop, "prompt_pass", "prompt_pass", on_prompt)
    wrap(alignatt.AlignAttPass, "run", "pass", on_run)
    wrap(session.StreamingSession, "_step", "session_step", on_step)
    inference = inference_for(model)
    decode = inference.decode

    def timed_decode(tokens, state, *a, **k):
        meter = _INSTALLED["meter"]
        if tokens.shape[1] != 1:
            return decode(tokens, state, *a, **k)
        t0, w0 = time.process_time(), time.perf_counter()
        out = decode(tokens, state, *a, **k)
        mx.eval(out[0])
        meter.cpu["steps"] += time.process_time() - t0
        meter.walls["steps"] += time.perf_counter() - w0
        meter.count["steps"] += 1
        return out

    inference.decode = timed_decode


def report(results, args, speed=None):
    print(f"\nmodel {args.model}, kernels {os.environ.get('TRANSCRIBER_KERNELS', 'auto')}, files {args.files}, "
          f"load {os.getloadavg()[0]:.1f}\n")
    print("| mode | CPU s | wall s | encoder | prompt passes | steps | rest | encoder calls / mel frames "
          "| prompt tokens | passes committing / all | WER % | mean lag (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|")
    for mode, m in results.items():
        c = m.cpu
        rest = c["total"] - c["encoder"] - c["prompt_pass"] - c["steps"]
        committing = sum(1 for p in m.passes if p["words"])
        passes = f"{committing} / {len(m.passes)}" if m.passes else "-"
        print(f"| {mode} | {c['total']:.2f} | {m.wall:.2f} | {c['encoder']:.2f} | {c['prompt_pass']:.2f} | "
              f"{c['steps']:.2f} | {rest:.2f} | {m.count['encoder']} / {m.count['frames']} | "
              f"{m.count['prompt_tokens']} | {passes} | {100 * m.wer:.2f} | "
              f"{'-' if m.lag is None else format(m.lag, '.2f')} |")
    if speed is not None:
        gflops, threads = speed
        print(f"\nThe floor at this path's GEMM speed ({gflops:.0f} GFLOP/s: 1500 x D x 4D on {threads} threads):")
        for mode, m in results.items():
            enc, pp = m.flops["encoder"] / 1e12, m.flops["prompt_pass"] / 1e12
            w = m.walls
            print(f"- {mode}: encoder calls {enc:.2f} TFLOP ({enc * 1e3 / gflops:.1f} s; measured {w['encoder']:.1f} s "
                  f"wall) + prompt passes {pp:.2f} TFLOP ({pp * 1e3 / gflops:.1f} s; measured {w['prompt_pass']:.1f} "
                  f"s) = {(enc + pp) * 1e3 / gflops:.1f} s, against {m.wall:.1f} s measured in all (steps "
                  f"{w['steps']:.1f} s, not counted)")
    passes = results["stream"].passes if "stream" in results else []
    print("\npasses by ending (stream):", dict(Counter(p.get("reason", "none") for p in passes)))
    print("passes committing nothing, by ending:",
          dict(Counter(p.get("reason", "none") for p in passes if not p["words"])))
    if args.passes:
        print("\n| at (s) | mel frames | prompt | tokens | ending | words |")
        print("|---:|---:|---:|---:|---|---:|")
        for p in passes:
            print(f"| {p['at']} | {p.get('frames', '-')} | {p.get('prompt', '-')} | {p.get('tokens', '-')} | "
                  f"{p.get('reason', '-')}{' (last)' if p['last'] else ''} | {p['words']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({m: {"cpu": dict(r.cpu), "count": dict(r.count), "wall": r.wall,
                                                   "flops": dict(r.flops), "walls": dict(r.walls),
                                                   "wer": r.wer, "lag": r.lag, "passes": r.passes}
                                               for m, r in results.items()}, indent=1))


if __name__ == "__main__":
    main()
