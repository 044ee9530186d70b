//! Authenticated NVMe/TCP between two pmio-tgt daemons, configured with pmio-rpc as with
//! rpc.py: keys from owner-only files (`keyring_file_add_key`), a subsystem host with
//! `--dhchap-key`/`--dhchap-ctrlr-key`, `bdev_nvme_attach_controller --dhchap-key` on the other
//! daemon and pmio-perf's `dhchap_key=`; a queue that did not authenticate takes no command (Authentication Required); a
//! wrong key is refused with AUTH_Failure1; no RPC answer and no saved configuration carries a
//! secret; both daemons restart from their save_config and authenticate again.

mod perf_util;
mod tgt_util;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;

use serde_json::json;
use tgt_util::{Daemon, free_port, nvme_tcp_admin_connect};

const NQN: &str = "nqn.2016-06.io.spdk:cnode-auth";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:3c0f6a52-8d1e-4f7a-b2c9-5e8d1a7f3b64";
/// nvme-cli's `gen-dhchap-key` shape: SHA-256-transformed 32-byte keys.
const HOST_KEY: &str = "DHHC-1:01:MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIenHzQ:";
const CTRLR_KEY: &str = "DHHC-1:00:YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXphYmNkZWasFayR:";
const WRONG_KEY: &str = "DHHC-1:01:MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDHX0whE:";

fn key_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, format!("{text}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p.display().to_string()
}

/// A Property Get (CAP) on a connected admin queue: its status field.
fn property_get_status(s: &mut std::net::TcpStream) -> u16 {
    let mut pdu = [0u8; 72];
    pdu[0] = 4;
    pdu[2] = 72;
    pdu[4..8].copy_from_slice(&72u32.to_le_bytes());
    let sqe = &mut pdu[8..];
    sqe[0] = 0x7f;
    sqe[2..4].copy_from_slice(&2u16.to_le_bytes());
    sqe[4] = 0x04; // Property Get
    sqe[40] = 1; // 8 bytes
    s.write_all(&pdu).unwrap();
    let mut resp = [0u8; 24];
    s.read_exact(&mut resp).unwrap();
    assert_eq!(resp[0], 5, "CapsuleResp");
    u16::from_le_bytes([resp[22], resp[23]]) >> 1
}

#[test]
fn tgt_dhchap_between_two_daemons_with_keyring_keys() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path();
    let (hk, ck, wk) = (
        key_file(keys, "host.key", HOST_KEY),
        key_file(keys, "ctrlr.key", CTRLR_KEY),
        key_file(keys, "wrong.key", WRONG_KEY),
    );
    let port = free_port();
    let p = port.to_string();
    let tsock = dir.path().join("t.sock");
    let t = Daemon::start(&tsock, &[]);
    t.rpc_ok(&["keyring_file_add_key", "key0", &hk]);
    t.rpc_ok(&["keyring_file_add_key", "ckey0", &ck]);
    t.rpc_ok(&["bdev_malloc_create", "-b", "Malloc0", "8", "512"]);
    t.rpc_ok(&["nvmf_create_transport", "-t", "TCP"]);
    t.rpc_ok(&["nvmf_create_subsystem", NQN]);
    t.rpc_ok(&["nvmf_subsystem_add_ns", NQN, "Malloc0"]);
    t.rpc_ok(&[
        "nvmf_subsystem_add_listener",
        NQN,
        "-t",
        "tcp",
        "-a",
        "127.0.0.1",
        "-s",
        &p,
    ]);
    // An unknown key name is SPDK's "Invalid parameters".
    let e = t.rpc(&[
        "nvmf_subsystem_add_host",
        NQN,
        HOST,
        "--dhchap-key",
        "nokey",
    ]);
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stdout).contains("Invalid parameters"));
    t.rpc_ok(&[
        "nvmf_subsystem_add_host",
        NQN,
        HOST,
        "--dhchap-key",
        "key0",
        "--dhchap-ctrlr-key",
        "ckey0",
    ]);
    let subs = t.rpc_json(&["nvmf_get_subsystems"]);
    assert_eq!(
        subs[1]["hosts"],
        json!([{"nqn": HOST, "dhchap_key": "key0", "dhchap_ctrlr_key": "ckey0"}])
    );
    // The host entry holds both keys.
    let ring = t.rpc_json(&["keyring_get_keys"]);
    assert_eq!(ring[0]["refcnt"], 2, "{ring}");

    // A queue that did not authenticate: Connect says so (AUTHREQ.ATR), and Property Get is
    // refused with Authentication Required (SCT 1, SC 0x91); the queue stays.
    let (mut raw, dw0, st) = nvme_tcp_admin_connect(port, NQN, HOST, [3; 16]);
    assert_eq!(st, 0);
    assert_ne!(dw0 & (1 << 17), 0, "AUTHREQ.ATR in {dw0:#x}");
    let st = property_get_status(&mut raw);
    assert_eq!((st >> 8 & 7, st & 0xff), (1, 0x91), "status {st:#x}");
    drop(raw);

    // The host daemon: the same keys by name in its own keyring.
    let hsock = dir.path().join("h.sock");
    let h = Daemon::start(&hsock, &[]);
    h.rpc_ok(&["keyring_file_add_key", "hkey", &hk]);
    h.rpc_ok(&["keyring_file_add_key", "hckey", &ck]);
    h.rpc_ok(&["keyring_file_add_key", "bad", &wk]);
    let attach = |name: &str, key: &str, ckey: Option<&str>| {
        let mut a = vec![
            "bdev_nvme_attach_controller",
            "-b",
            name,
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            &p,
            "-f",
            "ipv4",
            "-n",
            NQN,
            "-q",
            HOST,
            "--dhchap-key",
            key,
        ];
        if let Some(c) = ckey {
            a.extend(["--dhchap-ctrlr-key", c]);
        }
        h.rpc(&a)
    };
    let wrong = attach("Bad0", "bad", None);
    assert!(!wrong.status.success());
    let text = String::from_utf8_lossy(&wrong.stdout).to_string();
    assert!(text.contains("AUTH_Failure1"), "{text}");
    assert!(
        t.log().contains("in-band authentication of queue 0 failed"),
        "the target logs the failure"
    );
    let ok = attach("Nvme0", "hkey", Some("hckey"));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("Nvme0n1"));
    let b = h.rpc_json(&["bdev_get_bdevs", "-b", "Nvme0n1"]);
    assert_eq!(b[0]["num_blocks"], 8 * 2048);

    // pmio-perf authenticates with key files: what it writes reads back; a wrong key file is
    // refused before any I/O.
    let dev = format!(
        "nvmf:traddr=127.0.0.1,trsvcid={p},subnqn={NQN},hostnqn={HOST},dhchap_key={hk},\
         dhchap_ctrlr_key={ck}"
    );
    let out = perf_util::perf(&[
        "-m", "[0]", "--dev", &dev, "-b", "4096", "-w", "randrw", "-M", "50", "-d", "32", "-s",
        "8", "-c", "8", "-t", "1", "--verify", "--json",
    ]);
    perf_util::verify_clean(&out, "randrw over authenticated NVMe/TCP");
    let bad =
        format!("nvmf:traddr=127.0.0.1,trsvcid={p},subnqn={NQN},hostnqn={HOST},dhchap_key={wk}");
    let out = perf_util::perf(&["-m", "[0]", "--dev", &bad, "-t", "1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("AUTH_Failure1"));

    // Saved configurations name the keys, never their texts.
    let tsaved = t.rpc_ok(&["save_config"]);
    let hsaved = h.rpc_ok(&["save_config"]);
    for (saved, who) in [(&tsaved, "target"), (&hsaved, "host")] {
        for secret in [HOST_KEY, CTRLR_KEY, WRONG_KEY] {
            assert!(
                !saved.contains(&secret[10..30]),
                "{who}'s save_config has a secret"
            );
        }
    }
    assert!(
        tsaved.contains("\"dhchap_ctrlr_key\": \"ckey0\""),
        "{tsaved}"
    );
    assert!(hsaved.contains("\"dhchap_key\": \"hkey\""), "{hsaved}");
    for log in [t.log(), h.log()] {
        assert!(!log.contains(&HOST_KEY[10..30]), "a log has the secret");
    }

    // Both restart from their saved configurations: the host attaches (authenticates) again.
    assert_eq!(h.signal(libc::SIGTERM).code(), Some(0));
    assert_eq!(t.signal(libc::SIGTERM).code(), Some(0));
    let (tf, hf) = (dir.path().join("t.json"), dir.path().join("h.json"));
    std::fs::write(&tf, &tsaved).unwrap();
    std::fs::write(&hf, &hsaved).unwrap();
    let t2 = Daemon::start(&tsock, &["-c", tf.to_str().unwrap()]);
    assert_eq!(t2.rpc_json(&["nvmf_get_subsystems"]), subs);
    let h2 = Daemon::start(&hsock, &["-c", hf.to_str().unwrap()]);
    let b = h2.rpc_json(&["bdev_get_bdevs", "-b", "Nvme0n1"]);
    assert_eq!(b[0]["num_blocks"], 8 * 2048);
    assert_eq!(h2.signal(libc::SIGTERM).code(), Some(0));
    assert_eq!(t2.signal(libc::SIGTERM).code(), Some(0));
}
