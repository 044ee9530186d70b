//! `--metrics-listen ADDR:PORT`: the daemon's counters in the Prometheus (OpenMetrics) text
//! format on `GET /metrics`.
//!
//! Nothing is counted for this: a scrape reads the counters the daemon keeps anyway (the bdev
//! queues' statistics cells, the reactors' stats, the NVMe/TCP poll groups' cells, the vhost
//! controllers' records), summed when asked, as `bdev_get_iostat` and `thread_get_stats` do.
//! The format is `prometheus-client`'s encoder (a [`Collector`] that reads on each scrape);
//! the server is `tiny_http` on one thread of its own: one request at a time, a client that
//! sends garbage gets an HTTP error, one that goes away mid-answer is logged and forgotten.
//!
//! Families (labels in braces):
//! - `pmio_bdev_{read,write,unmap}_ops_total{bdev}`, `pmio_bdev_{read,written,unmapped}_bytes_total`,
//!   `pmio_bdev_{read,write,unmap}_latency_seconds_total` (sum of latencies: divide by the
//!   ops' rate for a mean), `pmio_bdev_io_errors_total`, `pmio_bdev_io_in_flight` (queue
//!   depth at the queues' last completion batch), `pmio_bdev_size_bytes`;
//! - `pmio_reactor_{busy,idle,sleep}_seconds_total{core}`, `pmio_reactor_interrupt_mode{core}`
//!   (1 when the reactor sleeps once idle), `pmio_reactor_sleeping{core}`;
//! - `pmio_nvmf_subsystem_controllers{nqn}`, `pmio_nvmf_subsystem_connections{nqn}` (queue
//!   pairs), and per poll group `pmio_nvmf_poll_group_completed_commands_total{core}`,
//!   `pmio_nvmf_poll_group_io_qpairs{core}`, `pmio_nvmf_poll_group_pending_bdev_io{core}`;
//! - `pmio_vhost_controller_requests_total{controller,bdev}`, `pmio_vhost_controller_connected`,
//!   `pmio_vhost_controller_sessions_total`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use pmio::Op;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::target::Target;

/// The content type of the OpenMetrics text format prometheus-client writes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Reads the daemon's counters on each scrape.
struct DaemonCollector {
    target: Arc<Target>,
}

impl std::fmt::Debug for DaemonCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonCollector").finish_non_exhaustive()
    }
}

type Labels = Vec<(&'static str, String)>;

/// One family: its samples, each a label set and a value.
fn family<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Labels, M)>,
) -> Result<(), std::fmt::Error> {
    let samples: Vec<(Labels, M)> = samples.into_iter().collect();
    let Some(first) = samples.first() else {
        return Ok(());
    };
    let mut fam = enc.encode_descriptor(name, help, None, first.1.metric_type())?;
    for (labels, m) in &samples {
        m.encode(fam.encode_family(labels)?)?;
    }
    Ok(())
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl DaemonCollector {
    fn bdevs(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let host = &self.target.bdevs;
        let rows: Vec<(String, pmio::bdev::QueueStats, u64, u64)> = host
            .bdevs_in_order()
            .iter()
            .map(|d| {
                let i = d.info();
                let name = i.name.clone();
                let st = host.iostat(&name);
                let depth = host.outstanding(&name);
                (name, st, depth, i.num_blocks * u64::from(i.block_size))
            })
            .collect();
        let lab = |n: &String| vec![("bdev", n.clone())];
        for (op, ops, bytes, bytes_help) in [
            (
                Op::Read,
                "pmio_bdev_read_ops",
                "pmio_bdev_read_bytes",
                "Bytes read",
            ),
            (
                Op::Write,
                "pmio_bdev_write_ops",
                "pmio_bdev_written_bytes",
                "Bytes written",
            ),
            (
                Op::Discard,
                "pmio_bdev_unmap_ops",
                "pmio_bdev_unmapped_bytes",
                "Bytes unmapped",
            ),
        ] {
            let what = op.name();
            family(
                enc,
                ops,
                &format!("Completed {what} I/Os (bdev_get_iostat num_{what}_ops)"),
                rows.iter()
                    .map(|r| (lab(&r.0), ConstCounter::new(r.1.op(op).ops))),
            )?;
            family(
                enc,
                bytes,
                bytes_help,
                rows.iter()
                    .map(|r| (lab(&r.0), ConstCounter::new(r.1.op(op).bytes))),
            )?;
            family(
                enc,
                &format!("pmio_bdev_{what}_latency_seconds"),
                &format!("Sum of the latencies of completed {what} I/Os"),
                rows.iter()
                    .map(|r| (lab(&r.0), ConstCounter::new(secs(r.1.op(op).lat_sum_ns)))),
            )?;
        }
        family(
            enc,
            "pmio_bdev_io_errors",
            "I/Os completed with an error",
            rows.iter().map(|r| {
                let e: u64 = r.1.ops.iter().map(|o| o.errors).sum();
                (lab(&r.0), ConstCounter::new(e))
            }),
        )?;
        family(
            enc,
            "pmio_bdev_io_in_flight",
            "I/Os in flight (queue depth) as of each queue's last completion batch",
            rows.iter().map(|r| (lab(&r.0), ConstGauge::new(r.2))),
        )?;
        family(
            enc,
            "pmio_bdev_size_bytes",
            "Capacity",
            rows.iter().map(|r| (lab(&r.0), ConstGauge::new(r.3))),
        )
    }

    fn reactors(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let h = self.target.reactors();
        let stats = h.all_stats();
        let lab = |c: u32| vec![("core", c.to_string())];
        family(
            enc,
            "pmio_reactor_busy_seconds",
            "Time a reactor ran messages or pollers that did work",
            stats
                .iter()
                .map(|s| (lab(s.core), ConstCounter::new(secs(s.busy_ns)))),
        )?;
        family(
            enc,
            "pmio_reactor_idle_seconds",
            "Time a reactor polled and found nothing to do",
            stats
                .iter()
                .map(|s| (lab(s.core), ConstCounter::new(secs(s.idle_ns)))),
        )?;
        family(
            enc,
            "pmio_reactor_sleep_seconds",
            "Time a reactor slept on its eventfd (interrupt mode)",
            stats
                .iter()
                .map(|s| (lab(s.core), ConstCounter::new(secs(s.sleep_ns)))),
        )?;
        family(
            enc,
            "pmio_reactor_interrupt_mode",
            "1 when the reactor sleeps once idle (interrupt mode), 0 when it busy-polls",
            stats.iter().map(|s| {
                let on = i64::from(h.interrupt_idle(s.core).is_some());
                (lab(s.core), ConstGauge::new(on))
            }),
        )?;
        family(
            enc,
            "pmio_reactor_sleeping",
            "1 while the reactor is asleep waiting for work",
            stats
                .iter()
                .map(|s| (lab(s.core), ConstGauge::new(i64::from(s.sleeping)))),
        )
    }

    fn nvmf(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let tgt = &self.target.nvmf.tgt;
        let subs: Vec<(String, usize, usize)> = tgt
            .config()
            .subsystems
            .iter()
            .map(|s| {
                let ctrlrs = tgt.controllers(&s.nqn).unwrap_or_default();
                let qpairs = ctrlrs.iter().map(|c| c.qpairs.len()).sum();
                (s.nqn.clone(), ctrlrs.len(), qpairs)
            })
            .collect();
        let lab = |n: &String| vec![("nqn", n.clone())];
        family(
            enc,
            "pmio_nvmf_subsystem_controllers",
            "Controllers connected to an NVMe-oF subsystem",
            subs.iter()
                .map(|s| (lab(&s.0), ConstGauge::new(s.1 as u64))),
        )?;
        family(
            enc,
            "pmio_nvmf_subsystem_connections",
            "Queue pairs (TCP connections) of an NVMe-oF subsystem's controllers",
            subs.iter()
                .map(|s| (lab(&s.0), ConstGauge::new(s.2 as u64))),
        )?;
        let groups = tgt.group_stats();
        let lab = |c: u32| vec![("core", c.to_string())];
        family(
            enc,
            "pmio_nvmf_poll_group_completed_commands",
            "NVMe commands a reactor's NVMe/TCP poll group completed",
            groups
                .iter()
                .map(|(c, g)| (lab(*c), ConstCounter::new(g.completed_nvme_io))),
        )?;
        family(
            enc,
            "pmio_nvmf_poll_group_io_qpairs",
            "I/O queue pairs a reactor's NVMe/TCP poll group serves now",
            groups
                .iter()
                .map(|(c, g)| (lab(*c), ConstGauge::new(g.current_io_qpairs))),
        )?;
        family(
            enc,
            "pmio_nvmf_poll_group_pending_bdev_io",
            "Bdev I/Os a reactor's NVMe/TCP poll group has in flight",
            groups
                .iter()
                .map(|(c, g)| (lab(*c), ConstGauge::new(g.pending_bdev_io))),
        )
    }

    fn vhost(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering;
        let ctrlrs = self.target.vhost.tgt.controllers();
        let lab = |c: &pmio_vhost::CtrlrInfo| {
            vec![("controller", c.name.clone()), ("bdev", c.bdev.clone())]
        };
        family(
            enc,
            "pmio_vhost_controller_connected",
            "1 while a vhost-user front end (a VM) is connected",
            ctrlrs.iter().map(|c| {
                let on = i64::from(c.connected.load(Ordering::Relaxed));
                (lab(c), ConstGauge::new(on))
            }),
        )?;
        family(
            enc,
            "pmio_vhost_controller_requests",
            "virtio-blk requests a controller's rings completed",
            ctrlrs
                .iter()
                .map(|c| (lab(c), ConstCounter::new(c.requests()))),
        )?;
        family(
            enc,
            "pmio_vhost_controller_sessions",
            "vhost-user sessions a controller has served",
            ctrlrs.iter().map(|c| {
                (
                    lab(c),
                    ConstCounter::new(c.sessions.load(Ordering::Relaxed)),
                )
            }),
        )
    }
}

impl Collector for DaemonCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.bdevs(&mut enc)?;
        self.reactors(&mut enc)?;
        self.nvmf(&mut enc)?;
        self.vhost(&mut enc)
    }
}

/// The whole exposition of `target`, as one scrape returns it.
pub fn render(target: &Arc<Target>) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(DaemonCollector {
        target: Arc::clone(target),
    }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

/// The running `/metrics` server; dropping it stops it.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl MetricsServer {
    /// Serves `target`'s metrics on `addr` (port 0: any free port, see [`MetricsServer::addr`]).
    pub fn start(addr: SocketAddr, target: Arc<Target>) -> anyhow::Result<MetricsServer> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("--metrics-listen {addr}"))?;
        let addr = server
            .server_addr()
            .to_ip()
            .context("the metrics listener has no IP address")?;
        let server = Arc::new(server);
        let s = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&s, &target))
            .context("starting the metrics thread")?;
        log::info!("metrics on http://{addr}/metrics");
        Ok(MetricsServer {
            server,
            thread: Some(thread),
            addr,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            log::warn!("the metrics thread panicked");
        }
    }
}

/// Answers requests until the server is unblocked.
fn serve(server: &tiny_http::Server, target: &Arc<Target>) {
    for req in server.incoming_requests() {
        let (status, body, ctype) = answer(req.method(), req.url(), target);
        let header = tiny_http::Header::from_bytes("Content-Type", ctype).expect("a valid header");
        let resp = tiny_http::Response::from_string(body)
            .with_status_code(status)
            .with_header(header);
        if let Err(e) = req.respond(resp) {
            // The client went away: nothing to do but not keep it.
            log::debug!("metrics: answering a client: {e}");
        }
    }
}

/// The status, body and content type for `method url`.
fn answer(
    method: &tiny_http::Method,
    url: &str,
    target: &Arc<Target>,
) -> (u16, String, &'static str) {
    let path = url.split('?').next().unwrap_or("");
    let text = "text/plain; charset=utf-8";
    match (method, path) {
        (tiny_http::Method::Get, "/metrics") => match render(target) {
            Ok(body) => (200, body, CONTENT_TYPE),
            Err(e) => (500, format!("encoding the metrics: {e}\n"), text),
        },
        (_, "/metrics") => (405, "only GET /metrics\n".into(), text),
        _ => (404, "pmio-tgt serves /metrics only\n".into(), text),
    }
}
