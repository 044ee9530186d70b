//! NVMe passthrough over io_uring (`IORING_OP_URING_CMD` on an NVMe generic character device
//! `/dev/ngXnY`): the command layout, its encoding into the 80-byte command area of a 128-byte
//! SQE, completion-status decoding, and the admin ioctls used once at create time.
//!
//! This machine has no `/dev/ng*` device; the encoding is unit-tested against the kernel's
//! `struct nvme_uring_cmd` (include/uapi/linux/nvme_ioctl.h) byte for byte.

use std::fs::File;
use std::io;
use std::mem::offset_of;
use std::os::fd::AsRawFd;
use std::path::Path;

use pmio::IoStatus;
use pmio::request::NvmeStatus;

/// `NVME_URING_CMD_IO` = `_IOWR('N', 0x80, struct nvme_uring_cmd)`: the `cmd_op` of an I/O
/// command sent with `IORING_OP_URING_CMD`.
pub const NVME_URING_CMD_IO: u32 = ioc_iowr(b'N', 0x80, size_of::<NvmeUringCmd>());
/// `NVME_IOCTL_ID` = `_IO('N', 0x40)`: the namespace ID of an open namespace device.
const NVME_IOCTL_ID: u32 = (b'N' as u32) << 8 | 0x40;
/// `NVME_IOCTL_ADMIN_CMD` = `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
const NVME_IOCTL_ADMIN_CMD: u32 = ioc_iowr(b'N', 0x41, size_of::<NvmeUringCmd>());

/// Linux `_IOWR(ty, nr, size)` on x86/arm (dir bits 31:30 = read|write, size 29:16).
const fn ioc_iowr(ty: u8, nr: u8, size: usize) -> u32 {
    (3u32 << 30) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}

/// NVM command set opcodes used here.
pub mod opcode {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DSM: u8 = 0x09;
    /// Admin: identify.
    pub const ADMIN_IDENTIFY: u8 = 0x06;
}

/// `struct nvme_uring_cmd` (same layout as `struct nvme_passthru_cmd64` minus the result, and
/// as `struct nvme_passthru_cmd` for the admin ioctl, whose last word is the result).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmeUringCmd {
    pub opcode: u8,
    pub flags: u8,
    pub rsvd1: u16,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub metadata: u64,
    /// Data buffer address (user virtual address).
    pub addr: u64,
    pub metadata_len: u32,
    /// Data length in bytes.
    pub data_len: u32,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
    pub timeout_ms: u32,
    /// Reserved in the uring form; the admin ioctl returns the command's result here.
    pub rsvd2: u32,
}

const _: () = assert!(size_of::<NvmeUringCmd>() == 72);
const _: () = assert!(offset_of!(NvmeUringCmd, addr) == 24);
const _: () = assert!(offset_of!(NvmeUringCmd, cdw10) == 40);

/// One Dataset Management range (NVMe base spec, figure "Dataset Management – Range").
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DsmRange {
    pub context_attributes: u32,
    /// Length in logical blocks (1-based).
    pub nlb: u32,
    pub slba: u64,
}

const _: () = assert!(size_of::<DsmRange>() == 16);

/// Force unit access bit of CDW12 for reads and writes.
const CDW12_FUA: u32 = 1 << 30;
/// Deallocate attribute of the DSM command (CDW11).
const DSM_ATTR_DEALLOCATE: u32 = 1 << 2;

impl NvmeUringCmd {
    fn rw(opc: u8, nsid: u32, slba: u64, nlb: u32, addr: u64, len: u32, fua: bool) -> Self {
        NvmeUringCmd {
            opcode: opc,
            nsid,
            addr,
            data_len: len,
            cdw10: slba as u32,
            cdw11: (slba >> 32) as u32,
            // NLB is 0-based.
            cdw12: nlb.saturating_sub(1) & 0xffff | if fua { CDW12_FUA } else { 0 },
            ..NvmeUringCmd::default()
        }
    }

    /// Read `nlb` (≥ 1, ≤ 65536) blocks at `slba` into `addr` (`len` bytes).
    pub fn read(nsid: u32, slba: u64, nlb: u32, addr: u64, len: u32) -> Self {
        Self::rw(opcode::READ, nsid, slba, nlb, addr, len, false)
    }

    /// Write `nlb` blocks at `slba` from `addr` (`len` bytes), optionally with FUA.
    pub fn write(nsid: u32, slba: u64, nlb: u32, addr: u64, len: u32, fua: bool) -> Self {
        Self::rw(opcode::WRITE, nsid, slba, nlb, addr, len, fua)
    }

    /// Flush the volatile write cache of namespace `nsid`.
    pub fn flush(nsid: u32) -> Self {
        NvmeUringCmd {
            opcode: opcode::FLUSH,
            nsid,
            ..NvmeUringCmd::default()
        }
    }

    /// Write zeroes to `nlb` blocks at `slba`.
    pub fn write_zeroes(nsid: u32, slba: u64, nlb: u32) -> Self {
        Self::rw(opcode::WRITE_ZEROES, nsid, slba, nlb, 0, 0, false)
    }

    /// Deallocate the ranges at `ranges` (`nr` [`DsmRange`]s, 1..=256).
    pub fn dsm_deallocate(nsid: u32, ranges: u64, nr: u32) -> Self {
        NvmeUringCmd {
            opcode: opcode::DSM,
            nsid,
            addr: ranges,
            data_len: nr * size_of::<DsmRange>() as u32,
            cdw10: nr.saturating_sub(1),
            cdw11: DSM_ATTR_DEALLOCATE,
            ..NvmeUringCmd::default()
        }
    }

    /// Identify (CNS 0: namespace) of `nsid` into `addr` (4096 bytes).
    pub fn identify_ns(nsid: u32, addr: u64) -> Self {
        NvmeUringCmd {
            opcode: opcode::ADMIN_IDENTIFY,
            nsid,
            addr,
            data_len: 4096,
            cdw10: 0,
            ..NvmeUringCmd::default()
        }
    }

    /// The command as the 80-byte command area of a 128-byte SQE (`sqe->cmd`), native byte
    /// order as the kernel reads it; the trailing 8 bytes are zero.
    pub fn to_sqe_cmd(&self) -> [u8; 80] {
        let mut b = [0u8; 80];
        let mut put = |off: usize, bytes: &[u8]| b[off..off + bytes.len()].copy_from_slice(bytes);
        put(offset_of!(Self, opcode), &[self.opcode]);
        put(offset_of!(Self, flags), &[self.flags]);
        put(offset_of!(Self, rsvd1), &self.rsvd1.to_ne_bytes());
        put(offset_of!(Self, nsid), &self.nsid.to_ne_bytes());
        put(offset_of!(Self, cdw2), &self.cdw2.to_ne_bytes());
        put(offset_of!(Self, cdw3), &self.cdw3.to_ne_bytes());
        put(offset_of!(Self, metadata), &self.metadata.to_ne_bytes());
        put(offset_of!(Self, addr), &self.addr.to_ne_bytes());
        put(
            offset_of!(Self, metadata_len),
            &self.metadata_len.to_ne_bytes(),
        );
        put(offset_of!(Self, data_len), &self.data_len.to_ne_bytes());
        put(offset_of!(Self, cdw10), &self.cdw10.to_ne_bytes());
        put(offset_of!(Self, cdw11), &self.cdw11.to_ne_bytes());
        put(offset_of!(Self, cdw12), &self.cdw12.to_ne_bytes());
        put(offset_of!(Self, cdw13), &self.cdw13.to_ne_bytes());
        put(offset_of!(Self, cdw14), &self.cdw14.to_ne_bytes());
        put(offset_of!(Self, cdw15), &self.cdw15.to_ne_bytes());
        put(offset_of!(Self, timeout_ms), &self.timeout_ms.to_ne_bytes());
        put(offset_of!(Self, rsvd2), &self.rsvd2.to_ne_bytes());
        b
    }
}

/// Decodes the `res` of a passthrough CQE: 0 success, negative an errno from the kernel (the
/// command never reached the device, or the transport failed), positive the NVMe status as
/// the kernel reports it (`le16 status >> 1`: SC bits 7:0, SCT 10:8, CRD 12:11, M 13, DNR 14).
pub fn decode_status(res: i32) -> IoStatus {
    match res {
        0 => IoStatus::Success,
        r if r < 0 => IoStatus::Errno(-r),
        r => IoStatus::Nvme(NvmeStatus {
            sc: (r & 0xff) as u8,
            sct: ((r >> 8) & 0x7) as u8,
            dnr: r & (1 << 14) != 0,
        }),
    }
}

/// Whether `path` names an NVMe generic character device (`/dev/ngXnY`).
pub fn is_generic_device_name(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let Some(rest) = name.strip_prefix("ng") else {
        return false;
    };
    let Some((ctrl, ns)) = rest.split_once('n') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    digits(ctrl) && digits(ns)
}

/// Size and format of a namespace, from Identify Namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NsGeometry {
    /// Namespace size in logical blocks (NSZE).
    pub nsze: u64,
    /// Logical block size in bytes of the formatted LBA format.
    pub lba_size: u32,
    /// Metadata bytes per block of that format.
    pub metadata_size: u16,
}

/// Parses the fields pmio needs from an Identify Namespace data structure (4096 bytes).
pub fn parse_identify_ns(id: &[u8]) -> Result<NsGeometry, String> {
    if id.len() < 4096 {
        return Err(format!("identify data is {} bytes, not 4096", id.len()));
    }
    let nsze = u64::from_le_bytes(id[0..8].try_into().expect("8 bytes"));
    let nlbaf = usize::from(id[25]) + 1;
    let flbas = id[26];
    let index = usize::from(flbas & 0xf) | (usize::from(flbas >> 5 & 0x3) << 4);
    if index >= nlbaf.min(64) {
        return Err(format!(
            "formatted LBA format {index} is beyond the {nlbaf} formats"
        ));
    }
    let off = 128 + 4 * index;
    let lbaf = u32::from_le_bytes(id[off..off + 4].try_into().expect("4 bytes"));
    let lbads = (lbaf >> 16) & 0xff;
    if !(9..=16).contains(&lbads) {
        return Err(format!("LBA data size 2^{lbads} is not supported"));
    }
    if nsze == 0 {
        return Err("namespace size is 0 blocks".to_string());
    }
    Ok(NsGeometry {
        nsze,
        lba_size: 1 << lbads,
        metadata_size: (lbaf & 0xffff) as u16,
    })
}

/// Namespace ID of an open namespace device (`NVME_IOCTL_ID`).
pub(crate) fn ns_id(f: &File) -> io::Result<u32> {
    // SAFETY: NVME_IOCTL_ID takes no argument and returns the nsid; the fd is open.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), NVME_IOCTL_ID as _) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as u32)
}

/// Identify Namespace through the admin passthrough ioctl.
pub(crate) fn identify_ns(f: &File, nsid: u32) -> io::Result<NsGeometry> {
    let mut page = crate::sys::AlignedBuf::new(4096);
    let mut cmd = NvmeUringCmd::identify_ns(nsid, page.as_mut_ptr() as u64);
    // SAFETY: the ioctl reads and writes one `struct nvme_passthru_cmd` (72 bytes, the layout
    // of `NvmeUringCmd`) at `cmd`, and the device writes 4096 bytes at `addr`, which points at
    // `page` (4096 bytes, alive until after the synchronous ioctl returns).
    let rc = unsafe {
        libc::ioctl(
            f.as_raw_fd(),
            NVME_IOCTL_ADMIN_CMD as _,
            &mut cmd as *mut NvmeUringCmd,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if rc > 0 {
        return Err(io::Error::other(format!(
            "identify namespace failed with NVMe status {rc:#x}"
        )));
    }
    // SAFETY: `page` is 4096 initialised (zeroed, then written by the device) bytes.
    let data = unsafe { std::slice::from_raw_parts(page.as_mut_ptr(), 4096) };
    parse_identify_ns(data).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_linux() {
        // Values from <linux/nvme_ioctl.h> on x86_64.
        assert_eq!(NVME_URING_CMD_IO, 0xC048_4E80);
        assert_eq!(NVME_IOCTL_ADMIN_CMD, 0xC048_4E41);
        assert_eq!(NVME_IOCTL_ID, 0x4E40);
    }

    #[test]
    fn read_command_encoding() {
        let c = NvmeUringCmd::read(1, 0x1_2345_6789, 8, 0xdead_b000, 4096);
        let b = c.to_sqe_cmd();
        assert_eq!(b[0], opcode::READ);
        assert_eq!(b[1], 0, "flags");
        assert_eq!(u32::from_ne_bytes(b[4..8].try_into().unwrap()), 1, "nsid");
        assert_eq!(
            u64::from_ne_bytes(b[24..32].try_into().unwrap()),
            0xdead_b000,
            "addr"
        );
        assert_eq!(
            u32::from_ne_bytes(b[36..40].try_into().unwrap()),
            4096,
            "data_len"
        );
        assert_eq!(
            u32::from_ne_bytes(b[40..44].try_into().unwrap()),
            0x2345_6789,
            "cdw10 = SLBA low"
        );
        assert_eq!(
            u32::from_ne_bytes(b[44..48].try_into().unwrap()),
            1,
            "cdw11 = SLBA high"
        );
        assert_eq!(
            u32::from_ne_bytes(b[48..52].try_into().unwrap()),
            7,
            "cdw12 = NLB, 0-based"
        );
        assert!(b[52..].iter().all(|&x| x == 0));
    }

    #[test]
    fn write_flush_zeroes_dsm_encoding() {
        let w = NvmeUringCmd::write(2, 10, 1, 0x1000, 512, true);
        assert_eq!(w.opcode, opcode::WRITE);
        assert_eq!(w.cdw12, CDW12_FUA, "1 block is NLB 0, plus FUA");
        let f = NvmeUringCmd::flush(3);
        assert_eq!((f.opcode, f.nsid, f.data_len), (opcode::FLUSH, 3, 0));
        let z = NvmeUringCmd::write_zeroes(1, 1 << 40, 65536);
        assert_eq!(
            (z.opcode, z.cdw10, z.cdw11, z.cdw12),
            (opcode::WRITE_ZEROES, 0, 1 << 8, 0xffff)
        );
        let d = NvmeUringCmd::dsm_deallocate(1, 0x2000, 1);
        assert_eq!(
            (d.opcode, d.cdw10, d.cdw11, d.data_len),
            (opcode::DSM, 0, 4, 16)
        );
    }

    #[test]
    fn status_decoding() {
        assert_eq!(decode_status(0), IoStatus::Success);
        assert_eq!(decode_status(-libc::EIO), IoStatus::Errno(libc::EIO));
        // LBA out of range: SCT 0, SC 0x80, DNR set.
        assert_eq!(
            decode_status(0x80 | 1 << 14),
            IoStatus::Nvme(NvmeStatus {
                sct: 0,
                sc: 0x80,
                dnr: true
            })
        );
        // Media error, unrecovered read: SCT 2, SC 0x81.
        assert_eq!(
            decode_status(0x281),
            IoStatus::Nvme(NvmeStatus {
                sct: 2,
                sc: 0x81,
                dnr: false
            })
        );
    }

    #[test]
    fn generic_device_names() {
        assert!(is_generic_device_name(Path::new("/dev/ng0n1")));
        assert!(is_generic_device_name(Path::new("/dev/ng12n3")));
        assert!(!is_generic_device_name(Path::new("/dev/nvme0n1")));
        assert!(!is_generic_device_name(Path::new("/dev/ng0")));
        assert!(!is_generic_device_name(Path::new("/dev/ngxn1")));
    }

    #[test]
    fn identify_parsing() {
        let mut id = vec![0u8; 4096];
        id[0..8].copy_from_slice(&1_000_000u64.to_le_bytes());
        id[25] = 1; // two formats
        id[26] = 1; // format 1 in use
        id[128..132].copy_from_slice(&(9u32 << 16).to_le_bytes());
        id[132..136].copy_from_slice(&(12u32 << 16 | 8).to_le_bytes());
        assert_eq!(
            parse_identify_ns(&id),
            Ok(NsGeometry {
                nsze: 1_000_000,
                lba_size: 4096,
                metadata_size: 8
            })
        );
        id[26] = 2;
        assert!(parse_identify_ns(&id).unwrap_err().contains("beyond"));
        assert!(parse_identify_ns(&id[..100]).is_err());
    }
}
