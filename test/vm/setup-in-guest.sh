#!/bin/sh
# Runs inside the run-in-vm guest (busybox sh): pmio-setup status, unbind to the kernel nvme
# driver, status again (namespaces visible), bind back to vfio-pci, and the refusals users meet.
set -u
BDF="$RUN_IN_VM_NVME_BDF"
SETUP=/job/pmio-setup
fail() { echo "setup-vm: FAIL: $*"; exit 1; }
drv() { basename "$(readlink /sys/bus/pci/devices/$BDF/driver 2>/dev/null)" 2>/dev/null; }

out=$($SETUP status) || fail "status exited $?"
echo "$out"
echo "$out" | grep -q "IOMMU: enabled" || fail "status does not see the IOMMU"
echo "$out" | grep -q "NVMe $BDF: driver vfio-pci" || fail "status does not show $BDF on vfio-pci"
echo "$out" | grep -q "module vfio_pci: loaded" || fail "status does not see vfio_pci"

$SETUP unbind "$BDF" || fail "unbind exited $?"
[ "$(drv)" = nvme ] || fail "after unbind the driver is $(drv), not nvme"
i=0; while [ ! -e /sys/block/nvme0n1 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
out=$($SETUP status) || fail "status exited $?"
echo "$out"
echo "$out" | grep -q "NVMe $BDF: driver nvme" || fail "status does not show nvme"
echo "$out" | grep -q "namespaces: nvme0n1" || fail "status does not list nvme0n1"

# A mounted namespace must be refused, naming the mount.
mkdir -p /mnt/ns
if mke2fs /dev/nvme0n1 >/dev/null 2>&1; then
    mount -t ext4 /dev/nvme0n1 /mnt/ns >/dev/null || fail "mount"
    msg=$($SETUP bind "$BDF" 2>&1) && fail "bind succeeded while mounted"
    echo "$msg"
    echo "$msg" | grep -q "mounted on /mnt/ns" || fail "refusal does not name the mount: $msg"
    umount /mnt/ns
else
    echo "setup-vm: no mkfs in the guest; mounted-namespace refusal checked by unit tests only"
fi

$SETUP bind "$BDF" || fail "bind exited $?"
[ "$(drv)" = vfio-pci ] || fail "after bind the driver is $(drv), not vfio-pci"
[ -e "/dev/vfio/$(basename "$(readlink /sys/bus/pci/devices/$BDF/iommu_group)")" ] || fail "no /dev/vfio group node"

msg=$($SETUP bind 0000:00:1f.7 2>&1) && fail "bind of a missing device succeeded"
echo "$msg" | grep -q "no PCI device" || fail "missing device message: $msg"
$SETUP hugepages 4 --size 2M || fail "hugepages exited $?"
echo "setup-vm: OK"
