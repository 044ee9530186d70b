//! The "nvmf" section of `save_config`, written with the methods' own declarations so that
//! replaying it is calling them.

use pmio_runtime::rpc::params::call;
use serde_json::{Value, json};

use super::context::NvmfRpc;
use super::host::AddHost;
use super::json::transport_json;
use super::listener::{AddListener, ListenAddress};
use super::ns::{AddNs, NsParams};
use super::subsystem::CreateSubsystem;
use crate::subsystem::SubType;

/// The calls that recreate the target, in SPDK's order: the transport (as
/// `nvmf_get_transports` lists it, as SPDK writes it); then per subsystem (discovery first)
/// `nvmf_create_subsystem`, its hosts, its namespaces (with NSID, NGUID and UUID, so hosts see
/// the same identities after a restart) and its listeners.
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
                    namespace: NsParams::of(n),
                };
                out.push(call("nvmf_subsystem_add_ns", &ns));
            }
        }
        for l in &s.listeners {
            let listener = AddListener {
                nqn: s.nqn.clone(),
                secure_channel: Some(s.is_secure(l)),
                listen_address: ListenAddress::of(l),
                ..AddListener::default()
            };
            out.push(call("nvmf_subsystem_add_listener", &listener));
        }
    }
    out
}
