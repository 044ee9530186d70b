# pmio — see README.md. Every target is safe to run on a fresh clone.
CARGO        ?= cargo
LOOM_TARGET  ?= target/loom
PERF_ARGS    ?= --dev null -t 10
# Where release binaries are (CARGO_TARGET_DIR honoured).
RELEASE      ?= $(or $(CARGO_TARGET_DIR),target)/release

.PHONY: all build test unit examples readme host-qemu aio-cost fault-alone nvmf-loopback nvmf-tls raid-replicas rbd lint fmt-check clippy doc loom miri miri-setup bench emu-bench perf vm-test vm-test-setup vm-test-tgt vm-test-nvmf vm-test-ana vm-test-nvmet vm-test-612 vm-test-auth vm-test-nvmet-auth vm-test-vhost vm-test-ublk bench-ublk bench-nvmf bench-nvmf-loopback bench-nvmf-spdk bench-nvmf-spdk-interleaved bench-vhost bench-operator clean

all: build

build:
	$(CARGO) build --release --workspace

# Everything CI runs (.ci/run calls this).
test: lint unit examples readme fault-alone nvmf-loopback nvmf-tls raid-replicas rbd loom miri vm-test vm-test-setup vm-test-tgt vm-test-nvmf vm-test-ana vm-test-nvmet vm-test-612 vm-test-vhost

unit:
	$(CARGO) test --workspace

# The embedding examples of pmio-runtime, each run to completion (they exit non-zero on an I/O
# error or a data mismatch); bdev_copy once more with a corrupted block, which must fail. The
# example daemon pmio-nvmf's malloc_tgt is built here; it serves until a signal, so
# test/tests/nvmf_malloc_tgt.rs (make unit) is what runs it.
EXAMPLES := hello_bdev bdev_copy callback_style
examples:
	$(CARGO) build -p pmio-runtime --examples
	$(CARGO) build -p pmio-nvmf --example malloc_tgt
	for e in $(EXAMPLES); do $(CARGO) run -q -p pmio-runtime --example $$e || exit 1; done
	! $(CARGO) run -q -p pmio-runtime --example bdev_copy -- --corrupt-lba 1000 2>/dev/null

# Every command README.md shows, run as written (test/ci/readme.sh): pmio-perf, pmio-tgt with
# pmio-rpc (NVMe/TCP target and host on 10.0.0.1 in a network namespace of its own), the
# examples; what needs a VM is listed there with the make target that runs it. About a minute.
readme:
	CARGO=$(CARGO) test/ci/readme.sh

# The NVMe fault tests each in a process of its own, debug and release, several seeds: the
# full run's timing hides what a test does alone (issue 15).
fault-alone:
	CARGO=$(CARGO) test/ci/fault-tests-alone.sh

# pmio's NVMe/TCP host against pmio-tgt's NVMe/TCP target on 127.0.0.1, no VM (issue 18):
# pmio-perf --verify at 4 KiB and 128 KiB with and without digests, the target killed -9 and
# restarted from save_config under I/O, the target gone for good, pmio-tgt as the host through
# pmio-rpc. About a minute after the build.
nvmf-loopback:
	CARGO=$(CARGO) test/ci/nvmf-loopback.sh

# NVMe/TCP over TLS 1.3 with PSKs on the loopback (issue 31): pmio-perf --verify through
# pmio-tgt's secure channel with SHA-256 and SHA-384 keys, wrong keys refused while a good host
# runs, save_config and -c, pmio-tgt as the host with --psk. About half a minute.
nvmf-tls:
	CARGO=$(CARGO) test/ci/nvmf-tls.sh

# A replicated volume across three pmio-tgts on the loopback (issue 29): a raid1 with a
# superblock over two NVMe/TCP replicas, served to pmio-perf --verify while a replica is
# killed -9, comes back and is rebuilt partially (write-intent bitmap), the other is killed and
# a fresh one rebuilt fully, and the head is restarted (assembled from the superblocks, the
# stale replica refused). One to three minutes after the build on two busy cores. A host
# write once failed here with NVMe Internal Error during the partial rebuild; it did not
# recur in 20 runs since (10 of the old rebuild thread, 6 rounds of the partial rebuild alone,
# 4 of the rebuild on a reactor), and the raid queue now logs, for any request it fails, the
# members it failed on and what each member's state was.
raid-replicas:
	CARGO=$(CARGO) test/ci/raid-replicas.sh

# pmio-rbd against a real one-node Ceph cluster (issue 30): test/ci/ceph.sh starts it (7 s;
# Ceph from test/ci/host-deps.sh) and the tests that need it, #[ignore]d in make unit, run
# here: data at QD 32 read back and equal to `rbd export`, resize, missing pool/image, a
# cluster that is down failing within its timeout; then test/ci/rbd-tgt.sh: pmio-tgt's
# bdev_rbd_* methods, the image over NVMe/TCP under pmio-perf --verify, bad input, save_config
# reloaded. About 40 s after the build.
rbd:
	test/ci/ceph.sh start
	$(CARGO) test -p pmio-rbd -- --ignored
	CARGO=$(CARGO) test/ci/rbd-tgt.sh

lint: fmt-check clippy doc

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p pmio-nvme --all-targets --features emulator -- -D warnings

# The API docs, warnings (broken or private intra-doc links) denied.
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --workspace

# Loom model checks of the lockless code, in their own target directory (a full rebuild).
loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(LOOM_TARGET) $(CARGO) test -p pmio --release --lib loom_
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(LOOM_TARGET) $(CARGO) test -p pmio-reactors --release --lib loom_
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(LOOM_TARGET) $(CARGO) test -p pmio-lvol --release --lib loom_

# Miri (undefined behaviour, data races) on the code it can run: sbitmap, the scheduler path
# (merged buffers addressed through one member's pointer), async I/O (a device writing into the
# buffers of dropped futures), the malloc copy's portable path, the reactors' executor (tasks
# polled in place through their headers, hand-made wakers; ~2 min).
# DMA memory, io_uring and VFIO are system calls Miri cannot make, nor ppoll: the executor tests
# of interrupt mode are skipped, and so is one whose 100 ms window Miri is too slow for. A pinned
# nightly, installed by miri-setup when missing; Miri builds in target/miri.
MIRI_TOOLCHAIN ?= nightly-2026-05-20
MIRI_EXEC_SKIP = a_wake_from_a_plain_thread_wakes_a_sleeping_reactor \
	a_task_woken_by_an_idle_poller_keeps_the_reactor_awake sleep_fires_on_the_reactor_clock \
	unfinished_tasks_are_dropped_on_their_own_core_at_stop many_tasks_share_turns_fairly
miri: miri-setup
	$(CARGO) +$(MIRI_TOOLCHAIN) miri test -p pmio --lib -- sbitmap sched_path::tests aio:: --skip prop_
	$(CARGO) +$(MIRI_TOOLCHAIN) miri test -p pmio-malloc --lib copy
	$(CARGO) +$(MIRI_TOOLCHAIN) miri test -p pmio-reactors --lib exec:: -- $(addprefix --skip ,$(MIRI_EXEC_SKIP))

miri-setup:
	@rustup run $(MIRI_TOOLCHAIN) cargo miri --version >/dev/null 2>&1 || \
		rustup toolchain install $(MIRI_TOOLCHAIN) --profile minimal --component miri --component rust-src

bench:
	$(CARGO) bench -p pmio

# The NVMe driver against the software controller on the other core (BENCHMARKS.md, issue 7).
emu-bench:
	$(CARGO) run --release -p pmio-nvme --features emulator --example emu_bench -- --op flush
	$(CARGO) run --release -p pmio-nvme --features emulator --example emu_bench -- --op read

# CPU per I/O of async bdev I/O against a poller over BdevQueue, null bdev, QD 128, one core,
# alternating rounds (BENCHMARKS.md, issue 17).
aio-cost:
	$(CARGO) run --release -p pmio-runtime --example aio_cost -- --rounds 5 --secs 2

# The main job on a built-in default device: pmio-perf on a null device for 10 s.
perf:
	$(CARGO) build --release -p pmio-perf
	$(RELEASE)/pmio-perf $(PERF_ARGS)

# The NVMe driver end to end in a QEMU guest (../shared/vm/run-in-vm), twice: with a 48-bit
# guest IOMMU, which reaches every address of the process (IOVA = virtual address throughout),
# and with a 39-bit one (QEMU 7.2's default; 9.0 and later default to 48), below the process's
# mmap area: every
# mapping then sits at an IOVA allocated from the ranges VFIO reports, and the run checks it
# did. The drive honours discards so deallocated blocks read zero. Step 10, a controller reset
# with reads in flight, runs 25 times in each (QEMU 7.2 crashed in about one such reset in 90
# before the driver deleted the queues first; `VM_NVME_RESETS=600` is the long hunt).
VM_TARGET ?= x86_64-unknown-linux-gnu
vm-test: host-qemu
	CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_DEBUG=0 \
	RUSTFLAGS='-C target-feature=+crt-static' \
		$(CARGO) build --release --target $(VM_TARGET) -p pmio-nvme --example vm_nvme
	$(RUN_IN_VM) --timeout 170 --qemu-arg=-global --qemu-arg=intel-iommu.aw-bits=48 \
		--qemu-arg=-set --qemu-arg=drive.nvm0.discard=unmap --env VM_NVME_EXPECT_DEALLOC_ZERO=1 \
		--env VM_NVME_RESETS=25 --env VM_NVME_EXPECT_IOVA=identity -- target/$(VM_TARGET)/release/examples/vm_nvme
	$(RUN_IN_VM) --timeout 170 --qemu-arg=-global --qemu-arg=intel-iommu.aw-bits=39 \
		--qemu-arg=-set --qemu-arg=drive.nvm0.discard=unmap --env VM_NVME_EXPECT_DEALLOC_ZERO=1 \
		--env VM_NVME_RESETS=25 --env VM_NVME_EXPECT_IOVA=translated -- target/$(VM_TARGET)/release/examples/vm_nvme
	$(CARGO) build --release -p pmio-perf
	$(RUN_IN_VM) --timeout 170 --disk-size 64M --qemu-arg=-global --qemu-arg=intel-iommu.aw-bits=48 \
		--file target/release/pmio-perf -- test/vm/nvme-perf-in-guest.sh
	$(RUN_IN_VM) --timeout 170 --disk-size 64M --nvme-opts mdts=4 --qemu-arg=-global --qemu-arg=intel-iommu.aw-bits=48 --file target/release/pmio-perf -- test/vm/nvme-split-in-guest.sh

# What the VM targets need first: run-in-vm (the repository `shared` beside this clone, or
# RUN_IN_VM) and QEMU: the one installed if it is 7.2 or newer, else (root) Debian's, installed
# only if apt removes and downgrades nothing (test/ci/host-deps.sh); run-in-vm then never
# installs QEMU itself, which it would do without that guard.
host-qemu:
	@test -x $(RUN_IN_VM) || { echo "$(RUN_IN_VM) not found: the VM tests need the repository" \
		"shared checked out beside this clone (../shared), or RUN_IN_VM=PATH" >&2; exit 1; }
	test/ci/host-deps.sh qemu

# pmio-setup in the guest: status, unbind to nvme, refusal while mounted, bind back to vfio-pci.
RUN_IN_VM ?= $(CURDIR)/../shared/vm/run-in-vm
vm-test-setup: host-qemu
	$(CARGO) build --release -p pmio-setup
	$(RUN_IN_VM) --quiet --timeout 240 --module nvme --module crc32c_generic --module ext4 \
		--file target/release/pmio-setup -- test/vm/setup-in-guest.sh

# pmio-tgt + pmio-rpc in the guest on the emulated NVMe controller: attach, perform_tests (none
# and mq-deadline), save_config, detach, kill, restart with -c. IOVA = VA needs 48-bit IOMMU.
vm-test-tgt: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc
	$(RUN_IN_VM) --quiet --timeout 300 --cpus 2 --qemu-arg=-global --qemu-arg=intel-iommu.aw-bits=48 \
		--file target/release/pmio-tgt --file target/release/pmio-rpc -- test/vm/tgt-in-guest.sh

# pmio-tgt as an NVMe/TCP target for the guest kernel's own host (issue 16): dd, pmio-perf
# --verify at 4 KiB and 128 KiB with and without digests, namespaces changed while connected, a
# refused host, disconnect, a thin lvol (dd, snapshot while connected, resize seen by the host,
# the clone exported and read back; issue 28), kill under I/O and restart from the saved config.
vm-test-nvmf: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc -p pmio-perf
	$(RUN_IN_VM) --quiet --timeout 400 --cpus 2 --module nvme-tcp --module crc32c_generic \
		--file target/release/pmio-tgt --file target/release/pmio-rpc \
		--file target/release/pmio-perf -- test/vm/nvmf-in-guest.sh

# The guest scripts that need Debian 13's 6.12 kernel (vm-test-auth, vm-test-nvmet-auth,
# vm-test-ublk below) in one boot, one after another: test/vm/guest-612.sh's TESTS table says
# which (a new one is a line there), each-in-guest.sh names a failed script and runs the rest.
# `make test` runs this instead of the three. Measured 2026-12-06 on the shared 2-core host
# (load average 15 to 19, so script times swing by half): the three targets alone took 315 +
# 92 + 220 = 627 s wall (boot and harness about 37 s of each), this one 474 s (scripts 193 +
# 33 + 177 s, boot and harness 71 s). A script's own target boots a guest with its modules
# only; all use the same files.
GUEST_612 = RUN_IN_VM=$(RUN_IN_VM) RELEASE=$(RELEASE) test/vm/guest-612.sh
vm-test-612: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc -p pmio-perf
	$(GUEST_612)

# Two pmio-tgt gateways (one subsystem NQN with ANA reporting, disjoint controller ID ranges,
# one namespace on one tmpfs file standing in for an RBD image) and the guest kernel's native
# NVMe multipath (issue 30): one head, two paths, optimized and non-optimized; pmio-perf
# --verify while gateway A is killed -9 and B set optimized; A restarted from its save_config
# and B set back: the I/O fails back to A (the gateways' nvmf_get_stats).
vm-test-ana: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc -p pmio-perf
	$(RUN_IN_VM) --quiet --timeout 300 --cpus 2 --module nvme-tcp --module crc32c_generic \
		--file target/release/pmio-tgt --file target/release/pmio-rpc \
		--file target/release/pmio-perf -- test/vm/ana-in-guest.sh

# Linux's NVMe/TCP host with in-band authentication (Debian 13's 6.12 kernel) against pmio-tgt
# (issue 31): dhchap_secret= and dhchap_ctrl_secret= through /dev/nvme-fabrics under three
# DH-HMAC-CHAP policies, dd and pmio-perf --verify on every authenticated controller, wrong
# secrets refused and counted. About 2 minutes.
vm-test-auth: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc -p pmio-perf
	$(GUEST_612) auth

# pmio's NVMe/TCP host against Linux's nvmet-tcp with in-band authentication (issue 31,
# Debian 13's 6.12 kernel): configfs dhchap_key/dhchap_ctrl_key with SHA-256/null,
# SHA-384/ffdhe2048 and SHA-512/ffdhe3072, pmio-perf --verify with dhchap_key= files, host-only
# and bidirectional; a wrong key and a wrong controller key refused. About 70 s.
vm-test-nvmet-auth: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc -p pmio-perf
	$(GUEST_612) nvmet-auth

# pmio's NVMe/TCP host against Linux's nvmet-tcp (configfs, a tmpfs file) in the guest (issue
# 18): pmio-perf --verify with and without digests, and the subsystem unlinked from its port
# and relinked under a pmio-perf --verify run with reconnect options.
vm-test-nvmet: host-qemu
	$(CARGO) build --release -p pmio-perf
	$(RUN_IN_VM) --quiet --timeout 300 --cpus 2 --module nvmet-tcp --module crc32c_generic \
		--file $(RELEASE)/pmio-perf -- test/vm/nvmet-host-in-guest.sh

# pmio-tgt on the host serving a QEMU guest's virtio disks over vhost-user-blk (issue 19): RPC
# checks, then in the guest dd, pmio-perf --verify at 4 KiB and 128 KiB on two queues, a driver
# reset, discard and write zeroes, a read-only disk; pmio-tgt restarted from save_config; last,
# pmio-tgt killed -9 under the guest's pmio-perf --verify and restarted (QEMU reconnects, the
# in-flight log resubmits). About 40 s.
vm-test-vhost: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc -p pmio-perf
	$(CARGO) build --release -p pmio-vhost --example blkzeroout
	RUN_IN_VM=$(RUN_IN_VM) test/vm/vhost-test.sh

# pmio-tgt serving bdevs as /dev/ublkbN through the guest's ublk_drv (issue 33; Debian 13's
# kernel): RPC errors, a malloc bdev on 2 queues, pmio-perf --verify at 4 KiB and 128 KiB
# with the kernel's copy and with user copy, a disk stopped under I/O, discard reading zeros,
# a thin lvol, mkfs.ext4 + mount + checksums across a disk stop and start, pmio-tgt's exit
# removing the disk, pmio-tgt killed -9 under a mounted ext4 and restarted with
# ublk_recover_disk while a copy to it is being written, ublk_destroy_target. 220 s alone at a
# load average of 17 (80 s on a quieter host before user copy and the stop under I/O).
vm-test-ublk: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc -p pmio-perf
	$(GUEST_612) ublk

# pmio-tgt against Linux's nvmet-tcp in the guest, same initiator load (BENCHMARKS.md).
bench-nvmf: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc -p pmio-perf
	$(RUN_IN_VM) --quiet --timeout 600 --cpus 2 --module nvme-tcp --module nvmet-tcp \
		--module null_blk --append "null_blk.nr_devices=1 null_blk.gb=1" \
		--file target/release/pmio-tgt --file target/release/pmio-rpc \
		--file target/release/pmio-perf -- test/vm/nvmf-bench-in-guest.sh

# pmio's NVMe/TCP pair on the host over 127.0.0.1 (issue 18, BENCHMARKS.md "#18 loopback"):
# pmio-tgt on core 0 with a null bdev, pmio-perf as the host on core 1, 4 KiB random reads at
# QD 128; IOPS and CPU per I/O on each side, 5 runs of 10 s. Not part of `make test`.
bench-nvmf-loopback:
	CARGO=$(CARGO) test/ci/nvmf-loopback-bench.sh

# pmio-tgt beside SPDK's nvmf_tgt (issue 26, BENCHMARKS.md "#26"), each driven by spdk_nvme_perf
# and by pmio-perf on 127.0.0.1: 4 KiB and 128 KiB random reads and 4 KiB in-capsule writes at
# QD 128, 64 connections at QD 8, resident memory with 256 idle connections; alternating rounds,
# each target fresh and alone. Needs SPDK v25.09 built outside the tree (SPDK_DIR, default
# /tmp/spdk: ../shared/reference/spdk-build.md). BENCH_ROUNDS, BENCH_SECS, BENCH_CASES: see the
# script. Not part of `make test`.
bench-nvmf-spdk:
	CARGO=$(CARGO) test/ci/nvmf-spdk-bench.sh

# The same targets in interleaved slices (one pair runs while the other is held by SIGSTOP):
# ratios that the machine's second-to-second swings do not move.
bench-nvmf-spdk-interleaved:
	CARGO=$(CARGO) test/ci/nvmf-spdk-interleaved.sh

# pmio-tgt's vhost-user-blk target beside qemu-storage-daemon's (null bdev / null-co, both
# pinned to host core 0, the guest to core 1): one guest, /dev/vda and /dev/vdb, the same
# pmio-perf load alternately; IOPS, p99 and each backend's CPU per I/O (BENCHMARKS.md). About
# 2 minutes; not part of `make test`. BENCH_PRIO=1 (root) raises the session's autogroup so a
# loaded machine's other work gets little of the backends' core (it then starves that work);
# BENCH_ROUNDS, BENCH_SECS, BENCH_DEPTH, BENCH_CPU, BENCH_GUEST_CPUS, BENCH_LOGS: see the script.
bench-vhost: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc -p pmio-perf
	RUN_IN_VM=$(RUN_IN_VM) test/vm/vhost-bench.sh

# /dev/ublkb0 and /dev/ublkb1 from pmio-tgt's null bdevs (the kernel copying the data, and
# user copy) against the kernel's null_blk in the guest (issue 33, BENCHMARKS.md): 4 KiB and
# 128 KiB random reads, QD 128, one core each side, 3 rounds of 10 s alternating. About 4
# minutes; not part of `make test`.
bench-ublk: host-qemu
	$(CARGO) build --release -p pmio-tgt -p pmio-rpc -p pmio-perf
	$(RUN_IN_VM) --quiet --timeout 600 --cpus 2 --kernel 6.12 --module ublk_drv --module null_blk \
		--append "null_blk.nr_devices=1 null_blk.gb=1 null_blk.bs=4096" \
		--file target/release/pmio-tgt --file target/release/pmio-rpc \
		--file target/release/pmio-perf -- test/vm/ublk-bench-in-guest.sh

# What latency histograms and a /metrics scrape cost (issue 32; BENCHMARKS.md "The operator's
# view"): pmio-perf --latency-histogram off/on alternating, then pmio-tgt's scrape time and
# perform_tests IOPS with and without a client scraping. Release binaries; ~2 min.
bench-operator:
	$(CARGO) build --release -p pmio-perf -p pmio-tgt -p pmio-rpc
	RELEASE=$(RELEASE) test/ci/bench-operator.sh

clean:
	$(CARGO) clean
	rm -rf $(LOOM_TARGET)
