#!/usr/bin/env python3
"""Alternating A/B of two pmio-perf binaries on a noisy machine: per-round ratios, medians.
Usage: apps/perf/ab.py BIN_A BIN_B ROUNDS -- pmio-perf args (without --json)"""
import json, subprocess, sys, statistics
a, b, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
args = sys.argv[sys.argv.index('--') + 1:]
res = {a: [], b: []}
for r in range(rounds):
    for binary in ((a, b) if r % 2 == 0 else (b, a)):
        out = subprocess.run([binary, *args, '--json'], capture_output=True, text=True, check=True).stdout
        j = json.loads(out)
        res[binary].append((j['iops'], j['cpu_ns_per_io']))
    ia, ib = res[a][-1], res[b][-1]
    print(f"round {r+1}: A {ia[0]/1e6:.2f} M IOPS {ia[1]} ns/IO | B {ib[0]/1e6:.2f} M IOPS {ib[1]} ns/IO | B/A IOPS {ib[0]/ia[0]:.3f} cpu {ib[1]/ia[1]:.3f}")
ratios_iops = [y[0] / x[0] for x, y in zip(res[a], res[b])]
ratios_cpu = [y[1] / x[1] for x, y in zip(res[a], res[b])]
print(f"median B/A IOPS {statistics.median(ratios_iops):.3f} (range {min(ratios_iops):.3f}-{max(ratios_iops):.3f}), CPU/IO {statistics.median(ratios_cpu):.3f} (range {min(ratios_cpu):.3f}-{max(ratios_cpu):.3f})")
