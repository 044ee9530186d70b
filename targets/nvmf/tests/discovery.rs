//! The discovery subsystem: a host connects to the well-known NQN and reads the discovery
//! log page (what `nvme discover` does), which lists the subsystems it may connect to.

mod common;

use common::{HOSTNQN, Host, NQN, TestTarget};
use pmio_nvmf::pdu::Digests;
use pmio_nvmf::spec::{self, Sqe, disc};
use pmio_nvmf::{DISCOVERY_NQN, ListenAddr, SubsystemParams, TransportOpts};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_end_matches(['\0', ' '])
        .to_string()
}

#[test]
fn discovery_log_lists_the_subsystems_this_host_may_use() {
    let t = TestTarget::start(TransportOpts::default(), true);
    let port = t.addr.port().to_string();
    let la = ListenAddr::new("127.0.0.1", &port, None).unwrap();
    t.tgt.add_listener(DISCOVERY_NQN, la.clone()).unwrap();
    // A second subsystem that admits only another host: not listed for this one.
    let other = "nqn.2016-06.io.pmio:other";
    t.tgt
        .create_subsystem(&SubsystemParams {
            nqn: other.into(),
            ..SubsystemParams::default()
        })
        .unwrap();
    t.tgt.add_listener(other, la).unwrap();

    let mut h = Host::connect(t.addr, Digests::NONE);
    let r = h.fabrics_connect(0, 31, DISCOVERY_NQN, HOSTNQN, 0xFFFF, 0);
    assert!(r.status().is_success(), "{:?}", r.status());
    h.prop_set(0x14, 6 << 16 | 4 << 20 | 1);
    assert_eq!(h.prop_get(0x1c, false) & 1, 1, "CSTS.RDY");

    let id = Sqe {
        cdw10: spec::cns::CONTROLLER,
        ..Sqe::new(spec::admin_opc::IDENTIFY, 0)
    };
    let r = h.admin(id, 4096);
    assert!(r.status().is_success());
    assert_eq!(r.data[111], 2, "CNTRLTYPE: discovery controller");
    assert_eq!(text(&r.data[768..1024]), DISCOVERY_NQN);

    // The header first (as hosts do), then the whole log.
    let numd = |len: u32| (len / 4 - 1) & 0xffff;
    let glp = |len: u32| Sqe {
        cdw10: spec::lid::DISCOVERY | numd(len) << 16,
        ..Sqe::new(spec::admin_opc::GET_LOG_PAGE, 0)
    };
    let r = h.admin(glp(1024), 1024);
    assert!(r.status().is_success(), "{:?}", r.status());
    let numrec = u64::from_le_bytes(r.data[disc::NUMREC..disc::NUMREC + 8].try_into().unwrap());
    let len = (disc::HEADER_LEN + numrec as usize * disc::ENTRY_LEN) as u32;
    let r = h.admin(glp(len), len);
    assert!(r.status().is_success(), "{:?}", r.status());
    let entries: Vec<&[u8]> = r.data[disc::HEADER_LEN..].chunks(disc::ENTRY_LEN).collect();
    let nvm: Vec<&&[u8]> = entries.iter().filter(|e| e[disc::SUBTYPE] == 2).collect();
    assert_eq!(nvm.len(), 1, "only the subsystem this host may use");
    let e = nvm[0];
    assert_eq!(e[disc::TRTYPE], disc::TRTYPE_TCP);
    assert_eq!(e[disc::ADRFAM], disc::ADRFAM_IPV4);
    assert_eq!(text(&e[disc::SUBNQN..disc::SUBNQN + disc::SUBNQN_LEN]), NQN);
    assert_eq!(
        text(&e[disc::TRADDR..disc::TRADDR + disc::TRADDR_LEN]),
        "127.0.0.1"
    );
    assert_eq!(
        text(&e[disc::TRSVCID..disc::TRSVCID + disc::TRSVCID_LEN]),
        port
    );
    // The discovery controller has no I/O queues.
    let mut io = Host::connect(t.addr, Digests::NONE);
    let cntlid = 1;
    let r = io.fabrics_connect(1, 31, DISCOVERY_NQN, HOSTNQN, cntlid, 0);
    assert!(
        !r.status().is_success(),
        "an I/O queue on the discovery controller"
    );
}
