//! The target end to end over 127.0.0.1 against the test host (tests/common): connection set-up,
//! reads and writes in-capsule and through R2T, digests, and what the kernel's host never sends.

mod common;

use common::{Host, TestTarget, pattern};
use pmio_nvmf::TransportOpts;
use pmio_nvmf::pdu::Digests;
use pmio_nvmf::spec::{self, Sqe};

fn round_trip(digests: Digests) {
    let t = TestTarget::start(TransportOpts::default(), true);
    let (mut admin, cntlid) = Host::admin_queue(t.addr, digests, 0);
    let mut id = Sqe::default();
    id.opcode = spec::admin_opc::IDENTIFY;
    id.cdw10 = u32::from(spec::cns::CONTROLLER);
    let r = admin.admin(id, 4096);
    assert!(r.status().is_success());
    assert_eq!(r.data.len(), 4096);
    assert_eq!(u16::from_le_bytes([r.data[78], r.data[79]]), cntlid);
    let mut io = Host::io_queue(t.addr, digests, cntlid, 1);
    for (i, &len) in [512usize, 4096, 8192, 65536, 131072].iter().enumerate() {
        let lba = 1000 * i as u64;
        let data = pattern(len, i as u64 + 1);
        let w = io.write(lba, &data);
        assert!(w.status().is_success(), "write {len}: {:?}", w.status());
        let r = io.read(lba, (len / 512) as u32);
        assert!(r.status().is_success(), "read {len}: {:?}", r.status());
        assert!(r.data == data, "{len} bytes read back differ");
    }
}

#[test]
fn writes_and_reads_round_trip() {
    round_trip(Digests::NONE);
}

#[test]
fn writes_and_reads_round_trip_with_digests() {
    round_trip(Digests {
        header: true,
        data: true,
    });
}
