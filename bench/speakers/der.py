"""The speaker pass's diarization error rate, speed and memory on the evaluation recordings.

    .venv/bin/python -m bench.speakers der [--steps 5] [--calibrate | --thresholds 0.6 0.7] [--pads 0.05 0.1 0.2 0.25 0.3 0.4]
        [--speed] [--check-against ../shared/tools/der.py]

Sets (evalkit/der.py scores them: 10 ms frames, overlap counted, pooled: total errors over
total reference speech):

- ``meetings``: the 11 AMI excerpts of the ``diarization`` subset, RTTM in alignments/, no
  collar; split in two halves by sorted name: ``fit`` (dev00, trn01, trn03, trn05, trn07,
  trn09) and ``held-out`` (dev01, trn02, trn04, trn06, trn08). ``--calibrate`` picks the
  clustering threshold on the fit half only (the threshold with the least pooled DER, count not
  given; the middle of those within TIED of it) and reports both halves with it.
- ``readers``: each ``ls_testother_*`` reading cut into its utterances and the two readers
  interleaved A, B, A, B with 0.5 s of silence (evalkit/readers.py), 0.25 s collar.

``--pads``: the turns' widening into silence (pipeline.PAD_S) fitted on the meetings' fit half
and the first readers' recording together, the rest held out (``fit_pads``); then the report at
the diarizer's own pad.

Each recording is scored with the speaker count given (``num_speakers``) and not given. The
models run once per recording and step (``Diarizer.prepare``); the clustering reruns per
threshold. ``--speed``: the whole pass (models loaded, then ``diarize``) on a 10-minute
two-reader recording in a subprocess: seconds, the fraction of real time, peak resident memory
(``ru_maxrss``), the load average beside it (other work on the cores slows it).
``--check-against PATH``: our scorer and the data's own scorer script on the meeting outputs.
``--joined``: the 11 meeting excerpts one after another (1 s of silence between, in name order
and reversed; the RTTMs' speaker ids are global, 23 speakers), long enough for the path that
embeds each second once (pipeline.ONCE_FROM_S), scored with it and with every window's speech
embedded, at the threshold and pad given (the diarizer's by default).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evalkit import der, readers  # noqa: E402
from transcriber.media.audio import load_audio  # noqa: E402
from transcriber.speakers import clustering, weights  # noqa: E402
from transcriber.speakers.pipeline import ONCE_FROM_S, ONCE_STEP, STEP, Diarizer  # noqa: E402

DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA", ROOT.parent / "shared" / "data"))
THRESHOLDS = [0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9]
TIED = 0.005  # pooled DER differences on the fit half this small are not a preference


def meetings() -> list[dict]:
    """The diarization subset: name, samples, reference turns, half ('fit' / 'held-out')."""
    found = []
    rows = [json.loads(line) for line in (DATA / "manifest.jsonl").read_text().splitlines() if line.strip()]
    chosen = sorted((r for r in rows if r["subset"] == "diarization"), key=lambda r: r["file"])
    for i, row in enumerate(chosen):
        found.append({"name": Path(row["file"]).stem, "samples": load_audio(DATA / row["file"]),
                      "reference": der.read_rttm(DATA / row["speaker_rttm"]),
                      "half": "fit" if i % 2 == 0 else "held-out", "collar": 0.0})
    return found


def reader_sets(repeat: int = 1, limit: int = 3) -> list[dict]:
    """The alternating-readers recordings, one per ls_testother reading (the first ``limit``)."""
    found = []
    for path in sorted((DATA / "audio" / "long_en").glob("ls_testother_*.flac"))[:limit]:
        samples, turns = readers.alternating(readers.pieces(DATA, path.stem, load_audio(path)), repeat)
        found.append({"name": path.stem, "samples": samples, "reference": turns, "half": "readers", "collar": 0.25})
    return found


def score_set(diarizer, items, prepared, threshold, given, pad=None) -> der.Score:
    """Pooled score of a set at one threshold (and pad: None, the diarizer's), the count given or not."""
    total = der.Score()
    for item in items:
        count = len({who for _, _, who in item["reference"]}) if given else None
        turns = diarizer.finish(prepared[item["name"]], num_speakers=count, threshold=threshold, pad=pad)
        item.setdefault("hyp", {})[(threshold, given)] = turns
        total += der.score(item["reference"], turns, len(item["samples"]) / 16000, item["collar"])
    return total


def line(name: str, s: der.Score) -> str:
    miss, fa, conf = s.rates()
    return f"{name:<34} DER {s.der:.3f}  (miss {miss:.3f}, false alarm {fa:.3f}, confusion {conf:.3f})  speech {s.speech / 100:.0f} s"


def report(diarizer, items, prepared, threshold) -> None:
    groups = {}
    for item in items:
        groups.setdefault(item["half"], []).append(item)
    groups["meetings (all 11)"] = [i for i in items if i["half"] in ("fit", "held-out")]
    for name, group in groups.items():
        if not group:
            continue
        for given in (True, False):
            label = f"{name}, count {'given' if given else 'not given'}"
            print(line(label, score_set(diarizer, group, prepared, threshold, given)))


def calibrate(diarizer, items, prepared) -> float:
    """The threshold of least pooled DER (count not given) on the fit half; thresholds within
    TIED of the least count as tied and the middle one of those is taken (on 150 s of speech
    0.005 is under a second: one file's stray short speaker, not a better threshold)."""
    fit = [i for i in items if i["half"] == "fit"]
    results = {t: score_set(diarizer, fit, prepared, t, False).der for t in THRESHOLDS}
    print("calibration on the fit half:", "  ".join(f"{t}: {d:.3f}" for t, d in results.items()))
    tied = [t for t, d in results.items() if d <= min(results.values()) + TIED]
    return tied[len(tied) // 2]


def fit_pads(diarizer, items, prepared, threshold, pads) -> None:
    """The turns' pad fitted on the meetings' fit half and the first readers' recording together
    (the sum of their DERs, count not given; the least pad within TIED of the best), each set's
    DER beside: the meetings' held-out half and the other readers' recordings are held out."""
    readers_ = [i for i in items if i["half"] == "readers"]
    sets = {"meetings fit": [i for i in items if i["half"] == "fit"], "readers fit": readers_[:1],
            "meetings held-out": [i for i in items if i["half"] == "held-out"], "readers held-out": readers_[1:]}
    sums = {}
    for pad in pads:
        scores = {name: score_set(diarizer, group, prepared, threshold, False, pad).der
                  for name, group in sets.items() if group}
        sums[pad] = scores.get("meetings fit", 0.0) + scores.get("readers fit", 0.0)
        print(f"pad {pad:.2f}: fit sum {sums[pad]:.3f}  " + "  ".join(f"{k} {v:.3f}" for k, v in scores.items()))
    print(f"pad fitted: {min(p for p in pads if sums[p] <= min(sums.values()) + TIED):.2f}")


def check_against(script: str, items) -> None:
    """Ours and the given scorer on the first hypothesis of each meeting."""
    with tempfile.TemporaryDirectory() as tmp:
        for item in [i for i in items if i["half"] in ("fit", "held-out")][:4]:
            hyp = next(iter(item["hyp"].values()))
            ref_path, hyp_path = Path(tmp) / "ref.rttm", Path(tmp) / "hyp.rttm"
            ref_path.write_text(der.rttm_lines(item["reference"], item["name"]))
            hyp_path.write_text(der.rttm_lines(hyp, item["name"]))
            theirs = subprocess.run([sys.executable, script, str(ref_path), str(hyp_path), "30"],
                                    capture_output=True, text=True).stdout.strip()
            ours = der.score(item["reference"], hyp, 30.0).der
            print(f"{item['name']}: ours DER {ours:.3f}; theirs: {theirs}")


SPEED_CHILD = """
import resource, sys, time, numpy as np
sys.path.insert(0, {root!r})
from bench.speakers.der import reader_sets
from transcriber.speakers import weights
from transcriber.speakers.pipeline import Diarizer
samples = reader_sets(repeat=5, limit=1)[0]["samples"][:600 * 16000]
start = time.perf_counter()
diarizer = Diarizer.from_weights(weights.speaker_weights(), **{options!r})
turns = diarizer.diarize(samples)
took = time.perf_counter() - start
seconds = len(samples) / 16000
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{{seconds:.0f}} s of audio: {{took:.1f}} s, {{took / seconds:.4f}}x real time, peak {{peak:.0f}} MB, "
      f"{{len(set(t[2] for t in turns))}} speakers")
"""


def steps(step: Optional[float]) -> dict:
    """The Diarizer's options for ``--steps``: ``step`` on both paths, or (None) their own."""
    return {} if step is None else {"step": step, "once_step": step}


def joined(step: Optional[float], threshold: float) -> None:
    """``--joined``: the meetings as one recording, each path of the pipeline."""
    items = meetings()
    for name, order in (("in name order", items), ("reversed", items[::-1])):
        gap = np.zeros(16000, dtype=np.float32)
        samples = np.concatenate([part for item in order for part in (item["samples"], gap)])
        starts = np.cumsum([0] + [len(item["samples"]) / 16000 + 1.0 for item in order])
        reference = [(s + t, e + t, k) for item, t in zip(order, starts) for s, e, k in item["reference"]]
        count = len({k for _, _, k in reference})
        for once_from, path in ((0.0, "each second once"), (float("inf"), "all each window hears")):
            diarizer = Diarizer.from_weights(weights.speaker_weights(), once_from=once_from, **steps(step))
            prepared = diarizer.prepare(samples)
            for given in (count, None):
                turns = diarizer.finish(prepared, num_speakers=given, threshold=threshold)
                label = f"joined {name}, {path}, count {'given' if given else 'not given'}"
                print(line(label[:60], der.score(reference, turns, len(samples) / 16000)))


def speed(step: Optional[float]) -> None:
    before = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-c", SPEED_CHILD.format(root=str(ROOT), options=steps(step))],
                         capture_output=True, text=True)
    print(f"speed (step {f'{step} s' if step else 'of each path'}): {out.stdout.strip() or out.stderr.strip()[-500:]}  "
          f"(load average {before:.1f} -> {os.getloadavg()[0]:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=float, nargs="+", default=[None],
                        help="window steps (s) to measure, on both paths (default: each path's own)")
    parser.add_argument("--thresholds", type=float, nargs="+", default=[clustering.THRESHOLD],
                        help="clustering thresholds to report (without --calibrate)")
    parser.add_argument("--calibrate", action="store_true", help="pick the threshold on the fit half")
    parser.add_argument("--no-readers", action="store_true", help="the meetings only")
    parser.add_argument("--no-meetings", action="store_true", help="the readers only")
    parser.add_argument("--speed", action="store_true", help="time the pass on a 10-minute recording")
    parser.add_argument("--only-speed", action="store_true", help="the speed only, no DER")
    parser.add_argument("--check-against", metavar="DER_PY", help="compare with this scorer script")
    parser.add_argument("--joined", action="store_true", help="the meetings joined in one recording, both paths")
    parser.add_argument("--pads", type=float, nargs="+", help="fit the turns' pad among these (s), then report")
    args = parser.parse_args()
    if args.joined:
        for step in args.steps:
            joined(step, args.thresholds[0])
        return
    if args.only_speed:
        for step in args.steps:
            speed(step)
        return
    items = ([] if args.no_meetings else meetings()) + ([] if args.no_readers else reader_sets())
    for step in args.steps:
        diarizer = Diarizer.from_weights(weights.speaker_weights(), **steps(step))
        start = time.perf_counter()
        prepared = {item["name"]: diarizer.prepare(item["samples"]) for item in items}
        audio = sum(len(i["samples"]) for i in items) / 16000
        print(f"--- step {step or f'{STEP} s, from {ONCE_FROM_S:g} s of recording {ONCE_STEP}'} s: models on {audio:.0f} s of audio in {time.perf_counter() - start:.0f} s")
        for threshold in [calibrate(diarizer, items, prepared)] if args.calibrate else args.thresholds:
            print(f"threshold {threshold}")
            if args.pads:
                fit_pads(diarizer, items, prepared, threshold, args.pads)
            report(diarizer, items, prepared, threshold)
        if args.check_against:
            check_against(args.check_against, items)
        if args.speed:
            speed(step)


if __name__ == "__main__":
    main()
