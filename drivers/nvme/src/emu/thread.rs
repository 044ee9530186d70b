//! The emulator on a thread of its own ([`Emu::spawn`]): it runs [`Emu::step`] in a loop, as
//! a controller works beside the host, spinning then yielding when idle.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Emu;

/// The emulator running on its own thread (stopped and joined on drop).
pub struct EmuThread {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Emu {
    /// Runs [`Emu::step`] in a loop on a new thread (pinned to `core` when given) and turns
    /// inline I/O processing off.
    pub fn spawn(self: &Arc<Emu>, core: Option<usize>) -> EmuThread {
        self.set_inline(false);
        let emu = self.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("nvme-emu".into())
            .spawn(move || {
                if let Some(c) = core {
                    pin_to_core(c);
                }
                let mut idle = 0u32;
                while !stop2.load(Ordering::Acquire) {
                    if emu.step() == 0 {
                        idle += 1;
                        if idle > 1024 {
                            std::thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                    } else {
                        idle = 0;
                    }
                }
            })
            .expect("spawn the emulator thread");
        EmuThread {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for EmuThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Pins the calling thread to `core` (best effort: a failure is logged).
pub fn pin_to_core(core: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it;
    // sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            log::warn!(
                "cannot pin to core {core}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}
