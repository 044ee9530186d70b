#!/usr/bin/env python3
"""Prints the rows of an SPDK bdev_get_histogram reply (JSON on stdin), in the row format of
SPDK's scripts/histogram.py: "START - END: CUMULATIVE%  (COUNT)", START and END in us.

pmio's own reading of SPDK's layout (include/spdk/histogram_data.h), written for the tests,
which cannot fetch SPDK's script in CI; set SPDK_HISTOGRAM_PY to run SPDK's own instead.
The reply's "histogram" is base64 of little-endian u64 counts, 2^granularity buckets per
range, ranges min_range..=max_range; range 0 holds values below 2^granularity one apiece,
range r > 0 holds [2^(r+g-1), 2^(r+g)) in 2^g equal buckets.
"""
import base64
import json
import sys

reply = json.load(sys.stdin)
g = reply["granularity"]
lo, hi = reply["min_range"], reply["max_range"]
tsc = reply["tsc_rate"]
raw = base64.b64decode(reply["histogram"])
per = 1 << g
counts = [int.from_bytes(raw[k:k + 8], "little") for k in range(0, len(raw), 8)]
if len(counts) != per * (hi - lo + 1):
    sys.exit(f"{len(counts)} buckets, expected {per * (hi - lo + 1)}")


def bounds(r, j):
    """Values [start, end) bucket j of range r holds."""
    if r == 0:
        return j, j + 1
    width = 1 << (r - 1)
    start = (1 << (r + g - 1)) + j * width
    return start, start + width


total = sum(counts)
print("Latency histogram")
print("=" * 78)
print("       Range in us     Cumulative    IO count")
so_far = 0
for k, n in enumerate(counts):
    if n == 0:
        continue
    so_far += n
    start, end = bounds(lo + k // per, k % per)
    us = 1e6 / tsc
    print("%9.3f - %9.3f: %9.4f%%  (%9u)" % (start * us, end * us, so_far * 100.0 / total, n))
