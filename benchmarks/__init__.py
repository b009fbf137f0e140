"""``make bench``: each ``benchmarks/bench_*.py`` prints figures beside a same-run baseline.

A benchmark module exposes ``run(quick: bool) -> list[Figure]`` (see ``common.Figure``); the
runner (``python -m benchmarks``) finds every ``bench_*`` module by name, runs each in its own
process and prints value, baseline and their ratio. Timings never go in ``tests/``.
"""
