"""Where a streaming replay's time goes, pass by pass (issue 30 part 3).

    PYTHONPATH=. .venv/bin/python bench/stream_passes.py                       # harvard, jfk, a short file
    PYTHONPATH=. .venv/bin/python bench/stream_passes.py --files jfk --passes  # every pass listed
    PYTHONPATH=. .venv/bin/python bench/stream_passes.py --files dev           # the dev set
    TRANSCRIBER_KERNELS=avx2 ... bench/stream_passes.py --model base

Wraps the encoder call, the decoder's prompt pass and its one-token steps of the code on
``$PYTHONPATH`` (so the same script measures two revisions) and counts, per pass: mel frames
encoded, prompt tokens, tokens decoded, how the pass ended and the words it committed. Totals:
CPU seconds (the process's, all threads) of the whole replay, the encoder, the prompt passes,
the steps and the rest; one-shot's over the same files for scale. The CPU time of a wrapped
call is read around it after ``mx.eval``-ing nothing more than the call itself evaluates.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))
DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
DEFAULT_FILES = "osr_us_000_0034_harvard,jfk,ls_7729-102255-0039"


class Meter:
    """CPU seconds and counts of the wrapped calls, and the passes of the stream."""

    def __init__(self):
        self.cpu = Counter()
        self.count = Counter()
        self.passes: list[dict] = []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default=DEFAULT_FILES,
                    help="comma-separated file stems of the manifest, or 'dev' (short_en + long_en, exact)")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--passes", action="store_true", help="list every pass")
    ap.add_argument("--modes", default="oneshot,stream")
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
    list(transcriber.stream(paths[-1], model))  # warm up
    transcriber.transcribe(paths[-1], model)
    _install(model)
    refs = {DATA / r["file"]: r["text"] for r in rows}
    report({mode: measure(model, paths, mode, refs) for mode in args.modes.split(",")}, args)


_INSTALLED: dict = {}  # "meter": the Meter the wrappers record into; "pending": the current pass


def measure(model, paths, mode: str, refs: dict) -> Meter:
    """One mode over the files: the meter, with the WER (pooled) and the streamed words' mean lag."""
    import numpy as np

    import transcriber
    from evalkit.scoring import wer

    meter = _INSTALLED["meter"] = Meter()
    _INSTALLED["pending"].clear()
    t0, w0 = time.process_time(), time.perf_counter()
    words = [transcriber.transcribe(p, model).words if mode == "oneshot" else list(transcriber.stream(p, model))
             for p in paths]
    meter.cpu["total"] = time.process_time() - t0
    meter.wall = time.perf_counter() - w0
    meter.wer = wer([refs[p] for p in paths], ["".join(w.text for w in ws) for ws in words])
    lags = [w.emitted_at - w.end for ws in words for w in ws if w.emitted_at is not None]
    meter.lag = float(np.mean(lags)) if lags else None
    return meter


def _install(model):
    """Wrap once; every wrapper records into ``_INSTALLED['meter']``."""
    import mlx.core as mx

    import transcriber.context as context
    import transcriber.decoding.loop as loop
    import transcriber.streaming.alignatt as alignatt
    import transcriber.streaming.session as session
    from transcriber.native.inference import inference_for

    pending = _INSTALLED["pending"] = {}  # the pass being measured

    def wrap(owner, name, key, record=None):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            meter = _INSTALLED["meter"]
            t0 = time.process_time()
            out = original(*args, **kwargs)
            meter.cpu[key] += time.process_time() - t0
            meter.count[key] += 1
            if record:
                record(meter, args, out)
            return out

        setattr(owner, name, timed)

    def on_encode(meter, args, out):
        meter.count["frames"] += int(args[1].shape[0])
        pending["frames"] = int(args[1].shape[0])

    def on_prompt(meter, args, out):
        meter.count["prompt_tokens"] += len(args[2])
        pending["prompt"] = len(args[2])

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
        t0 = time.process_time()
        out = decode(tokens, state, *a, **k)
        mx.eval(out[0])
        meter.cpu["steps"] += time.process_time() - t0
        meter.count["steps"] += 1
        return out

    inference.decode = timed_decode


def report(results, args):
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
                                                   "wer": r.wer, "lag": r.lag, "passes": r.passes}
                                               for m, r in results.items()}, indent=1))


if __name__ == "__main__":
    main()
