//! The control device, `/dev/ublk-control`: ADD_DEV, SET_PARAMS, START_DEV, STOP_DEV,
//! DEL_DEV, GET_DEV_INFO and the user-recovery pair, each one `IORING_OP_URING_CMD` on a
//! small ring of its own, waited for on the calling (RPC) thread. START_DEV and STOP_DEV
//! block in the kernel until the disk's queues have fetched (start) or its requests have
//! completed (stop), so they are never sent from a reactor: the reactors serve meanwhile.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

use io_uring::{IoUring, cqueue, opcode, squeue, types};

use crate::error::UblkError;
use crate::sys::{self, CtrlCmd, DevInfo, Params};

/// The control device and its ring.
pub struct Control {
    _file: File,
    fd: i32,
    ring: Mutex<IoUring<squeue::Entry128, cqueue::Entry>>,
    /// What the driver offers (GET_FEATURES; 0 on a kernel before 6.5).
    pub features: u64,
    ioctl_encode: bool,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("features", &format_args!("{:#x}", self.features))
            .finish()
    }
}

fn cmd_name(cmd: u8) -> &'static str {
    match cmd {
        sys::CMD_GET_DEV_INFO => "GET_DEV_INFO",
        sys::CMD_ADD_DEV => "ADD_DEV",
        sys::CMD_DEL_DEV => "DEL_DEV",
        sys::CMD_START_DEV => "START_DEV",
        sys::CMD_STOP_DEV => "STOP_DEV",
        sys::CMD_SET_PARAMS => "SET_PARAMS",
        sys::CMD_START_USER_RECOVERY => "START_USER_RECOVERY",
        sys::CMD_END_USER_RECOVERY => "END_USER_RECOVERY",
        sys::CMD_GET_FEATURES => "GET_FEATURES",
        _ => "command",
    }
}

/// What a refusal most likely means, for the user.
fn hint(cmd: u8, errno: i32) -> &'static str {
    match (cmd, -errno) {
        (sys::CMD_ADD_DEV, libc::EEXIST) => ": a ublk disk with this id exists (another server?)",
        (sys::CMD_ADD_DEV, libc::EINVAL) => {
            ": the kernel refuses this queue depth or number of queues (depth 1..=4096)"
        }
        (sys::CMD_ADD_DEV, libc::ENOMEM) | (sys::CMD_ADD_DEV, libc::ENOSPC) => {
            ": the kernel has no room for another ublk disk (ublk_drv's ublks_max)"
        }
        (sys::CMD_START_USER_RECOVERY, libc::EBUSY) => {
            ": the disk is not quiesced (its old server has not gone yet)"
        }
        (_, libc::ENODEV) => ": no such ublk disk",
        (_, libc::EPERM) | (_, libc::EACCES) => ": ublk needs root (CAP_SYS_ADMIN)",
        _ => "",
    }
}

impl Control {
    /// Opens `/dev/ublk-control` (missing: [`UblkError::NoDriver`]) and asks its features.
    pub fn open() -> Result<Control, UblkError> {
        Control::open_path(sys::CONTROL_PATH)
    }

    /// [`Control::open`] on another path (tests).
    pub fn open_path(path: &str) -> Result<Control, UblkError> {
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(UblkError::NoDriver { path: path.into() });
            }
            Err(source) => {
                return Err(UblkError::Open {
                    path: path.into(),
                    source,
                });
            }
        };
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .build(8)
            .map_err(UblkError::Ring)?;
        let mut c = Control {
            fd: file.as_raw_fd(),
            _file: file,
            ring: Mutex::new(ring),
            features: 0,
            ioctl_encode: true,
        };
        let mut features = 0u64;
        let cmd = CtrlCmd {
            dev_id: u32::MAX,
            queue_id: u16::MAX,
            len: 8,
            addr: (&mut features as *mut u64) as u64,
            ..CtrlCmd::default()
        };
        // Kernels before 6.5 know neither GET_FEATURES nor ioctl-encoded commands.
        match c.submit(sys::CMD_GET_FEATURES, cmd) {
            Ok(_) => {
                c.features = features;
                c.ioctl_encode = features & sys::F_CMD_IOCTL_ENCODE != 0;
            }
            Err(e) => {
                log::info!("ublk: {e}; using the legacy command numbers");
                c.ioctl_encode = false;
            }
        }
        log::info!("ublk: control device open, features {:#x}", c.features);
        Ok(c)
    }

    /// Whether the driver keeps a disk whose server died, for a new one (`UBLK_F_USER_RECOVERY`).
    pub fn has_recovery(&self) -> bool {
        self.features & sys::F_USER_RECOVERY != 0
    }

    /// Whether the driver lets the server move request data itself (`UBLK_F_USER_COPY`).
    pub fn has_user_copy(&self) -> bool {
        self.features & sys::F_USER_COPY != 0
    }

    /// Whether I/O commands take ioctl-encoded opcodes.
    pub fn ioctl_encode(&self) -> bool {
        self.ioctl_encode
    }

    /// Sends one command and waits for its answer (the CQE's result, >= 0).
    fn submit(&self, cmd: u8, c: CtrlCmd) -> Result<i32, UblkError> {
        let op = sys::ctrl_op(cmd, self.ioctl_encode || cmd == sys::CMD_GET_FEATURES);
        let sqe = opcode::UringCmd80::new(types::Fd(self.fd), op)
            .cmd(sys::cmd_bytes(&c))
            .build()
            .user_data(u64::from(cmd));
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the command names only `c.addr` (a buffer of the caller's, alive and not
        // otherwise used until this function returns, after the completion) and no other
        // memory; the SQE is copied into the ring.
        unsafe {
            ring.submission()
                .push(&sqe)
                .map_err(|_| UblkError::Ring(io::Error::other("control ring full")))?;
        }
        loop {
            match ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(UblkError::Ring(e)),
            }
        }
        let cqe = ring
            .completion()
            .next()
            .ok_or_else(|| UblkError::Ring(io::Error::other("no completion")))?;
        let res = cqe.result();
        if res < 0 {
            return Err(UblkError::Command {
                cmd: cmd_name(cmd),
                id: c.dev_id,
                errno: res,
                text: io::Error::from_raw_os_error(-res).to_string(),
                hint: hint(cmd, res),
            });
        }
        Ok(res)
    }

    fn dev_cmd(id: u32) -> CtrlCmd {
        CtrlCmd {
            dev_id: id,
            queue_id: u16::MAX,
            ..CtrlCmd::default()
        }
    }

    /// ADD_DEV: creates disk `info.dev_id` (`/dev/ublkcN`); `info` comes back as the kernel
    /// set it up (it may lower the number of queues to the CPUs it has).
    pub fn add_dev(&self, info: &mut DevInfo) -> Result<(), UblkError> {
        let mut c = Control::dev_cmd(info.dev_id);
        c.addr = (info as *mut DevInfo) as u64;
        c.len = std::mem::size_of::<DevInfo>() as u16;
        self.submit(sys::CMD_ADD_DEV, c).map(drop)
    }

    /// SET_PARAMS.
    pub fn set_params(&self, id: u32, p: &Params) -> Result<(), UblkError> {
        let mut c = Control::dev_cmd(id);
        c.addr = (p as *const Params) as u64;
        c.len = p.len as u16;
        self.submit(sys::CMD_SET_PARAMS, c).map(drop)
    }

    /// START_DEV: `/dev/ublkbN` appears. Blocks until every queue has fetched.
    pub fn start_dev(&self, id: u32) -> Result<(), UblkError> {
        let mut c = Control::dev_cmd(id);
        c.data[0] = sys::pid() as u64;
        self.submit(sys::CMD_START_DEV, c).map(drop)
    }

    /// STOP_DEV: `/dev/ublkbN` goes (after its requests complete); the queues' fetches come
    /// back aborted.
    pub fn stop_dev(&self, id: u32) -> Result<(), UblkError> {
        self.submit(sys::CMD_STOP_DEV, Control::dev_cmd(id))
            .map(drop)
    }

    /// DEL_DEV: the disk is gone (waits until its character device is closed).
    pub fn del_dev(&self, id: u32) -> Result<(), UblkError> {
        self.submit(sys::CMD_DEL_DEV, Control::dev_cmd(id))
            .map(drop)
    }

    /// GET_DEV_INFO.
    pub fn get_dev_info(&self, id: u32) -> Result<DevInfo, UblkError> {
        let mut info = DevInfo::default();
        let mut c = Control::dev_cmd(id);
        c.addr = (&mut info as *mut DevInfo) as u64;
        c.len = std::mem::size_of::<DevInfo>() as u16;
        self.submit(sys::CMD_GET_DEV_INFO, c)?;
        Ok(info)
    }

    /// START_USER_RECOVERY: a quiesced disk takes a new server's queues.
    pub fn start_user_recovery(&self, id: u32) -> Result<(), UblkError> {
        let c = Control::dev_cmd(id);
        self.submit(sys::CMD_START_USER_RECOVERY, c).map(drop)
    }

    /// END_USER_RECOVERY: the new server serves; blocks until every queue has fetched.
    pub fn end_user_recovery(&self, id: u32) -> Result<(), UblkError> {
        let mut c = Control::dev_cmd(id);
        c.data[0] = sys::pid() as u64;
        self.submit(sys::CMD_END_USER_RECOVERY, c).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_control_device_names_the_module() {
        let e = Control::open_path("/nonexistent/ublk-control").unwrap_err();
        assert!(matches!(e, UblkError::NoDriver { .. }));
        let text = e.to_string();
        assert!(text.contains("ublk_drv"), "{text}");
        assert!(text.contains("/nonexistent/ublk-control"), "{text}");
        assert_eq!(e.errno(), -libc::ENOENT);
    }

    #[test]
    fn refusals_say_what_they_mean() {
        assert!(hint(sys::CMD_ADD_DEV, -libc::EINVAL).contains("queue depth"));
        assert!(hint(sys::CMD_ADD_DEV, -libc::EEXIST).contains("exists"));
        assert_eq!(hint(sys::CMD_SET_PARAMS, -libc::EIO), "");
    }
}
