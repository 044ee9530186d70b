#!/usr/bin/env python3
"""pmio-perf on a uring bdev side by side with t/io_uring and fio's io_uring engine: 4 KiB
random reads, QD128, batches of 32, one CPU, alternating rounds in one run; medians, and each
tool's per-round ratios to t/io_uring.
CPU per I/O = the child's user+system time (getrusage) / I/Os, the same for every tool.
The order of the tools rotates from round to round.

usage: drivers/uring/bench_peers.py FILE buffered|direct|nop ROUNDS SECONDS [CPU]
  FILE: e.g. a 1 GiB file on ext4 filled from /dev/urandom (buffered rounds `cat` it into the
  page cache first). Needs target/release/pmio-perf (cargo build --release -p pmio-perf), fio
  (apt-get install fio) and t/io_uring built from fio's source outside the repository, at
  $T_IO_URING (default /tmp/fio-src/fio-3.33/t/io_uring). See BENCHMARKS.md.
  $PMIO_PERF="LABEL=BINARY[,LABEL=BINARY...]" runs these pmio-perf builds instead (A/B of
  driver changes in one run, e.g. before=/tmp/pmio-perf-old,after=target/release/pmio-perf).
  direct: $PMIO_WAIT_US sets pmio-perf's wait_us (default 1000); PMIO_POLL=0 skips its
  pure-polling runs. buffered: with $PMIO_WAIT_US set, pmio-perf also runs with that wait.
  nop: every I/O is an IORING_OP_NOP (pmio-perf's uring `nop=1` against t/io_uring -N1; fio has
  no such mode): the I/O path's own cost, with no file system or page cache under it.
"""
import json, os, re, resource, shutil, subprocess, sys, statistics

F = sys.argv[1]
MODE = sys.argv[2]          # buffered | direct | nop
ROUNDS = int(sys.argv[3])
T = int(sys.argv[4])
CPU = sys.argv[5] if len(sys.argv) > 5 else "1"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PERF = os.path.join(ROOT, "target/release/pmio-perf")
TIO = os.environ.get("T_IO_URING", "/tmp/fio-src/fio-3.33/t/io_uring")
if MODE not in ("buffered", "direct", "nop"):
    sys.exit(f"mode {MODE!r}: expected buffered, direct or nop\n{__doc__}")
direct = MODE == "direct"
nop = MODE == "nop"

def run(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return p, cpu

def pmio(wait_us=0, perf=PERF):
    spec = f"uring:path={F},direct={1 if direct else 0}" + (f",wait_us={wait_us}" if wait_us else "")
    if nop:
        spec += ",nop=1"
    cmd = [perf, "-m", f"[{CPU}]", "-d", "128", "-s", "32", "-c", "32", "-b", "4096", "-w", "randread",
           "-t", str(T), "--dev", spec, "--json"]
    p, cpu = run(cmd)
    j = json.loads(p.stdout)
    ios = j["ios"]
    return j["iops"], cpu / ios, " ".join(cmd)

def tio():
    cmd = ["taskset", "-c", CPU, TIO, "-d128", "-s32", "-c32", "-b4096", "-p0", "-r", str(T),
           "-F1", "-B1", "-O1" if direct else "-O0", "-n1"] + (["-N1"] if nop else []) + [F]
    p, cpu = run(cmd)
    mult = {"": 1, "K": 1e3, "M": 1e6}
    vals = [float(a) * mult[b] for a, b in re.findall(r"^IOPS=([\d.]+)([KM]?),", p.stdout, re.M)]
    iops = statistics.mean(vals)
    # t/io_uring prints one line per second after the first; CPU time covers the whole run.
    return iops, cpu / (iops * T), " ".join(cmd)

def fio():
    cmd = ["taskset", "-c", CPU, "fio", "--name=b", f"--filename={F}", "--rw=randread", "--bs=4k",
           "--iodepth=128", "--iodepth_batch_submit=32", "--iodepth_batch_complete_min=32",
           "--iodepth_batch_complete_max=32", "--time_based", f"--runtime={T}", "--norandommap",
           "--randrepeat=0", "--ioengine=io_uring", "--fixedbufs=1", "--registerfiles=1",
           "--sqthread_poll=0", "--hipri=0", "--output-format=json"]
    cmd += ["--direct=1"] if direct else ["--direct=0", "--invalidate=0"]
    p, cpu = run(cmd)
    j = json.loads(p.stdout[p.stdout.index("{"):])
    rd = j["jobs"][0]["read"]
    return rd["iops"], cpu / rd["total_ios"], " ".join(cmd)

builds = [("", PERF)]
if os.environ.get("PMIO_PERF"):
    builds = [(" " + b.split("=", 1)[0], b.split("=", 1)[1]) for b in os.environ["PMIO_PERF"].split(",")]
# O_DIRECT runs pmio-perf both pure-polling and with a wait of $PMIO_WAIT_US (default 1000);
# PMIO_POLL=0 leaves out the pure-polling runs (they burn the core: compare IOPS only).
# Buffered runs add the waiting runs when $PMIO_WAIT_US is set (a tmpfs file's reads go to an
# io-wq worker on the reactor's core, which a polling reactor starves; see BENCHMARKS.md).
WAIT_US = int(os.environ.get("PMIO_WAIT_US", "1000"))
WAIT = direct or (MODE == "buffered" and "PMIO_WAIT_US" in os.environ)
POLL = os.environ.get("PMIO_POLL", "1") != "0" or not WAIT
tools = []
for label, binary in builds:
    if POLL:
        tools.append((f"pmio-perf{label}", lambda b=binary: pmio(0, b)))
    if WAIT:
        tools.append((f"pmio-perf{label} wait_us={WAIT_US}", lambda b=binary: pmio(WAIT_US, b)))
# fio is optional: a machine with t/io_uring built but no fio installed still compares.
HAVE_FIO = shutil.which("fio") is not None
if not HAVE_FIO and not nop:
    print("fio is not installed: its column is left out", flush=True)
tools += [("t/io_uring", tio)] + ([("fio", fio)] if HAVE_FIO and not nop else [])
res = {name: [] for name, _ in tools}
cmds = {}
for r in range(ROUNDS):
    # Each round starts with the next tool (rotation), so no tool always runs first after
    # the page-cache refresh or right after another given tool.
    k = r % len(tools)
    for name, f in tools[k:] + tools[:k]:
        if MODE == "buffered":
            subprocess.run(["cat", F], stdout=subprocess.DEVNULL)
        iops, cpu_io, cmd = f()
        res[name].append((iops, cpu_io))
        cmds[name] = cmd
        print(f"round {r} {name:24s} IOPS={iops/1e3:8.1f}K CPU/IO={cpu_io*1e9:7.0f} ns", flush=True)
print(f"== {MODE}: medians over {ROUNDS} rounds of {T}s on CPU {CPU}")
for name, v in res.items():
    print(f"{name:24s} IOPS={statistics.median(x[0] for x in v)/1e3:8.1f}K "
          f"CPU/IO={statistics.median(x[1] for x in v)*1e9:7.0f} ns")
# Per-round ratios to t/io_uring: both ran within the same round, minutes apart at most, so
# these carry less of the machine's swing than the ratio of the medians above.
print("== per round, vs t/io_uring (IOPS ratio; CPU per I/O ratio)")
tio_res = res["t/io_uring"]
for name, v in res.items():
    if name == "t/io_uring":
        continue
    ri = [a[0] / b[0] for a, b in zip(v, tio_res)]
    rc = [a[1] / b[1] for a, b in zip(v, tio_res)]
    print(f"{name:24s} IOPS {' '.join(f'{x:.2f}' for x in ri)} (median {statistics.median(ri):.3f}); "
          f"CPU/IO {' '.join(f'{x:.2f}' for x in rc)} (median {statistics.median(rc):.3f})")
for name, c in cmds.items():
    print(f"{name}: {c}")
