"""Running jobs: files found (discover.py) and enqueued (enqueue.py), the runner a command makes
(runners.py: in this process, local.py, or on Ray, ray_runner.py + ray_worker.py), one attempt's
life (attempt.py), its outputs (outputs.py), stops (signals.py), watch and follow."""
