//! The registry of named block devices.
//!
//! Devices are registered once (by a driver constructor, an RPC, the perf tool) and looked up
//! by name when a reactor opens them. Lookups happen at open time, never per I/O, so a
//! read-write lock is fine here.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::histogram::BdevHistogram;
use super::stats::{QueueStats, QueueStatsCell};
use super::{BdevError, BlockDevice};

/// Named block devices, shared by every reactor and the RPC thread.
#[derive(Default)]
pub struct Registry {
    devs: RwLock<BTreeMap<String, Arc<dyn BlockDevice>>>,
    /// Statistics cells of every queue opened through the registry, per device. Cells of
    /// closed queues stay, so device totals keep their I/O (as SPDK folds in the stats of
    /// destroyed channels).
    stats: RwLock<BTreeMap<String, Vec<Arc<QueueStatsCell>>>>,
    /// Each device's latency histogram switch (`bdev_enable_histogram`), followed by every
    /// queue opened through the registry.
    histograms: RwLock<BTreeMap<String, Arc<BdevHistogram>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("devices", &self.names())
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds `dev` under its `info().name`. Fails with [`BdevError::Exists`] if the name is
    /// taken (the registry is unchanged), or [`BdevError::InvalidConfig`] for an empty name.
    pub fn register(&self, dev: Arc<dyn BlockDevice>) -> Result<(), BdevError> {
        let name = dev.info().name.clone();
        if name.is_empty() {
            return Err(BdevError::InvalidConfig {
                name,
                reason: "empty bdev name".into(),
            });
        }
        let mut devs = self.devs.write();
        if devs.contains_key(&name) {
            return Err(BdevError::Exists(name));
        }
        self.histograms
            .write()
            .insert(name.clone(), Arc::new(BdevHistogram::new()));
        devs.insert(name, dev);
        Ok(())
    }

    /// Removes and returns the device called `name`. Queues already open keep the device
    /// alive (they hold an `Arc`) until they are dropped.
    pub fn unregister(&self, name: &str) -> Result<Arc<dyn BlockDevice>, BdevError> {
        let dev = self
            .devs
            .write()
            .remove(name)
            .ok_or_else(|| BdevError::NotFound(name.to_string()))?;
        self.stats.write().remove(name);
        self.histograms.write().remove(name);
        Ok(dev)
    }

    /// Adds a queue's statistics cell to device `name`'s totals (done by
    /// [`super::BdevQueue::open_in`]).
    pub fn attach_stats(&self, name: &str, cell: Arc<QueueStatsCell>) -> Result<(), BdevError> {
        if !self.devs.read().contains_key(name) {
            return Err(BdevError::NotFound(name.to_string()));
        }
        self.stats
            .write()
            .entry(name.to_string())
            .or_default()
            .push(cell);
        Ok(())
    }

    /// Device `name`'s latency histogram switch, `None` for an unknown device.
    pub fn histogram(&self, name: &str) -> Option<Arc<BdevHistogram>> {
        self.histograms.read().get(name).cloned()
    }

    /// Device `name`'s statistics: the sum over every queue opened through the registry,
    /// computed now (O(queues)); `None` for an unknown device.
    pub fn device_stats(&self, name: &str) -> Option<QueueStats> {
        if !self.devs.read().contains_key(name) {
            return None;
        }
        let mut total = QueueStats::default();
        if let Some(cells) = self.stats.read().get(name) {
            for c in cells {
                total.add(&c.load());
            }
        }
        Some(total)
    }

    /// I/Os in flight on device `name`'s queues opened through the registry, as each queue saw
    /// it at its last completion batch (0 for an unknown device).
    pub fn device_outstanding(&self, name: &str) -> u64 {
        self.stats
            .read()
            .get(name)
            .map_or(0, |cells| cells.iter().map(|c| c.outstanding()).sum())
    }

    /// The device called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn BlockDevice>> {
        self.devs.read().get(name).cloned()
    }

    /// Every registered device, ordered by name.
    pub fn list(&self) -> Vec<Arc<dyn BlockDevice>> {
        self.devs.read().values().cloned().collect()
    }

    /// Names of every registered device, ordered.
    pub fn names(&self) -> Vec<String> {
        self.devs.read().keys().cloned().collect()
    }

    /// Number of registered devices.
    pub fn len(&self) -> usize {
        self.devs.read().len()
    }

    /// Whether no device is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bdev::{BdevInfo, DriverQueue, Uuid};
    use crate::hctx::{HctxQueues, HctxType};
    use crate::request::OpSet;

    struct Dummy(BdevInfo);

    impl BlockDevice for Dummy {
        fn info(&self) -> &BdevInfo {
            &self.0
        }
        fn open_queue(
            &self,
            ty: HctxType,
            index: u16,
            _depth: u32,
        ) -> Result<Box<dyn DriverQueue>, BdevError> {
            Err(BdevError::QueueOpen {
                name: self.0.name.clone(),
                ty,
                index,
                reason: "dummy".into(),
            })
        }
    }

    fn dummy(name: &str) -> Arc<dyn BlockDevice> {
        Arc::new(Dummy(BdevInfo {
            name: name.into(),
            uuid: Uuid::new_v4(),
            product_name: "Dummy".into(),
            block_size: 512,
            num_blocks: 8,
            supported_ops: OpSet::READ_WRITE,
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: 8,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
        }))
    }

    #[test]
    fn register_get_list_unregister() {
        let r = Registry::new();
        assert!(r.is_empty());
        r.register(dummy("b")).unwrap();
        r.register(dummy("a")).unwrap();
        assert_eq!(r.names(), vec!["a", "b"]);
        assert_eq!(r.list().len(), 2);
        assert_eq!(r.get("a").unwrap().info().name, "a");
        assert!(r.get("c").is_none());
        let removed = r.unregister("a").unwrap();
        assert_eq!(removed.info().name, "a");
        assert!(matches!(r.unregister("a"), Err(BdevError::NotFound(n)) if n == "a"));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn duplicate_name_is_rejected_and_keeps_the_first() {
        let r = Registry::new();
        let first = dummy("x");
        r.register(Arc::clone(&first)).unwrap();
        let err = r.register(dummy("x")).unwrap_err();
        assert!(matches!(err, BdevError::Exists(ref n) if n == "x"));
        assert_eq!(err.errno(), -libc::EEXIST);
        assert!(Arc::ptr_eq(&r.get("x").unwrap(), &first));
    }

    #[test]
    fn empty_name_is_rejected() {
        let r = Registry::new();
        assert!(matches!(
            r.register(dummy("")),
            Err(BdevError::InvalidConfig { .. })
        ));
    }

    #[test]
    fn device_stats_sum_attached_queues() {
        let r = Registry::new();
        r.register(dummy("d")).unwrap();
        assert_eq!(r.device_stats("d"), Some(QueueStats::default()));
        assert_eq!(r.device_stats("nope"), None);
        let (a, b) = (
            Arc::new(QueueStatsCell::new()),
            Arc::new(QueueStatsCell::new()),
        );
        r.attach_stats("d", Arc::clone(&a)).unwrap();
        r.attach_stats("d", Arc::clone(&b)).unwrap();
        assert!(r.attach_stats("nope", Arc::clone(&a)).is_err());
        let mut s = QueueStats::default();
        s.op_mut(crate::request::Op::Read).record(4096, 10, true);
        a.publish(&s);
        s.op_mut(crate::request::Op::Read).record(4096, 30, true);
        b.publish(&s);
        let t = r.device_stats("d").unwrap();
        let rd = t.op(crate::request::Op::Read);
        assert_eq!(
            (rd.ops, rd.bytes, rd.lat_min_ns, rd.lat_max_ns),
            (3, 3 * 4096, 10, 30)
        );
        r.unregister("d").unwrap();
        assert_eq!(r.device_stats("d"), None);
    }

    #[test]
    fn registry_is_sync() {
        fn is_sync<T: Send + Sync>() {}
        is_sync::<Registry>();
    }
}
