"""The benchmark suites that ship with posenc, run by ``posenc bench SUITE``: ``rope``, ``bias``,
``attention``, ``lab``, ``data_dependent`` (one module each) on ``harness`` (interleaved
rounds, medians, the machine record). ``benchmarks/README.md`` indexes every benchmark, these
and the repository's scripts beside it (``benchmarks/*.py``), and every field of the JSON they
write."""
