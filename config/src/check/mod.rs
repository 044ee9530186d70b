//! Checking a configuration without applying it: `pmio-tgt --check-config FILE`, and the first
//! pass of every load.
//!
//! Each call is classified by the [table]; settings are planned; object-creating
//! calls are checked against a [`World`]: the names the file (and, for a load at run time, the
//! running daemon) creates, so a namespace on a bdev nobody creates, a listener before any
//! transport or a duplicate name is found before anything exists. Nothing here touches a
//! device, a port or a reactor: the operator runs it on the machine where SPDK still serves.
//! The checks mirror the parameter decoding of the pmio methods; a test pins the two together
//! (the SPDK files that check clean also load).

pub mod params;
pub mod world;

pub use world::{CheckFn, World};

use std::path::Path;

use serde_json::json;

use super::document::{ConfigCall, Document};
use super::report::{Report, Verdict};
use super::settings::NoteKind;
use super::table::{self, Handling, SECTIONS};

/// Checks a document against `world`: one line per call (and per empty section, per ignored
/// key of a setting). Refusals are [`Verdict::Refuse`] lines; the load may go on only if
/// there are none.
pub fn check(doc: &Document, mut world: World) -> Report {
    let mut r = Report::default();
    let mut calls = doc.calls.iter();
    for s in &doc.sections {
        let origin = format!("subsystems[{}] ({})", s.index, s.name);
        let known = SECTIONS.contains(&s.name.as_str());
        match (known, s.calls) {
            (true, 0) => r.push(Verdict::Ignore, &origin, "-", "empty section"),
            (false, 0) => r.push(
                Verdict::Ignore,
                &origin,
                "-",
                format!(
                    "section {} is unknown to SPDK v25.09 and pmio; empty",
                    s.name
                ),
            ),
            (false, n) => r.push(
                Verdict::Refuse,
                &origin,
                "-",
                format!(
                    "unknown section {} with {n} calls: neither SPDK v25.09 nor pmio has this \
                     subsystem, and what it configures is not skipped silently",
                    s.name
                ),
            ),
            (true, _) => {}
        }
        for c in calls.by_ref().take(s.calls) {
            if known {
                check_call(&mut r, c, &mut world);
            }
        }
    }
    r
}

/// One call: its report lines, `world` updated with what it creates.
fn check_call(r: &mut Report, c: &ConfigCall, world: &mut World) {
    let params = c.params.clone().unwrap_or_else(|| json!({}));
    let Some(entry) = table::lookup(&c.method) else {
        r.push(
            Verdict::Refuse,
            &c.origin,
            &c.method,
            format!(
                "Unknown method {}: neither SPDK v25.09's save_config nor pmio writes it",
                c.method
            ),
        );
        return;
    };
    let registered = world.methods.contains(&entry.method);
    let handling = entry.handling(registered);
    match handling {
        Handling::Refuse(path, why) | Handling::Vhost(path, why, _) => {
            let obj = table::param(&params, path).unwrap_or_else(|| "?".into());
            r.push(
                Verdict::Refuse,
                &c.origin,
                &c.method,
                format!("{obj}: {why}"),
            );
        }
        Handling::Ignore(why) => r.push(Verdict::Ignore, &c.origin, &c.method, why),
        Handling::Setting(plan) => match plan(c.params.as_ref()) {
            Err(e) => r.push(Verdict::Refuse, &c.origin, &c.method, e.message),
            Ok(p) => {
                if p.maps() {
                    let mut text = p.summary(NoteKind::Mapped);
                    let same = p.summary(NoteKind::Same);
                    if !same.is_empty() {
                        if !text.is_empty() {
                            text.push_str("; ");
                        }
                        text.push_str(&same);
                    }
                    r.push(Verdict::Map, &c.origin, &c.method, text);
                }
                for n in p.notes.iter().filter(|n| n.kind == NoteKind::Ignored) {
                    r.push(Verdict::Ignore, &c.origin, &c.method, n.to_string());
                }
            }
        },
        Handling::Create(cr) | Handling::Set(cr) => {
            let verdict = match handling {
                Handling::Set(_) => Verdict::Set,
                _ => Verdict::Create,
            };
            match (cr.check)(&params, world) {
                Ok(text) => r.push(verdict, &c.origin, &c.method, text),
                Err(e) => r.push(
                    Verdict::Refuse,
                    &c.origin,
                    &c.method,
                    format!("{}: {e}", (cr.what)(&params)),
                ),
            }
        }
    }
}

/// `pmio-tgt --check-config FILE` in a daemon whose methods are `methods`: the report to print,
/// and whether the file would load.
pub fn run(path: &Path, methods: Vec<&'static str>) -> anyhow::Result<(String, bool)> {
    let doc = super::read(path)?;
    let r = check(&doc, World::with_methods(methods));
    let ok = r.count(Verdict::Refuse) == 0;
    let verdict = if ok {
        "pmio-tgt -c would load this configuration"
    } else {
        "pmio-tgt -c would refuse this configuration (nothing would start)"
    };
    Ok((format!("{}{}: {verdict}\n", r.render(), path.display()), ok))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::parse;
    use serde_json::Value;

    const SAMPLE: &str = include_str!("../../tests/fixtures/spdk-v25.09-sample.json");
    const NVMF: &str = include_str!("../../tests/fixtures/spdk-v25.09-nvmf.json");

    #[test]
    fn the_spdk_sample_checks_clean() {
        let r = check(&parse(SAMPLE).unwrap(), World::default());
        assert_eq!(r.count(Verdict::Refuse), 0, "{}", r.render());
        assert_eq!(r.count(Verdict::Create), 2, "{}", r.render());
        // Mapped: sock_set_default_impl, sock_impl_set_options (posix), bdev_nvme_set_options,
        // bdev_nvme_set_hotplug, bdev_wait_for_examine, framework_set_scheduler,
        // nvmf_set_config, nvmf_set_crdt.
        assert_eq!(r.count(Verdict::Map), 8, "{}", r.render());
        // The raid module's own method: replayed.
        assert!(
            r.lines
                .iter()
                .any(|l| l.verdict == Verdict::Set && l.method == "bdev_raid_set_options"),
            "{}",
            r.render()
        );
        let text = r.render();
        for want in [
            "iobuf_set_options",
            "accel_set_options",
            "bdev_set_options",
            "iscsi_set_options",
            "nvmf_set_max_subsystems",
            "subsystems[0] (keyring)",
            "subsystems[6] (scsi)",
        ] {
            assert!(
                r.lines.iter().any(|l| l.verdict == Verdict::Ignore
                    && (l.method == want || l.origin.starts_with(want))),
                "{want} not ignored:\n{text}"
            );
        }
    }

    #[test]
    fn the_spdk_nvmf_fixture_checks_clean() {
        let r = check(&parse(NVMF).unwrap(), World::default());
        assert_eq!(r.count(Verdict::Refuse), 0, "{}", r.render());
        let created: Vec<&str> = r
            .lines
            .iter()
            .filter(|l| l.verdict == Verdict::Create)
            .map(|l| l.method.as_str())
            .collect();
        assert_eq!(
            created,
            [
                "bdev_malloc_create",
                "bdev_malloc_create",
                "bdev_null_create",
                "nvmf_create_transport",
                "nvmf_subsystem_add_listener",
                "nvmf_create_subsystem",
                "nvmf_subsystem_add_host",
                "nvmf_subsystem_add_ns",
                "nvmf_subsystem_add_ns",
                "nvmf_subsystem_add_listener",
                "nvmf_create_subsystem",
                "nvmf_subsystem_add_ns",
                "nvmf_subsystem_add_listener",
            ]
        );
    }

    fn refusal(doc: &str) -> String {
        let r = check(&parse(doc).unwrap(), World::default());
        let out: Vec<String> = r
            .refusals()
            .map(|l| format!("{} {}", l.method, l.text))
            .collect();
        assert!(!out.is_empty(), "{doc} checked clean");
        out.join("\n")
    }

    fn one(section: &str, method: &str, params: Value) -> String {
        json!({"subsystems": [{"subsystem": section, "config": [
            {"method": method, "params": params}]}]})
        .to_string()
    }

    #[test]
    fn refusals_name_method_and_object() {
        for (section, method, params, want) in [
            (
                "bdev",
                "bdev_ocf_create",
                json!({"name": "Cache0", "mode": "wt", "cache_bdev_name": "a", "core_bdev_name": "b"}),
                "bdev_ocf_create Cache0: pmio has no OCF cache",
            ),
            (
                "iscsi",
                "iscsi_create_target_node",
                json!({"name": "iqn.2016-06.io.spdk:disk1", "luns": []}),
                "iqn.2016-06.io.spdk:disk1: pmio has no iSCSI target",
            ),
            (
                "bdev",
                "bdev_nvme_attach_controller",
                json!({"name": "Nvme1", "trtype": "RDMA", "traddr": "10.0.0.2", "subnqn": "nqn.x:y"}),
                "pmio attaches PCIe and TCP controllers; the namespaces of nqn.x:y would be missing",
            ),
            (
                "bdev",
                "bdev_lvol_create_lvstore",
                json!({"bdev_name": "Nvme0n1", "lvs_name": "lvs0"}),
                "lvs0: pmio does not create lvstores from a configuration",
            ),
            (
                "keyring",
                "keyring_file_add_key",
                json!({"name": "key0", "path": "keys/k0"}),
                "key0: non-absolute paths are not allowed: keys/k0",
            ),
            ("bdev", "bdev_frobnicate", json!({}), "Unknown method"),
            // The checks decode with the modules' own declarations: the keys and the values
            // accepted only at SPDK's default are the methods'.
            (
                "bdev",
                "bdev_malloc_create",
                json!({"num_blocks": 8, "block_size": 512, "md_size": 8}),
                "\"md_size\" is supported only as 0",
            ),
            (
                "nvmf",
                "nvmf_create_subsystem",
                json!({"nqn": "nqn.2016-06.io.spdk:c1", "passthrough": true}),
                "\"passthrough\" is supported only as false",
            ),
            (
                "nvmf",
                "nvmf_create_subsystem",
                json!({"nqn": "nqn.2016-06.io.spdk:c1", "tgt_name": "other"}),
                "Unable to find a target",
            ),
            (
                "nvmf",
                "nvmf_subsystem_allow_any_host",
                json!({"nqn": "nqn.2016-06.io.spdk:c1", "allow_any_host": true, "x": 1}),
                "unknown parameter \"x\"",
            ),
            (
                "frob",
                "bdev_malloc_create",
                json!({"num_blocks": 8, "block_size": 512}),
                "unknown section frob",
            ),
        ] {
            let e = refusal(&one(section, method, params));
            assert!(e.contains(want), "{method}: {e}");
        }
    }

    /// A vhost-blk controller is created once pmio-tgt has the method, refused before.
    #[test]
    fn vhost_follows_the_method_table() {
        const VHOST: &str = include_str!("../../tests/fixtures/spdk-v25.09-vhost-blk.json");
        let doc = parse(VHOST).unwrap();
        let mut world = World::default();
        let has = world.methods.contains(&"vhost_create_blk_controller");
        let r = check(&doc, world.clone());
        let line = r
            .lines
            .iter()
            .find(|l| l.method == "vhost_create_blk_controller")
            .unwrap();
        if has {
            assert_eq!(line.verdict, Verdict::Create, "{}", r.render());
            assert_eq!(
                line.text,
                "vhost-user-blk controller vhost.0 on bdev Malloc1"
            );
        }
        world
            .methods
            .retain(|m| *m != "vhost_create_blk_controller");
        let r = check(&doc, world);
        let line = r
            .lines
            .iter()
            .find(|l| l.method == "vhost_create_blk_controller")
            .unwrap();
        assert_eq!(line.verdict, Verdict::Refuse);
        assert!(
            line.text
                .starts_with("vhost.0: this pmio-tgt has no vhost-user-blk target"),
            "{}",
            line.text
        );
    }

    #[test]
    fn references_and_values_are_checked() {
        let bad_ns = r#"{"subsystems":[{"subsystem":"nvmf","config":[
            {"method":"nvmf_create_subsystem","params":{"nqn":"nqn.2016-06.io.spdk:c1"}},
            {"method":"nvmf_subsystem_add_ns","params":{"nqn":"nqn.2016-06.io.spdk:c1",
              "namespace":{"bdev_name":"lvs0/lv0"}}}]}]}"#;
        assert!(refusal(bad_ns).contains("is a logical volume"));
        let no_transport = r#"{"subsystems":[{"subsystem":"nvmf","config":[
            {"method":"nvmf_subsystem_add_listener","params":{"nqn":"nqn.2014-08.org.nvmexpress.discovery",
              "listen_address":{"trtype":"TCP","adrfam":"IPv4","traddr":"127.0.0.1","trsvcid":"4420"}}}]}]}"#;
        assert!(refusal(no_transport).contains("no TCP transport"));
        let e = refusal(&one(
            "bdev",
            "bdev_null_create",
            json!({"name": "N", "num_blocks": 8, "block_size": 500}),
        ));
        assert!(e.contains("500"), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_null_create",
            json!({"name": "N", "num_blocks": "many", "block_size": 512}),
        ));
        assert!(e.contains("\"num_blocks\""), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_malloc_create",
            json!({"name": "M", "num_blocks": 8, "block_size": 512, "md_size": 8}),
        ));
        assert!(e.contains("md_size"), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_aio_create",
            json!({"name": "A", "filename": "/nonexistent/x", "readonly": true}),
        ));
        assert!(e.contains("read-only"), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_nvme_attach_controller",
            json!({"name": "Nvme0", "trtype": "PCIe", "traddr": "ffff:ff:1f.7"}),
        ));
        assert!(e.contains("no PCI device at ffff:ff:1f.7"), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_nvme_attach_controller",
            json!({"name": "Nvme0", "trtype": "PCIe", "traddr": "not-a-bdf"}),
        ));
        assert!(e.contains("not-a-bdf"), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_nvme_set_options",
            json!({"action_on_timeout": "explode"}),
        ));
        assert!(e.contains("explode"), "{e}");
    }
}
