//! The `nvmf_*` subcommands' requests, byte for byte as rpc.py's.

use clap::Parser;
use serde_json::{Value, json};

use super::NvmfCommand;

/// pmio-rpc's command line, with only this module's nvmf subcommands.
#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    method: NvmfCommand,
}

fn req(argv: &[&str]) -> (&'static str, Option<Value>) {
    let mut full = vec!["pmio-rpc"];
    full.extend_from_slice(argv);
    let a = Args::try_parse_from(full).unwrap();
    let r = a.method.request();
    (r.method, r.params)
}

/// The request's params exactly as rpc.py serialises them (key order included).
fn params(argv: &[&str]) -> String {
    serde_json::to_string(&req(argv).1.unwrap()).unwrap()
}

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";

/// The requests reference/nvmf.md records from SPDK v25.09's rpc.py, byte for byte.
#[test]
fn requests_match_rpc_py() {
    assert_eq!(
        params(&["nvmf_create_transport", "-t", "TCP"]),
        r#"{"trtype":"TCP","c2h_success":true,"no_srq":false,"zcopy":false,"dif_insert_or_strip":false,"no_wr_batching":false,"disable_mappable_bar0":false,"disable_adaptive_irq":false,"disable_shadow_doorbells":false,"disable_command_passthru":false}"#
    );
    assert_eq!(
        params(&[
            "nvmf_create_subsystem",
            NQN,
            "-s",
            "SPDK00000000000001",
            "-a",
            "-m",
            "10"
        ]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","serial_number":"SPDK00000000000001","allow_any_host":true,"max_namespaces":10,"ana_reporting":false,"passthrough":false,"enable_nssr":false}"#
    );
    assert_eq!(
        params(&["nvmf_subsystem_add_ns", NQN, "Malloc0"]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","namespace":{"bdev_name":"Malloc0","no_auto_visible":false,"hide_metadata":false}}"#
    );
    assert_eq!(
        params(&[
            "nvmf_subsystem_add_listener",
            NQN,
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            "4420"
        ]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","secure_channel":false,"listen_address":{"trtype":"tcp","traddr":"127.0.0.1","trsvcid":"4420"}}"#
    );
    assert_eq!(
        params(&[
            "nvmf_subsystem_add_listener",
            "discovery",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            "4420"
        ]),
        r#"{"nqn":"nqn.2014-08.org.nvmexpress.discovery","secure_channel":false,"listen_address":{"trtype":"tcp","traddr":"127.0.0.1","trsvcid":"4420"}}"#
    );
    assert_eq!(
        params(&["nvmf_subsystem_remove_ns", NQN, "1"]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","nsid":1}"#
    );
    assert_eq!(
        params(&["nvmf_delete_subsystem", NQN]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1"}"#
    );
    assert_eq!(
        params(&[
            "nvmf_subsystem_add_host",
            NQN,
            "nqn.2014-08.org.nvmexpress:uuid:1234"
        ]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","host":"nqn.2014-08.org.nvmexpress:uuid:1234"}"#
    );
    assert_eq!(
        params(&["nvmf_subsystem_allow_any_host", NQN, "-d"]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","allow_any_host":false}"#
    );
}

#[test]
fn options_and_queries() {
    assert_eq!(
        req(&[
            "nvmf_create_transport",
            "-t",
            "tcp",
            "-u",
            "8192",
            "-q",
            "64",
            "-c",
            "0",
            "-i",
            "65536",
            "-o",
            "-x",
            "2"
        ])
        .1
        .unwrap(),
        json!({"trtype": "tcp", "max_queue_depth": 64, "in_capsule_data_size": 0,
            "max_io_size": 65536, "io_unit_size": 8192, "c2h_success": false, "no_srq": false,
            "zcopy": false, "dif_insert_or_strip": false, "abort_timeout_sec": 2,
            "no_wr_batching": false, "disable_mappable_bar0": false,
            "disable_adaptive_irq": false, "disable_shadow_doorbells": false,
            "disable_command_passthru": false})
    );
    assert_eq!(
        params(&[
            "nvmf_subsystem_add_ns",
            NQN,
            "Malloc0",
            "-n",
            "3",
            "-g",
            "FE828EED8EF34FCF80C28367DAA65457",
            "-e",
            "0123456789ABCDEF",
            "-u",
            "fe828eed-8ef3-4fcf-80c2-8367daa65457"
        ]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","namespace":{"bdev_name":"Malloc0","nsid":3,"nguid":"FE828EED8EF34FCF80C28367DAA65457","eui64":"0123456789ABCDEF","uuid":"fe828eed-8ef3-4fcf-80c2-8367daa65457","no_auto_visible":false,"hide_metadata":false}}"#
    );
    assert_eq!(
        params(&[
            "nvmf_subsystem_remove_listener",
            NQN,
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            "4420",
            "-f",
            "ipv4"
        ]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","listen_address":{"trtype":"tcp","traddr":"127.0.0.1","adrfam":"ipv4","trsvcid":"4420"}}"#
    );
    assert_eq!(
        params(&[
            "nvmf_create_subsystem",
            NQN,
            "-d",
            "pmio",
            "-i",
            "5",
            "-I",
            "9"
        ]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","model_number":"pmio","allow_any_host":false,"ana_reporting":false,"min_cntlid":5,"max_cntlid":9,"passthrough":false,"enable_nssr":false}"#
    );
    assert_eq!(
        req(&["nvmf_subsystem_allow_any_host", NQN, "-e"])
            .1
            .unwrap(),
        json!({"nqn": NQN, "allow_any_host": true})
    );
    assert_eq!(
        req(&["nvmf_subsystem_remove_host", NQN, "nqn.h:1"])
            .1
            .unwrap(),
        json!({"nqn": NQN, "host": "nqn.h:1"})
    );
    for m in [
        "nvmf_subsystem_get_controllers",
        "nvmf_subsystem_get_qpairs",
        "nvmf_subsystem_get_listeners",
    ] {
        assert_eq!(req(&[m, NQN]), (m, Some(json!({"nqn": NQN}))));
    }
    assert_eq!(req(&["nvmf_get_subsystems"]), ("nvmf_get_subsystems", None));
    assert_eq!(
        req(&["nvmf_get_subsystems", NQN]).1,
        Some(json!({"nqn": NQN}))
    );
    assert_eq!(req(&["nvmf_get_transports"]), ("nvmf_get_transports", None));
    assert_eq!(
        req(&["nvmf_get_transports", "--trtype", "TCP"]).1,
        Some(json!({"trtype": "TCP"}))
    );
    assert_eq!(req(&["nvmf_get_stats"]), ("nvmf_get_stats", None));
    // rpc.py's required arguments.
    for bad in [
        &["nvmf_create_transport"][..],
        &["nvmf_subsystem_add_listener", NQN, "-t", "tcp"],
        &["nvmf_subsystem_add_ns", NQN],
        &["nvmf_subsystem_remove_ns", NQN, "x"],
    ] {
        let mut full = vec!["pmio-rpc"];
        full.extend_from_slice(bad);
        assert!(Args::try_parse_from(full).is_err(), "{bad:?}");
    }
}

/// The ANA requests as rpc.py builds them: `-r`, `--anagrpid`, and the listener's state with
/// the address grouped last.
#[test]
fn ana_requests_match_rpc_py() {
    assert_eq!(
        params(&[
            "nvmf_create_subsystem",
            NQN,
            "-a",
            "-r",
            "--min-cntlid",
            "101",
            "--max-cntlid",
            "200"
        ]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","allow_any_host":true,"ana_reporting":true,"min_cntlid":101,"max_cntlid":200,"passthrough":false,"enable_nssr":false}"#
    );
    assert_eq!(
        params(&["nvmf_subsystem_add_ns", NQN, "Malloc0", "-a", "1"]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","namespace":{"bdev_name":"Malloc0","anagrpid":1,"no_auto_visible":false,"hide_metadata":false}}"#
    );
    assert_eq!(
        req(&[
            "nvmf_subsystem_listener_set_ana_state",
            NQN,
            "-n",
            "non_optimized",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            "4421",
            "-g",
            "1"
        ]),
        (
            "nvmf_subsystem_listener_set_ana_state",
            Some(
                json!({"nqn": NQN, "ana_state": "non_optimized", "anagrpid": 1,
                "listen_address": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "4421"}})
            )
        )
    );
    assert_eq!(
        params(&[
            "nvmf_subsystem_listener_set_ana_state",
            NQN,
            "-n",
            "optimized",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            "4421"
        ]),
        r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","ana_state":"optimized","listen_address":{"trtype":"tcp","traddr":"127.0.0.1","trsvcid":"4421"}}"#
    );
}
