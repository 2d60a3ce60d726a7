"""The timing loop both workers share (stdlib only: it runs in either interpreter).

Job on stdin: {"files": [...], "compute_type": str|None, "threads": int,
               "word_timestamps": bool, "warmup": bool}
Result, one JSON line on stdout: {"hyps": [...], "load_s", "transcribe_s", "cpu_s",
                                  "peak_rss_mb", "info", "file_s": [seconds per file]}
"""
import json
import resource
import sys
import time


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(load, transcribe, info):
    """load(job) -> model; transcribe(model, path, word_timestamps) -> text; info() -> str."""
    job = json.load(sys.stdin)
    t0 = time.perf_counter()
    model = load(job)
    load_s = time.perf_counter() - t0
    if job["warmup"]:
        transcribe(model, job["files"][0], job["word_timestamps"])
    t0, c0 = time.perf_counter(), cpu_seconds()
    hyps, file_s = [], []
    for f in job["files"]:
        t1 = time.perf_counter()
        hyps.append(transcribe(model, f, job["word_timestamps"]))
        file_s.append(time.perf_counter() - t1)
    transcribe_s, cpu_s = time.perf_counter() - t0, cpu_seconds() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    print(json.dumps({"hyps": hyps, "load_s": load_s, "transcribe_s": transcribe_s, "cpu_s": cpu_s,
                      "peak_rss_mb": rss / (2**20 if sys.platform == "darwin" else 2**10),
                      "info": info(), "file_s": file_s}))
