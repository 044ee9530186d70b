//! Where an attached controller is: SPDK's transport ID (`trid`) for the two transports pmio
//! attaches, with the JSON SPDK prints for it (`nvme_bdev_dump_trid_json`).

use serde_json::{Map, Value, json};

/// The address family of a TCP controller's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adrfam {
    /// `ipv4` (SPDK prints `IPv4`).
    Ipv4,
    /// `ipv6` (SPDK prints `IPv6`).
    Ipv6,
}

impl Adrfam {
    /// SPDK's `adrfam` word, case-insensitively (`ipv4`, `IPv4`, ...).
    pub fn parse(s: &str) -> Option<Adrfam> {
        if s.eq_ignore_ascii_case("ipv4") {
            Some(Adrfam::Ipv4)
        } else if s.eq_ignore_ascii_case("ipv6") {
            Some(Adrfam::Ipv6)
        } else {
            None
        }
    }

    /// The family of `traddr` when none was given: IPv6 for an IPv6 literal, else IPv4 (a
    /// host name resolves as IPv4, as SPDK's `-f ipv4`).
    pub fn of_addr(traddr: &str) -> Adrfam {
        match traddr.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V6(_)) => Adrfam::Ipv6,
            _ => Adrfam::Ipv4,
        }
    }

    /// As SPDK prints it.
    pub fn name(self) -> &'static str {
        match self {
            Adrfam::Ipv4 => "IPv4",
            Adrfam::Ipv6 => "IPv6",
        }
    }
}

/// A controller's transport ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trid {
    /// A local controller through VFIO.
    Pcie {
        /// PCI address (`0000:00:04.0`).
        traddr: String,
    },
    /// A remote subsystem over NVMe/TCP.
    Tcp {
        /// Address family of `traddr`.
        adrfam: Adrfam,
        /// IP address or host name.
        traddr: String,
        /// Port.
        trsvcid: String,
        /// Subsystem NQN.
        subnqn: String,
    },
}

impl Trid {
    /// SPDK's `trtype` word as it prints it (`PCIe`, `TCP`).
    pub fn trtype(&self) -> &'static str {
        match self {
            Trid::Pcie { .. } => "PCIe",
            Trid::Tcp { .. } => "TCP",
        }
    }

    /// The transport address.
    pub fn traddr(&self) -> &str {
        match self {
            Trid::Pcie { traddr } | Trid::Tcp { traddr, .. } => traddr,
        }
    }

    /// The address family (`None` for PCIe).
    pub fn adrfam(&self) -> Option<Adrfam> {
        match self {
            Trid::Pcie { .. } => None,
            Trid::Tcp { adrfam, .. } => Some(*adrfam),
        }
    }

    /// The port (`None` for PCIe).
    pub fn trsvcid(&self) -> Option<&str> {
        match self {
            Trid::Pcie { .. } => None,
            Trid::Tcp { trsvcid, .. } => Some(trsvcid),
        }
    }

    /// The subsystem NQN (`None` for PCIe).
    pub fn subnqn(&self) -> Option<&str> {
        match self {
            Trid::Pcie { .. } => None,
            Trid::Tcp { subnqn, .. } => Some(subnqn),
        }
    }

    /// Whether both name the same controller: the same PCI function, or the same subsystem at
    /// the same address and port (a PCI address or host name in any case).
    pub fn same_path(&self, other: &Trid) -> bool {
        match (self, other) {
            (Trid::Pcie { traddr: a }, Trid::Pcie { traddr: b }) => a.eq_ignore_ascii_case(b),
            (
                Trid::Tcp {
                    traddr: a,
                    trsvcid: ap,
                    subnqn: an,
                    ..
                },
                Trid::Tcp {
                    traddr: b,
                    trsvcid: bp,
                    subnqn: bn,
                    ..
                },
            ) => a.eq_ignore_ascii_case(b) && ap == bp && an == bn,
            _ => false,
        }
    }

    /// For messages: `0000:00:04.0`, or `nqn… at 10.0.0.1:4420`.
    pub fn describe(&self) -> String {
        match self {
            Trid::Pcie { traddr } => traddr.clone(),
            Trid::Tcp {
                traddr,
                trsvcid,
                subnqn,
                adrfam,
            } => match adrfam {
                Adrfam::Ipv6 => format!("{subnqn} at [{traddr}]:{trsvcid}"),
                Adrfam::Ipv4 => format!("{subnqn} at {traddr}:{trsvcid}"),
            },
        }
    }

    /// The `trid` object of `bdev_nvme_get_controllers` and `bdev_get_bdevs`, and the first
    /// keys of a saved `bdev_nvme_attach_controller`, in SPDK's order.
    pub fn json(&self) -> Map<String, Value> {
        let v = match self {
            Trid::Pcie { traddr } => json!({"trtype": "PCIe", "traddr": traddr}),
            Trid::Tcp {
                adrfam,
                traddr,
                trsvcid,
                subnqn,
            } => json!({
                "trtype": "TCP",
                "adrfam": adrfam.name(),
                "traddr": traddr,
                "trsvcid": trsvcid,
                "subnqn": subnqn
            }),
        };
        match v {
            Value::Object(m) => m,
            _ => unreachable!("json! of an object literal"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(addr: &str, port: &str, nqn: &str) -> Trid {
        Trid::Tcp {
            adrfam: Adrfam::of_addr(addr),
            traddr: addr.into(),
            trsvcid: port.into(),
            subnqn: nqn.into(),
        }
    }

    #[test]
    fn same_path_compares_address_port_and_subsystem() {
        let a = tcp("127.0.0.1", "4420", "nqn.a");
        assert!(a.same_path(&tcp("127.0.0.1", "4420", "nqn.a")));
        assert!(!a.same_path(&tcp("127.0.0.1", "4421", "nqn.a")));
        assert!(!a.same_path(&tcp("127.0.0.1", "4420", "nqn.b")));
        let p = Trid::Pcie {
            traddr: "0000:00:04.0".into(),
        };
        assert!(p.same_path(&Trid::Pcie {
            traddr: "0000:00:04.0".to_uppercase()
        }));
        assert!(!p.same_path(&a));
    }

    #[test]
    fn json_in_spdk_order_and_words() {
        let v = Value::Object(tcp("::1", "4420", "nqn.a").json());
        assert_eq!(
            v.to_string(),
            r#"{"trtype":"TCP","adrfam":"IPv6","traddr":"::1","trsvcid":"4420","subnqn":"nqn.a"}"#
        );
        assert_eq!(
            tcp("::1", "4420", "nqn.a").describe(),
            "nqn.a at [::1]:4420"
        );
        assert_eq!(Adrfam::parse("IPV4"), Some(Adrfam::Ipv4));
        assert_eq!(Adrfam::parse("ib"), None);
        assert_eq!(Adrfam::of_addr("host.example"), Adrfam::Ipv4);
    }
}
