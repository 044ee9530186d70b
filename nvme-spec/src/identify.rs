//! Identify data: the Identify Controller and Identify Namespace structures (4096 bytes each)
//! and the namespace identification descriptor types.
//!
//! The `#[repr(C)]` structs are the one description of each layout: a PCIe driver reads them
//! straight from DMA memory, and [`id_ctrl`] and [`id_ns`] name the byte offsets of their
//! fields (taken from the structs) for whoever writes the data into a byte buffer, as a
//! fabrics controller does. Checked against Linux's `struct nvme_id_ctrl` / `nvme_id_ns` and
//! SPDK's `spdk_nvme_ctrlr_data` / `spdk_nvme_ns_data`.

use std::mem::{offset_of, size_of};

/// Length of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;

/// Identify Controller data (CNS 01h); the fields pmio reads or fills, the rest reserved.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IdentifyController {
    pub vid: u16,
    pub ssvid: u16,
    /// Serial number (ASCII, space padded).
    pub sn: [u8; id_ctrl::SN_LEN],
    /// Model number (ASCII, space padded).
    pub mn: [u8; id_ctrl::MN_LEN],
    /// Firmware revision (ASCII, space padded).
    pub fr: [u8; id_ctrl::FR_LEN],
    /// Recommended arbitration burst.
    pub rab: u8,
    pub ieee: [u8; 3],
    /// Multi-path I/O and namespace sharing capabilities.
    pub cmic: u8,
    /// Maximum data transfer size: 2^MDTS units of CAP.MPSMIN; 0 = no limit.
    pub mdts: u8,
    pub cntlid: u16,
    pub ver: u32,
    pub rtd3r: u32,
    /// RTD3 entry latency (µs): bounds the shutdown wait.
    pub rtd3e: u32,
    /// Optional asynchronous events supported.
    pub oaes: u32,
    pub ctratt: u32,
    _rsvd100: [u8; 11],
    /// Controller type: I/O or discovery.
    pub cntrltype: u8,
    _rsvd112: [u8; 144],
    /// Optional admin command support.
    pub oacs: u16,
    /// Abort command limit, 0-based.
    pub acl: u8,
    /// Asynchronous event request limit, 0-based.
    pub aerl: u8,
    /// Firmware updates.
    pub frmw: u8,
    /// Log page attributes.
    pub lpa: u8,
    /// Error log page entries, 0-based.
    pub elpe: u8,
    /// Number of power states support, 0-based.
    pub npss: u8,
    pub avscc: u8,
    pub apsta: u8,
    /// Warning composite temperature threshold (kelvin).
    pub wctemp: u16,
    /// Critical composite temperature threshold (kelvin).
    pub cctemp: u16,
    _rsvd270: [u8; 50],
    /// Keep Alive granularity, 100 ms units.
    pub kas: u16,
    _rsvd322: [u8; 21],
    /// ANA transition time, seconds.
    pub anatt: u8,
    /// ANA capabilities ([`IdentifyController::ANACAP_OPTIMIZED`], …).
    pub anacap: u8,
    _rsvd345: [u8; 3],
    /// Highest ANA group ID.
    pub anagrpmax: u32,
    /// Number of ANA group IDs.
    pub nanagrpid: u32,
    _rsvd356: [u8; 156],
    pub sqes: u8,
    pub cqes: u8,
    pub maxcmd: u16,
    /// Number of namespaces (highest NSID).
    pub nn: u32,
    /// Optional NVM command support ([`IdentifyController::ONCS_DSM`], …).
    pub oncs: u16,
    pub fuses: u16,
    pub fna: u8,
    /// Volatile write cache ([`IdentifyController::VWC_PRESENT`]).
    pub vwc: u8,
    pub awun: u16,
    pub awupf: u16,
    pub nvscc: u8,
    pub nwpc: u8,
    pub acwu: u16,
    _rsvd534: u16,
    /// SGL support.
    pub sgls: u32,
    pub mnan: u32,
    _rsvd544: [u8; 224],
    /// NVM subsystem NQN (NUL terminated).
    pub subnqn: [u8; id_ctrl::SUBNQN_LEN],
    _rsvd1024: [u8; 768],
    /// Fabrics: I/O queue command capsule size, 16-byte units (SQE and in-capsule data).
    pub ioccsz: u32,
    /// Fabrics: I/O queue response capsule size, 16-byte units.
    pub iorcsz: u32,
    /// Fabrics: in-capsule data offset, 16-byte units.
    pub icdoff: u16,
    /// Fabrics: controller attributes (bit 0: static controller model).
    pub fcatt: u8,
    /// Fabrics: maximum SGL data block descriptors per command.
    pub msdbd: u8,
    /// Fabrics: optional fabric commands support.
    pub ofcs: u16,
    _rsvd1806: [u8; 2290],
}

const _: () = assert!(size_of::<IdentifyController>() == IDENTIFY_LEN);
const _: () = assert!(id_ctrl::MDTS == 77);
const _: () = assert!(id_ctrl::RTD3E == 88);
const _: () = assert!(id_ctrl::CNTRLTYPE == 111);
const _: () = assert!(id_ctrl::OACS == 256);
const _: () = assert!(id_ctrl::WCTEMP == 266);
const _: () = assert!(id_ctrl::KAS == 320);
const _: () = assert!(id_ctrl::SQES == 512);
const _: () = assert!(id_ctrl::NN == 516);
const _: () = assert!(id_ctrl::ONCS == 520);
const _: () = assert!(id_ctrl::VWC == 525);
const _: () = assert!(id_ctrl::SGLS == 536);
const _: () = assert!(id_ctrl::SUBNQN == 768);
const _: () = assert!(id_ctrl::IOCCSZ == 1792);
const _: () = assert!(id_ctrl::OFCS == 1804);

impl IdentifyController {
    /// CMIC bit 0: the NVM subsystem may have more than one port.
    pub const CMIC_MULTI_PORT: u8 = 1 << 0;
    /// CMIC bit 1: the NVM subsystem may have more than one controller.
    pub const CMIC_MULTI_CTRLR: u8 = 1 << 1;
    /// CMIC bit 3: Asymmetric Namespace Access Reporting.
    pub const CMIC_ANA: u8 = 1 << 3;
    /// OAES bit 11: Asymmetric Namespace Access Change Notices.
    pub const OAES_ANA_CHANGE: u32 = 1 << 11;
    /// ANACAP bit 0: the ANA Optimized state is reported.
    pub const ANACAP_OPTIMIZED: u8 = 1 << 0;
    /// ANACAP bit 1: the ANA Non-Optimized state is reported.
    pub const ANACAP_NON_OPTIMIZED: u8 = 1 << 1;
    /// ANACAP bit 2: the ANA Inaccessible state is reported.
    pub const ANACAP_INACCESSIBLE: u8 = 1 << 2;
    /// ANACAP bit 6: a namespace's ANAGRPID does not change while it is attached.
    pub const ANACAP_GRPID_STATIC: u8 = 1 << 6;
    /// OAES bit 8: Namespace Attribute Notices.
    pub const OAES_NS_ATTR: u32 = 1 << 8;
    /// CTRATT bit 0: 128-bit host identifier.
    pub const CTRATT_HOST_ID_128: u32 = 1 << 0;
    /// CNTRLTYPE: I/O controller.
    pub const CNTRLTYPE_IO: u8 = 1;
    /// CNTRLTYPE: discovery controller.
    pub const CNTRLTYPE_DISCOVERY: u8 = 2;
    /// LPA bit 1: Commands Supported and Effects log page.
    pub const LPA_EFFECTS: u8 = 1 << 1;
    /// LPA bit 2: extended data for Get Log Page (NUMDU, LPOL/LPOU).
    pub const LPA_EXTENDED: u8 = 1 << 2;
    /// ONCS bit 2: Dataset Management supported.
    pub const ONCS_DSM: u16 = 1 << 2;
    /// ONCS bit 3: Write Zeroes supported.
    pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;
    /// VWC bit 0: a volatile write cache is present (the host then sends Flush).
    pub const VWC_PRESENT: u8 = 1 << 0;
    /// SGLS bits 1:0 = 01b: SGLs supported, no alignment requirement.
    pub const SGLS_SUPPORTED: u32 = 1 << 0;
    /// SGLS bit 20: the Offset subtype of the SGL Data Block descriptor (in-capsule data).
    pub const SGLS_OFFSET: u32 = 1 << 20;

    /// An all-zero structure (what a buffer holds before Identify fills it).
    pub const fn zeroed() -> IdentifyController {
        IdentifyController {
            vid: 0,
            ssvid: 0,
            sn: [0; id_ctrl::SN_LEN],
            mn: [0; id_ctrl::MN_LEN],
            fr: [0; id_ctrl::FR_LEN],
            rab: 0,
            ieee: [0; 3],
            cmic: 0,
            mdts: 0,
            cntlid: 0,
            ver: 0,
            rtd3r: 0,
            rtd3e: 0,
            oaes: 0,
            ctratt: 0,
            _rsvd100: [0; 11],
            cntrltype: 0,
            _rsvd112: [0; 144],
            oacs: 0,
            acl: 0,
            aerl: 0,
            frmw: 0,
            lpa: 0,
            elpe: 0,
            npss: 0,
            avscc: 0,
            apsta: 0,
            wctemp: 0,
            cctemp: 0,
            _rsvd270: [0; 50],
            kas: 0,
            _rsvd322: [0; 21],
            anatt: 0,
            anacap: 0,
            _rsvd345: [0; 3],
            anagrpmax: 0,
            nanagrpid: 0,
            _rsvd356: [0; 156],
            sqes: 0,
            cqes: 0,
            maxcmd: 0,
            nn: 0,
            oncs: 0,
            fuses: 0,
            fna: 0,
            vwc: 0,
            awun: 0,
            awupf: 0,
            nvscc: 0,
            nwpc: 0,
            acwu: 0,
            _rsvd534: 0,
            sgls: 0,
            mnan: 0,
            _rsvd544: [0; 224],
            subnqn: [0; id_ctrl::SUBNQN_LEN],
            _rsvd1024: [0; 768],
            ioccsz: 0,
            iorcsz: 0,
            icdoff: 0,
            fcatt: 0,
            msdbd: 0,
            ofcs: 0,
            _rsvd1806: [0; 2290],
        }
    }

    /// Serial number, trimmed.
    pub fn serial(&self) -> String {
        ascii_field(&self.sn)
    }

    /// Model number, trimmed.
    pub fn model(&self) -> String {
        ascii_field(&self.mn)
    }

    /// Firmware revision, trimmed.
    pub fn firmware(&self) -> String {
        ascii_field(&self.fr)
    }
}

/// Byte offsets of [`IdentifyController`]'s fields, and the lengths of its strings.
pub mod id_ctrl {
    use super::*;

    pub const SN_LEN: usize = 20;
    pub const MN_LEN: usize = 40;
    pub const FR_LEN: usize = 8;
    pub const SUBNQN_LEN: usize = 256;

    pub const VID: usize = offset_of!(IdentifyController, vid);
    pub const SSVID: usize = offset_of!(IdentifyController, ssvid);
    pub const SN: usize = offset_of!(IdentifyController, sn);
    pub const MN: usize = offset_of!(IdentifyController, mn);
    pub const FR: usize = offset_of!(IdentifyController, fr);
    pub const RAB: usize = offset_of!(IdentifyController, rab);
    pub const IEEE: usize = offset_of!(IdentifyController, ieee);
    pub const CMIC: usize = offset_of!(IdentifyController, cmic);
    pub const MDTS: usize = offset_of!(IdentifyController, mdts);
    pub const CNTLID: usize = offset_of!(IdentifyController, cntlid);
    pub const VER: usize = offset_of!(IdentifyController, ver);
    pub const RTD3E: usize = offset_of!(IdentifyController, rtd3e);
    pub const OAES: usize = offset_of!(IdentifyController, oaes);
    pub const CTRATT: usize = offset_of!(IdentifyController, ctratt);
    pub const CNTRLTYPE: usize = offset_of!(IdentifyController, cntrltype);
    pub const OACS: usize = offset_of!(IdentifyController, oacs);
    pub const ACL: usize = offset_of!(IdentifyController, acl);
    pub const AERL: usize = offset_of!(IdentifyController, aerl);
    pub const FRMW: usize = offset_of!(IdentifyController, frmw);
    pub const LPA: usize = offset_of!(IdentifyController, lpa);
    pub const ELPE: usize = offset_of!(IdentifyController, elpe);
    pub const NPSS: usize = offset_of!(IdentifyController, npss);
    pub const WCTEMP: usize = offset_of!(IdentifyController, wctemp);
    pub const CCTEMP: usize = offset_of!(IdentifyController, cctemp);
    pub const KAS: usize = offset_of!(IdentifyController, kas);
    pub const ANATT: usize = offset_of!(IdentifyController, anatt);
    pub const ANACAP: usize = offset_of!(IdentifyController, anacap);
    pub const ANAGRPMAX: usize = offset_of!(IdentifyController, anagrpmax);
    pub const NANAGRPID: usize = offset_of!(IdentifyController, nanagrpid);
    pub const SQES: usize = offset_of!(IdentifyController, sqes);
    pub const CQES: usize = offset_of!(IdentifyController, cqes);
    pub const MAXCMD: usize = offset_of!(IdentifyController, maxcmd);
    pub const NN: usize = offset_of!(IdentifyController, nn);
    pub const ONCS: usize = offset_of!(IdentifyController, oncs);
    pub const FUSES: usize = offset_of!(IdentifyController, fuses);
    pub const FNA: usize = offset_of!(IdentifyController, fna);
    pub const VWC: usize = offset_of!(IdentifyController, vwc);
    pub const AWUN: usize = offset_of!(IdentifyController, awun);
    pub const AWUPF: usize = offset_of!(IdentifyController, awupf);
    pub const SGLS: usize = offset_of!(IdentifyController, sgls);
    pub const MNAN: usize = offset_of!(IdentifyController, mnan);
    pub const SUBNQN: usize = offset_of!(IdentifyController, subnqn);
    pub const IOCCSZ: usize = offset_of!(IdentifyController, ioccsz);
    pub const IORCSZ: usize = offset_of!(IdentifyController, iorcsz);
    pub const ICDOFF: usize = offset_of!(IdentifyController, icdoff);
    pub const FCATT: usize = offset_of!(IdentifyController, fcatt);
    pub const MSDBD: usize = offset_of!(IdentifyController, msdbd);
    pub const OFCS: usize = offset_of!(IdentifyController, ofcs);
}

/// An LBA format descriptor of Identify Namespace: MS \[15:0\], LBADS \[23:16\], RP \[25:24\].
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbaFormat(pub u32);

impl LbaFormat {
    /// Metadata bytes per block.
    pub const fn ms(self) -> u16 {
        self.0 as u16
    }

    /// log2 of the data block size (0 = format not available).
    pub const fn lbads(self) -> u8 {
        (self.0 >> 16) as u8
    }
}

/// Identify Namespace data (CNS 00h); the fields pmio reads or fills, the rest reserved.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IdentifyNamespace {
    /// Namespace size in logical blocks.
    pub nsze: u64,
    pub ncap: u64,
    pub nuse: u64,
    /// Namespace features ([`IdentifyNamespace::NSFEAT_OPTPERF`]).
    pub nsfeat: u8,
    /// Number of LBA formats, 0-based.
    pub nlbaf: u8,
    /// Formatted LBA size: index bits \[3:0\] and (NVMe 2.0, more than 16 formats) \[6:5\].
    pub flbas: u8,
    pub mc: u8,
    pub dpc: u8,
    pub dps: u8,
    /// Namespace multi-path I/O and sharing ([`IdentifyNamespace::NMIC_SHARED`]).
    pub nmic: u8,
    pub rescap: u8,
    pub fpi: u8,
    pub dlfeat: u8,
    pub nawun: u16,
    pub nawupf: u16,
    pub nacwu: u16,
    pub nabsn: u16,
    pub nabo: u16,
    pub nabspf: u16,
    /// Namespace optimal I/O boundary, blocks (0: none): reads and writes that do not cross
    /// a multiple of it perform best (an Intel stripe, a flash die).
    pub noiob: u16,
    pub nvmcap: [u8; 16],
    /// Preferred write granularity, 0-based blocks (valid with NSFEAT_OPTPERF).
    pub npwg: u16,
    /// Preferred write alignment, 0-based blocks.
    pub npwa: u16,
    /// Preferred deallocate granularity, 0-based blocks.
    pub npdg: u16,
    /// Preferred deallocate alignment, 0-based blocks.
    pub npda: u16,
    /// Optimal write size, 0-based blocks.
    pub nows: u16,
    _rsvd74: [u8; 18],
    /// ANA group of the namespace (0: none reported).
    pub anagrpid: u32,
    _rsvd96: [u8; 8],
    /// Namespace globally unique identifier (0 when not reported).
    pub nguid: [u8; 16],
    /// IEEE extended unique identifier (0 when not reported).
    pub eui64: [u8; 8],
    /// LBA formats.
    pub lbaf: [LbaFormat; 64],
    _rsvd384: [u8; 3712],
}

const _: () = assert!(size_of::<IdentifyNamespace>() == IDENTIFY_LEN);
const _: () = assert!(id_ns::FLBAS == 26);
const _: () = assert!(id_ns::NMIC == 30);
const _: () = assert!(id_ns::NAWUPF == 36);
const _: () = assert!(id_ns::NOIOB == 46);
const _: () = assert!(offset_of!(IdentifyNamespace, nvmcap) == 48);
const _: () = assert!(id_ns::NPWG == 64);
const _: () = assert!(id_ns::NOWS == 72);
const _: () = assert!(id_ns::NGUID == 104);
const _: () = assert!(id_ns::EUI64 == 120);
const _: () = assert!(id_ns::LBAF0 == 128);

impl IdentifyNamespace {
    /// NSFEAT bit 4: NPWG, NPWA, NPDG, NPDA and NOWS are valid.
    pub const NSFEAT_OPTPERF: u8 = 1 << 4;
    /// NMIC bit 0: the namespace may be reached through more than one controller.
    pub const NMIC_SHARED: u8 = 1 << 0;

    /// An all-zero structure.
    pub const fn zeroed() -> IdentifyNamespace {
        IdentifyNamespace {
            nsze: 0,
            ncap: 0,
            nuse: 0,
            nsfeat: 0,
            nlbaf: 0,
            flbas: 0,
            mc: 0,
            dpc: 0,
            dps: 0,
            nmic: 0,
            rescap: 0,
            fpi: 0,
            dlfeat: 0,
            nawun: 0,
            nawupf: 0,
            nacwu: 0,
            nabsn: 0,
            nabo: 0,
            nabspf: 0,
            noiob: 0,
            nvmcap: [0; 16],
            npwg: 0,
            npwa: 0,
            npdg: 0,
            npda: 0,
            nows: 0,
            _rsvd74: [0; 18],
            anagrpid: 0,
            _rsvd96: [0; 8],
            nguid: [0; 16],
            eui64: [0; 8],
            lbaf: [LbaFormat(0); 64],
            _rsvd384: [0; 3712],
        }
    }

    /// Index of the format in use.
    pub fn format_index(&self) -> usize {
        let low = self.flbas & 0xf;
        let high = if self.nlbaf >= 16 {
            (self.flbas >> 5) & 3
        } else {
            0
        };
        usize::from(high << 4 | low)
    }

    /// The LBA format in use.
    pub fn format(&self) -> LbaFormat {
        self.lbaf[self.format_index() & 63]
    }
}

/// Byte offsets of [`IdentifyNamespace`]'s fields.
pub mod id_ns {
    use super::*;

    pub const NSZE: usize = offset_of!(IdentifyNamespace, nsze);
    pub const NCAP: usize = offset_of!(IdentifyNamespace, ncap);
    pub const NUSE: usize = offset_of!(IdentifyNamespace, nuse);
    pub const NSFEAT: usize = offset_of!(IdentifyNamespace, nsfeat);
    pub const NLBAF: usize = offset_of!(IdentifyNamespace, nlbaf);
    pub const FLBAS: usize = offset_of!(IdentifyNamespace, flbas);
    pub const NMIC: usize = offset_of!(IdentifyNamespace, nmic);
    pub const DLFEAT: usize = offset_of!(IdentifyNamespace, dlfeat);
    pub const NAWUPF: usize = offset_of!(IdentifyNamespace, nawupf);
    pub const NOIOB: usize = offset_of!(IdentifyNamespace, noiob);
    pub const NPWG: usize = offset_of!(IdentifyNamespace, npwg);
    pub const NPWA: usize = offset_of!(IdentifyNamespace, npwa);
    pub const NPDG: usize = offset_of!(IdentifyNamespace, npdg);
    pub const NPDA: usize = offset_of!(IdentifyNamespace, npda);
    pub const NOWS: usize = offset_of!(IdentifyNamespace, nows);
    pub const ANAGRPID: usize = offset_of!(IdentifyNamespace, anagrpid);
    pub const NGUID: usize = offset_of!(IdentifyNamespace, nguid);
    pub const EUI64: usize = offset_of!(IdentifyNamespace, eui64);
    /// LBA Format 0 ([`LbaFormat`]).
    pub const LBAF0: usize = offset_of!(IdentifyNamespace, lbaf);
    /// LBADS within LBA Format 0 (byte 2 of the format).
    pub const LBAF0_LBADS: usize = LBAF0 + 2;
}

/// Namespace Identification Descriptor types (Identify CNS 03h).
pub mod nidt {
    pub const EUI64: u8 = 1;
    pub const NGUID: u8 = 2;
    pub const UUID: u8 = 3;
    pub const CSI: u8 = 4;
}

/// An ASCII field of Identify data as a string: non-printable bytes as spaces, trimmed.
fn ascii_field(b: &[u8]) -> String {
    let s: String = b
        .iter()
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                ' '
            }
        })
        .collect();
    s.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_format_index() {
        let mut ns = IdentifyNamespace::zeroed();
        ns.nlbaf = 1;
        ns.flbas = 1;
        ns.lbaf[1] = LbaFormat(12 << 16);
        assert_eq!(ns.format().lbads(), 12);
        ns.nlbaf = 20;
        ns.flbas = 0x21; // index 0x11
        ns.lbaf[17] = LbaFormat(9 << 16 | 8);
        assert_eq!(ns.format_index(), 17);
        assert_eq!(ns.format().lbads(), 9);
        assert_eq!(ns.format().ms(), 8);
    }

    #[test]
    fn controller_strings_trim() {
        let mut id = IdentifyController::zeroed();
        id.sn[..8].copy_from_slice(b"deadbeef");
        id.sn[8..].fill(b' ');
        id.mn[..4].copy_from_slice(b"QEMU");
        id.fr[0] = 0x07;
        assert_eq!(id.serial(), "deadbeef");
        assert_eq!(id.model(), "QEMU");
        assert_eq!(id.firmware(), "");
    }

    /// Offsets taken from the structs, checked against the spec's figures (the asserts above
    /// cover the rest): a field added out of place moves every offset after it.
    #[test]
    fn offsets_are_the_specs() {
        let ctrl = [
            (id_ctrl::SN, 4),
            (id_ctrl::MN, 24),
            (id_ctrl::FR, 64),
            (id_ctrl::CMIC, 76),
            (id_ctrl::CNTLID, 78),
            (id_ctrl::OAES, 92),
            (id_ctrl::ELPE, 262),
            (id_ctrl::CCTEMP, 268),
            (id_ctrl::MAXCMD, 514),
            (id_ctrl::AWUPF, 528),
            (id_ctrl::ICDOFF, 1800),
            (id_ctrl::MSDBD, 1803),
            (id_ctrl::ANATT, 343),
            (id_ctrl::ANACAP, 344),
            (id_ctrl::ANAGRPMAX, 348),
            (id_ctrl::NANAGRPID, 352),
            (id_ctrl::MNAN, 540),
        ];
        for (got, want) in ctrl {
            assert_eq!(got, want);
        }
        let ns = [
            (id_ns::NCAP, 8),
            (id_ns::NSFEAT, 24),
            (id_ns::DLFEAT, 33),
            (id_ns::NPDA, 70),
            (id_ns::LBAF0_LBADS, 130),
            (id_ns::ANAGRPID, 92),
        ];
        for (got, want) in ns {
            assert_eq!(got, want);
        }
    }
}
