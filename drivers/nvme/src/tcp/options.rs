//! What an NVMe/TCP controller is attached with: where it is ([`TcpTarget`]) and how to talk
//! to it ([`TcpOptions`], SPDK's defaults and SPDK's rules between the reconnect knobs).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::error::NvmeError;

/// Where an NVMe/TCP subsystem listens (SPDK's `trid`: traddr, trsvcid, subnqn).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpTarget {
    /// IPv4 or IPv6 address (or a host name, resolved once at attach).
    pub traddr: String,
    /// TCP port.
    pub trsvcid: String,
    /// NVM subsystem NQN.
    pub subnqn: String,
}

impl TcpTarget {
    /// The socket address (resolved at attach: reconnects use it as it is).
    pub(crate) fn resolve(&self) -> Result<SocketAddr, NvmeError> {
        let bad = |why: String| {
            NvmeError::InvalidOption(format!(
                "NVMe/TCP address {}:{}: {why}",
                self.traddr, self.trsvcid
            ))
        };
        let port: u16 = self
            .trsvcid
            .parse()
            .map_err(|_| bad("trsvcid is not a port number".into()))?;
        let host = self.traddr.trim_start_matches('[').trim_end_matches(']');
        (host, port)
            .to_socket_addrs()
            .map_err(|e| bad(e.to_string()))?
            .next()
            .ok_or_else(|| bad("no address".into()))
    }
}

/// NVMe/TCP host options (SPDK's `spdk_nvme_ctrlr_opts` and `bdev_nvme_attach_controller`'s
/// parameters, the parts that apply), with SPDK's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpOptions {
    /// Host NQN; `None`: a generated `nqn.2014-08.org.nvmexpress:uuid:<uuid>`. Empty: none
    /// is sent (an empty HOSTNQN, as spdk_nvme_perf sends without `hostnqn:`), which a
    /// subsystem admits only when it allows any host.
    pub hostnqn: Option<String>,
    /// Header digest (CRC32C over each PDU header). Default off.
    pub hdgst: bool,
    /// Data digest (CRC32C over each PDU's data). Default off.
    pub ddgst: bool,
    /// I/O queue pairs to ask the controller for (Set Features Number of Queues). Default
    /// 1024, SPDK's `num_io_queues` (the controller grants what it has).
    pub io_queues: u16,
    /// Entries of each I/O queue (clamped to CAP.MQES + 1 and MAXCMD). Default 128.
    pub queue_size: u32,
    /// Keep Alive Timeout asked for in Connect; a Keep Alive is sent every half of it. 0
    /// disables it. Default 10000 ms, SPDK's.
    pub keep_alive_timeout_ms: u32,
    /// How long to keep reconnecting a lost controller before giving it up (then all its I/O
    /// fails): 0 = one immediate reconnect and no retry, -1 = forever. Default 0.
    pub ctrlr_loss_timeout_sec: i32,
    /// Seconds between reconnect attempts. Default 0 (must be non-zero when
    /// `ctrlr_loss_timeout_sec` is).
    pub reconnect_delay_sec: u32,
    /// After this many seconds of reconnecting, held and new I/O fails with ENXIO until the
    /// controller is back; 0 = off: I/O is held until the controller is back or lost.
    /// Default 0.
    pub fast_io_fail_timeout_sec: u32,
    /// DH-HMAC-CHAP keys: a subsystem that asks for in-band authentication is answered with
    /// them on every queue (and again on every reconnect). `None`: such a subsystem is not
    /// connected to.
    pub dhchap: Option<super::auth::DhchapKeys>,
    /// TLS 1.3 PSK (`--psk`, a keyring key `NVMeTLSkey-1:...`): every queue's connection
    /// starts with a TLS handshake offering the identity `NVMe0R0h <hostnqn> <subnqn>` and the
    /// key derived from it, again at every reconnect. `None`: plain TCP.
    pub psk: Option<super::tls::TlsKey>,
}

impl Default for TcpOptions {
    fn default() -> TcpOptions {
        TcpOptions {
            hostnqn: None,
            hdgst: false,
            ddgst: false,
            io_queues: 1024,
            queue_size: 128,
            keep_alive_timeout_ms: 10_000,
            ctrlr_loss_timeout_sec: 0,
            reconnect_delay_sec: 0,
            fast_io_fail_timeout_sec: 0,
            dhchap: None,
            psk: None,
        }
    }
}

impl TcpOptions {
    /// Checks ranges, and SPDK's rules between the three reconnect knobs
    /// (`bdev_nvme_check_io_error_resiliency_params`): with `ctrlr_loss_timeout_sec` 0 the
    /// other two are 0; otherwise `reconnect_delay_sec` is non-zero, no more than the loss
    /// timeout (unless that is -1) and no more than `fast_io_fail_timeout_sec` (when set),
    /// which is itself no more than the loss timeout (unless that is -1).
    pub fn validate(&self) -> Result<(), NvmeError> {
        let bad = |s: String| Err(NvmeError::InvalidOption(s));
        if self.io_queues == 0 || self.io_queues == u16::MAX {
            return bad(format!("io_queues {} not in 1..=65534", self.io_queues));
        }
        if !(2..=65536).contains(&self.queue_size) {
            return bad(format!("queue_size {} not in 2..=65536", self.queue_size));
        }
        if let Some(nqn) = &self.hostnqn
            && nqn.len() > crate::spec::NQN_MAX_LEN
        {
            return bad(format!(
                "hostnqn {nqn:?} must be at most {} bytes",
                crate::spec::NQN_MAX_LEN
            ));
        }
        let (loss, delay, fast) = (
            self.ctrlr_loss_timeout_sec,
            self.reconnect_delay_sec,
            self.fast_io_fail_timeout_sec,
        );
        if loss < -1 {
            return bad("ctrlr_loss_timeout_sec can't be less than -1".into());
        }
        if loss == 0 {
            if delay != 0 || fast != 0 {
                return bad(
                    "reconnect_delay_sec and fast_io_fail_timeout_sec must be 0 \
                            if ctrlr_loss_timeout_sec is 0"
                        .into(),
                );
            }
            return Ok(());
        }
        if delay == 0 {
            return bad("reconnect_delay_sec can't be 0 if ctrlr_loss_timeout_sec is not 0".into());
        }
        if loss > 0 && delay > loss as u32 {
            return bad("reconnect_delay_sec can't be more than ctrlr_loss_timeout_sec".into());
        }
        if fast != 0 {
            if fast < delay {
                return bad(
                    "reconnect_delay_sec can't be more than fast_io_fail_timeout_sec".into(),
                );
            }
            if loss > 0 && fast > loss as u32 {
                return bad(
                    "fast_io_fail_timeout_sec can't be more than ctrlr_loss_timeout_sec".into(),
                );
            }
        }
        Ok(())
    }

    /// The host NQN to connect with.
    pub(crate) fn hostnqn_or_generated(&self, hostid: &pmio::Uuid) -> String {
        self.hostnqn
            .clone()
            .unwrap_or_else(|| format!("nqn.2014-08.org.nvmexpress:uuid:{hostid}"))
    }

    /// Keep Alive interval: half the timeout (`None`: keep-alive off).
    pub(crate) fn keep_alive_interval(&self) -> Option<Duration> {
        (self.keep_alive_timeout_ms != 0)
            .then(|| Duration::from_millis(u64::from(self.keep_alive_timeout_ms) / 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(loss: i32, delay: u32, fast: u32) -> TcpOptions {
        TcpOptions {
            ctrlr_loss_timeout_sec: loss,
            reconnect_delay_sec: delay,
            fast_io_fail_timeout_sec: fast,
            ..TcpOptions::default()
        }
    }

    #[test]
    fn spdk_rules_between_the_reconnect_knobs() {
        assert!(TcpOptions::default().validate().is_ok());
        for (loss, delay, fast) in [(0, 0, 0), (-1, 1, 0), (-1, 2, 5), (10, 2, 0), (10, 2, 5)] {
            assert!(
                with(loss, delay, fast).validate().is_ok(),
                "{loss} {delay} {fast}"
            );
        }
        for (loss, delay, fast) in [
            (-2, 1, 0),
            (0, 1, 0),
            (0, 0, 1),
            (-1, 0, 0),
            (10, 0, 0),
            (10, 11, 0),
            (10, 5, 2),
            (10, 2, 11),
            (-1, 5, 2),
        ] {
            assert!(
                with(loss, delay, fast).validate().is_err(),
                "{loss} {delay} {fast}"
            );
        }
    }

    #[test]
    fn ranges_and_addresses() {
        let bad_q = TcpOptions {
            queue_size: 1,
            ..TcpOptions::default()
        };
        assert!(bad_q.validate().is_err());
        let t = TcpTarget {
            traddr: "127.0.0.1".into(),
            trsvcid: "4420".into(),
            subnqn: "nqn.x".into(),
        };
        assert_eq!(t.resolve().unwrap(), "127.0.0.1:4420".parse().unwrap());
        let t6 = TcpTarget {
            traddr: "[::1]".into(),
            ..t.clone()
        };
        assert_eq!(t6.resolve().unwrap(), "[::1]:4420".parse().unwrap());
        let bad = TcpTarget {
            trsvcid: "x".into(),
            ..t
        };
        assert!(bad.resolve().is_err());
    }
}
