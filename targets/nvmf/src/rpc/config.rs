//! The "nvmf" section of `save_config`, written with the methods' own declarations so that
//! replaying it is calling them.

use pmio_runtime::rpc::params::call;
use serde_json::{Value, json};

use super::context::NvmfRpc;
use super::host::AddHost;
use super::json::transport_json;
use super::listener::{AddListener, ListenAddress, SetAnaState};
use super::ns::{AddNs, NsParams};
use super::subsystem::CreateSubsystem;
use crate::subsystem::{ListenAddr, SubType, Subsystem};

/// The calls that recreate listener `l` of `s`: `nvmf_subsystem_add_listener`, with ANA
/// reporting in the state of group 1 (`ana_state`, which SPDK's method takes) and then
/// `nvmf_subsystem_listener_set_ana_state` for each group in another state, so a restarted
/// gateway reports what it did.
fn listener_calls(s: &Subsystem, l: &ListenAddr, out: &mut Vec<Value>) {
    let first = s.ana_state(l, 1);
    let listener = AddListener {
        nqn: s.nqn.clone(),
        secure_channel: Some(s.is_secure(l)),
        ana_state: s.ana_reporting.then(|| first.name().to_string()),
        listen_address: ListenAddress::of(l),
        ..AddListener::default()
    };
    out.push(call("nvmf_subsystem_add_listener", &listener));
    if !s.ana_reporting {
        return;
    }
    for g in 2..=s.max_namespaces {
        let state = s.ana_state(l, g);
        if state != first {
            let set = SetAnaState {
                nqn: s.nqn.clone(),
                ana_state: state.name().to_string(),
                tgt_name: None,
                anagrpid: Some(g),
                listen_address: ListenAddress::of(l),
            };
            out.push(call("nvmf_subsystem_listener_set_ana_state", &set));
        }
    }
}

/// The calls that recreate the target, in SPDK's order: the transport (as
/// `nvmf_get_transports` lists it, as SPDK writes it); then per subsystem (discovery first)
/// `nvmf_create_subsystem`, its hosts, its namespaces (with NSID, NGUID and UUID, so hosts see
/// the same identities after a restart, and the ANA group) and its listeners (with their ANA
/// states).
pub fn config(rpc: &NvmfRpc) -> Vec<Value> {
    let c = rpc.tgt.config();
    let mut out = Vec::new();
    if c.dhchap != crate::DhchapPolicy::default() {
        // Only a policy narrowed from SPDK's default is written (as nvmf_set_config, which a
        // configuration replays as a setting).
        out.push(json!({"method": "nvmf_set_config", "params": {
            "dhchap_digests": c.dhchap.digests.iter().map(|h| h.name()).collect::<Vec<_>>(),
            "dhchap_dhgroups": c.dhchap.dhgroups.iter().map(|g| g.name()).collect::<Vec<_>>(),
        }}));
    }
    if let Some(t) = &c.transport {
        out.push(json!({"method": "nvmf_create_transport", "params": transport_json(t)}));
    }
    for s in &c.subsystems {
        if s.subtype == SubType::Nvme {
            out.push(call("nvmf_create_subsystem", &CreateSubsystem::of(s)));
            for h in &s.hosts {
                let keys = s.host_keys(h);
                let host = AddHost {
                    nqn: s.nqn.clone(),
                    host: h.clone(),
                    // The keys' names: their texts stay in their files.
                    dhchap_key: keys.map(|k| k.dhchap_key.name().to_string()),
                    dhchap_ctrlr_key: keys
                        .and_then(|k| k.dhchap_ctrlr_key.as_ref())
                        .map(|k| k.name().to_string()),
                    psk: s.host_psk(h).map(|k| k.psk.name().to_string()),
                    ..AddHost::default()
                };
                out.push(call("nvmf_subsystem_add_host", &host));
            }
            for n in &s.namespaces {
                let ns = AddNs {
                    nqn: s.nqn.clone(),
                    tgt_name: None,
                    namespace: NsParams::of(n, s.ana_reporting),
                };
                out.push(call("nvmf_subsystem_add_ns", &ns));
            }
        }
        for l in &s.listeners {
            listener_calls(s, l, &mut out);
        }
    }
    out
}
