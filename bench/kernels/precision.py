"""The native kernels' precision choices against MLX's float32 ops (issue 21, item 4): one table.

Per configuration, TRANSCRIBER_KERNELS=off (MLX's float32 ops, the reference), the kernels as
they serve by default (bfloat16 decoder weights, the bf16 encoder), with MLX's float32 encoder
(TRANSCRIBER_KERNEL_ENCODER=mlx), with float32 decoder weights too, with MLX's float32
multi-token passes (TRANSCRIBER_KERNEL_PASS=mlx: prompts, word timing), with the one-token
step's linears and projection in int8 (TRANSCRIBER_KERNEL_WEIGHTS=int8, src/int8.cpp), with its
projection only (=int8-projection), the AVX2 path's bf16 and int8 projection, and the AVX2 path's
encoder on integer products (TRANSCRIBER_KERNEL_ENCODER=int16, src/gemm.cpp's igemm) (``--configs``):

- tiny.en on the dev set (short_en + long_en, exact/exact-ish), one-shot and streaming, by
  bench/peers/dev_set.py: WER, median word start error, files whose words changed, the largest start
  shift of an unchanged word;
- base on the non_en recordings (language detected, one-shot), by bench/_worker_ours.py: the mean
  of the per-file WER/CER that bench/peers/multilingual.py scores, and files whose text changed;
- examples/jfk.flac: the same words?

The rule (issue 21): WER may not rise by more than 0.1 point, the word-start median may not
move, jfk.flac keeps its words. Run from the repository root (takes ~15 min on 2 cores):

    .venv/bin/python -m bench.kernels precision [--skip-base]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/: the workers
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from bench.peers.compare_faster_whisper import run_worker  # noqa: E402
from bench.peers.multilingual import NO_SPACE_LANGUAGES, SCORED, entries  # noqa: E402

from evalkit.scoring import cer, wer  # noqa: E402

OURS_PY = ROOT / ".venv" / "bin" / "python"
CONFIGS = (("MLX float32 (kernels off)", {"TRANSCRIBER_KERNELS": "off"}),
           ("kernels: bf16 decoder, bf16 encoder (default)", {"TRANSCRIBER_KERNEL_WEIGHTS": "bf16"}),
           ("kernels: bf16 decoder, MLX float32 encoder", {"TRANSCRIBER_KERNEL_ENCODER": "mlx"}),
           ("kernels, f32 decoder weights, MLX float32 encoder",
            {"TRANSCRIBER_KERNEL_WEIGHTS": "f32", "TRANSCRIBER_KERNEL_ENCODER": "mlx"}),
           ("kernels, MLX float32 prompt pass", {"TRANSCRIBER_KERNEL_PASS": "mlx"}),
           ("kernels: int8 decoder step (projection and linears)", {"TRANSCRIBER_KERNEL_WEIGHTS": "int8"}),
           ("kernels: int8 vocabulary projection (step)", {"TRANSCRIBER_KERNEL_WEIGHTS": "int8-projection"}),
           ("avx2 kernels: bf16 decoder", {"TRANSCRIBER_KERNELS": "avx2", "TRANSCRIBER_KERNEL_WEIGHTS": "bf16"}),
           ("avx2 kernels: int8 vocabulary projection",
            {"TRANSCRIBER_KERNELS": "avx2", "TRANSCRIBER_KERNEL_WEIGHTS": "int8-projection"}),
           ("avx2 kernels: int16 encoder (integer linears)",
            {"TRANSCRIBER_KERNELS": "avx2", "TRANSCRIBER_KERNEL_ENCODER": "int16"}))


def dev_set(env: dict, out: Path) -> dict:
    subprocess.run([str(OURS_PY), str(BENCH / "peers" / "dev_set.py"), "--out", str(out)], check=True,
                   env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def changed(a: dict, b: dict) -> tuple[int, float]:
    """Files whose words differ, and the largest start shift of the words of the others."""
    files, shift = 0, 0.0
    for f, words in a.items():
        if [w[0] for w in words] != [w[0] for w in b[f]]:
            files += 1
            continue
        shift = max([shift] + [abs(x[1] - y[1]) for x, y in zip(words, b[f])])
    return files, shift


def base_non_en(env: dict, data: Path) -> tuple[float, list[str]]:
    rows = entries(data)
    job = {"files": [str(data / e["file"]) for e in rows], "threads": 2, "word_timestamps": True,
           "warmup": False, "language": None, "detail": True, "model": "base", "mode": "oneshot", "env": env}
    res = run_worker(OURS_PY, "_worker_ours.py", job, 2, 3600)
    if "error" in res:
        sys.exit(f"base run failed: {res['error']}")
    rates = [(cer if e["language"] in NO_SPACE_LANGUAGES else wer)(e["text"], r["text"], e["language"])
             for e, r in zip(rows, res["hyps"]) if e["reference_quality"] in SCORED]
    return 100 * sum(rates) / len(rates), [r["text"] for r in res["hyps"]]


def jfk_words(env: dict) -> list[str]:
    code = "import transcriber; print('\\n'.join(w.text for w in transcriber.transcribe('examples/jfk.flac').words))"
    out = subprocess.run([str(OURS_PY), "-c", code], cwd=ROOT, env={**os.environ, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data"))
    ap.add_argument("--skip-base", action="store_true", help="only tiny.en (dev set, jfk)")
    ap.add_argument("--configs", default=",".join(str(i) for i in range(len(CONFIGS))),
                    help="which configurations, by index (0, the reference, always runs)")
    args = ap.parse_args()
    picked = sorted({0, *(int(i) for i in args.configs.split(","))})
    os.environ["TRANSCRIBER_TEST_DATA"] = str(args.data)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, env) in ((i, CONFIGS[i]) for i in picked):
            print(f"  {name} ({os.getloadavg()[0]:.1f} load)", file=sys.stderr)
            results[name] = {"dev": dev_set(env, Path(tmp) / f"{i}.json"), "jfk": jfk_words(env),
                             "base": None if args.skip_base else base_non_en(env, args.data)}
    ref = results[CONFIGS[0][0]]
    print("| configuration | mode | WER % | median start error s | files with other words | max start shift s "
          "| jfk same words | base non_en mean WER/CER % | base files with other text |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|")
    for name, r in results.items():
        for mode, m in r["dev"]["modes"].items():
            files, shift = changed(ref["dev"]["modes"][mode]["words"], m["words"])
            base = "" if r["base"] is None or mode != "oneshot" else f"{r['base'][0]:.2f}"
            base_diff = "" if r["base"] is None or mode != "oneshot" else \
                str(sum(a != b for a, b in zip(ref["base"][1], r["base"][1])))
            print(f"| {name} | {mode} | {100 * m['wer']:.2f} | {m['start_error_median']:.3f} | "
                  f"{files}/{len(m['words'])} | {shift:.3f} | {'yes' if r['jfk'] == ref['jfk'] else 'NO'} | "
                  f"{base} | {base_diff} |")


if __name__ == "__main__":
    main()
