"""Drills and helpers the tests and benchmarks share, kept out of the shipped packages.

- `crashdrill`: a real `tokenpilot serve` killed with SIGKILL mid-burst, and what survived;
- `fleetdrill`: one session sent round-robin to proxy replicas on one Redis;
- `local_redis`: a private `redis-server` that tests stall or kill.

Benchmarks put `tests/` on `sys.path` to import them (`from drills.crashdrill import ...`).
"""
