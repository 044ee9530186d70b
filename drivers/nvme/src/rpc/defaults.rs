//! The driver defaults SPDK's `bdev_nvme_set_options` sets for controllers attached afterwards,
//! and SPDK's reconnect knobs, which an attach may also give: an attach's value wins over
//! `bdev_nvme_set_options`', which wins over the driver's (SPDK's) own.

use std::sync::Mutex;
use std::time::Duration;

use crate::NvmeOptions;

/// SPDK's reconnect knobs (`bdev_nvme_set_options` and the attach's own), each `None` when not
/// given. (SPDK's rules between them are the driver's `TcpOptions::validate`.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reconnect {
    /// Seconds to keep reconnecting a lost controller before deleting it (0: never reconnect,
    /// -1: forever).
    pub ctrlr_loss_timeout_sec: Option<i32>,
    /// Seconds between reconnect attempts.
    pub reconnect_delay_sec: Option<u32>,
    /// Seconds after which I/O held during a reconnect fails (0: held until the controller is
    /// deleted).
    pub fast_io_fail_timeout_sec: Option<u32>,
}

impl Reconnect {
    /// Each knob from `self`, else from `base`.
    pub fn or(self, base: Reconnect) -> Reconnect {
        Reconnect {
            ctrlr_loss_timeout_sec: self.ctrlr_loss_timeout_sec.or(base.ctrlr_loss_timeout_sec),
            reconnect_delay_sec: self.reconnect_delay_sec.or(base.reconnect_delay_sec),
            fast_io_fail_timeout_sec: self
                .fast_io_fail_timeout_sec
                .or(base.fast_io_fail_timeout_sec),
        }
    }
}

/// NVMe driver options `bdev_nvme_set_options` sets for controllers attached afterwards
/// (`None`: the driver's default).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NvmeDefaults {
    /// [`NvmeOptions::io_timeout`] (`timeout_us` with action abort or reset).
    pub io_timeout: Option<Duration>,
    /// [`NvmeOptions::admin_timeout`] (`timeout_admin_us`).
    pub admin_timeout: Option<Duration>,
    /// [`NvmeOptions::io_retries`] (`transport_retry_count`).
    pub io_retries: Option<u8>,
    /// [`NvmeOptions::recovery_retries`] (`bdev_retry_count`).
    pub recovery_retries: Option<u8>,
    /// [`NvmeOptions::health_check_interval`] (`nvme_adminq_poll_period_us`).
    pub health_check_interval: Option<Duration>,
    /// Reconnect knobs of NVMe/TCP controllers (an attach's own win).
    pub reconnect: Reconnect,
    /// Keep-alive timeout of NVMe/TCP controllers, ms (`keep_alive_timeout_ms`).
    pub keep_alive_timeout_ms: Option<u32>,
}

impl NvmeDefaults {
    /// Overrides the fields that were set.
    pub fn apply_to(&self, o: &mut NvmeOptions) {
        if let Some(v) = self.io_timeout {
            o.io_timeout = v;
        }
        if let Some(v) = self.admin_timeout {
            o.admin_timeout = v;
        }
        if let Some(v) = self.io_retries {
            o.io_retries = v;
        }
        if let Some(v) = self.recovery_retries {
            o.recovery_retries = v;
        }
        if let Some(v) = self.health_check_interval {
            o.health_check_interval = v;
        }
    }
}

/// The defaults in effect, shared by the module's methods (which attach with them) and whoever
/// sets them (the daemon's `bdev_nvme_set_options`).
#[derive(Debug, Default)]
pub struct SharedDefaults(Mutex<NvmeDefaults>);

impl SharedDefaults {
    /// The defaults in effect.
    pub fn get(&self) -> NvmeDefaults {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the defaults for controllers attached from now on.
    pub fn set(&self, d: NvmeDefaults) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = d;
    }

    /// PCIe driver options for a new controller named `name`: the driver's defaults with what
    /// `bdev_nvme_set_options` mapped.
    pub fn options(&self, name: &str) -> NvmeOptions {
        let mut o = NvmeOptions {
            name: name.to_string(),
            ..NvmeOptions::default()
        };
        self.get().apply_to(&mut o);
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_knobs_win_over_defaults() {
        let a = Reconnect {
            ctrlr_loss_timeout_sec: Some(5),
            ..Default::default()
        };
        let b = Reconnect {
            ctrlr_loss_timeout_sec: Some(9),
            reconnect_delay_sec: Some(1),
            fast_io_fail_timeout_sec: None,
        };
        assert_eq!(
            a.or(b),
            Reconnect {
                ctrlr_loss_timeout_sec: Some(5),
                reconnect_delay_sec: Some(1),
                fast_io_fail_timeout_sec: None
            }
        );
    }
}
