"""Resident memory of this process for the reference benchmarks' JSON lines (MB = MiB), as
bench/bench_memory.h measures the C++ side."""
import resource


def rss_now_mb():
    """VmRSS of /proc/self/status now, 0 where that is not readable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def peak_rss_mb():
    """The peak so far (ru_maxrss, KiB on Linux): it never goes down."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
