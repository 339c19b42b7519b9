"""Timing a reference benchmark's step, as bench/bench_timing.h times the C++ side."""
import statistics
import time


def median_ms(fn, repeats):
    """One warm-up call, then the median of `repeats` timed calls, in ms; repeats 0: one cold timed
    call (a peak-memory measurement that cannot afford a second run)."""
    if repeats > 0:
        fn()
    times = []
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3
