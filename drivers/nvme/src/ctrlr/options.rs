//! [`NvmeOptions`]: what a controller is attached with, with SPDK's defaults where they
//! apply, checked once at attach.

use std::time::Duration;

use pmio::hctx::HctxQueues;

use crate::error::NvmeError;

/// Controller options (SPDK's `spdk_nvme_ctrlr_opts`, the parts that apply).
#[derive(Clone, Debug)]
pub struct NvmeOptions {
    /// Controller name; namespaces become bdevs `<name>n<nsid>`. Default `Nvme0`.
    pub name: String,
    /// Admin queue entries (2..=4096). Default 32.
    pub admin_queue_entries: u32,
    /// I/O queue pairs to ask the controller for (Set Features Number of Queues). Default 64.
    pub max_io_queues: u16,
    /// Entries of each I/O queue; 0 = the opened depth + 1. Clamped to CAP.MQES + 1.
    pub io_queue_entries: u32,
    /// Hardware queues of each type one reactor opens (per namespace bdev). Default: one
    /// default queue.
    pub queues: HctxQueues,
    /// Deadline of each admin command. Default 30 s.
    pub admin_timeout: Duration,
    /// Lower bound of the shutdown wait (the controller's RTD3E may ask for more). Default 10 s.
    pub shutdown_timeout: Duration,
    /// Times a command that completed with a retryable status is resubmitted. Default 4.
    pub io_retries: u8,
    /// Deadline of each I/O command, checked by the poller: a command past it is aborted
    /// (Abort), and the controller is reset when the abort fails or the aborted command still
    /// does not complete (NVMe/TCP: the command's connection is failed and the controller
    /// reconnected, `crate::tcp`). `Duration::ZERO` disables I/O timeouts. Default 30 s.
    pub io_timeout: Duration,
    /// Deadline of one Abort command (the poller, or an NVMe/TCP controller's thread, looks
    /// for its answer until then). Default 1 s.
    pub abort_timeout: Duration,
    /// Times one I/O is resubmitted after a timeout or a controller reset (NVMe/TCP: a lost
    /// connection) before it fails with `IoStatus::Timeout`. Default 3.
    pub recovery_retries: u8,
    /// How often a poller with commands outstanding reads CSTS for a fatal status (then resets
    /// the controller) or a vanished device (then fails every I/O). Default 10 ms.
    pub health_check_interval: Duration,
}

impl Default for NvmeOptions {
    fn default() -> Self {
        NvmeOptions {
            name: "Nvme0".to_string(),
            admin_queue_entries: 32,
            max_io_queues: 64,
            io_queue_entries: 0,
            queues: HctxQueues::DEFAULT_ONLY,
            admin_timeout: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(10),
            io_retries: 4,
            io_timeout: Duration::from_secs(30),
            abort_timeout: Duration::from_secs(1),
            recovery_retries: 3,
            health_check_interval: Duration::from_millis(10),
        }
    }
}

impl NvmeOptions {
    /// Checks ranges once, at attach.
    pub fn validate(&self) -> Result<(), NvmeError> {
        let bad = |s: String| Err(NvmeError::InvalidOption(s));
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return bad(format!(
                "controller name '{}' must be non-empty ASCII letters, digits or _",
                self.name
            ));
        }
        if !(2..=4096).contains(&self.admin_queue_entries) {
            return bad(format!(
                "admin_queue_entries {} not in 2..=4096",
                self.admin_queue_entries
            ));
        }
        if self.max_io_queues == 0 || self.max_io_queues == u16::MAX {
            return bad(format!(
                "max_io_queues {} not in 1..=65534",
                self.max_io_queues
            ));
        }
        if self.io_queue_entries == 1 || self.io_queue_entries > 65536 {
            return bad(format!(
                "io_queue_entries {} not 0 or in 2..=65536",
                self.io_queue_entries
            ));
        }
        if self.queues.default == 0 {
            return bad("at least one default queue per reactor".to_string());
        }
        Ok(())
    }
}
