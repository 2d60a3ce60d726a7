"""The hostile-input suite: what a careless user, or an attacker, can hand the command, one
module per thing handed over, each test named by what it guards.

- test_sources: the inputs named (odd names, links, files that are not media, FIFOs, files we
  may not read, a file rewritten or deleted mid-run);
- test_database: the job database (not ours, locked, full, its folder unusable, deleted,
  truncated or replaced mid-run; a lost database's outputs adopted);
- test_outputs: the outputs (whose they are, where a job may write them, a full disk);
- test_environment: faults no input can cause (ffprobe that cannot start, a full temporary
  folder, an unusable cache or model, a malformed model config) and bad TRANSCRIBER_* settings;
- test_cache: caches and model folders as data, never instructions (a poisoned BLAS cache,
  private cache files, a model folder naming files outside itself);
- test_hung_mounts: reads that never answer;
- test_usage: the command line (flags past their range, usage errors, stops, counts).

Each case asserts the exit status, the one line that names the file and the cause, that no
partial output is left, and that the job database is intact. The model is scripted
(tests/app/test_jobs_runner.py's ScriptedEngine) except where audio must really be decoded.
"""
