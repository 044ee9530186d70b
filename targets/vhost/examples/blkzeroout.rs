//! `blkzeroout DEVICE OFFSET LEN`: zeroes a byte range of a block device with the BLKZEROOUT
//! ioctl (the guest's write-zeroes path; busybox has no such applet). Used by
//! `make vm-test-vhost` inside the guest.

use std::os::fd::AsRawFd;

/// `_IO(0x12, 127)`.
const BLKZEROOUT: libc::c_ulong = 0x127f;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: blkzeroout DEVICE OFFSET LEN");
        std::process::exit(2);
    }
    let num = |s: &str| {
        s.parse::<u64>().unwrap_or_else(|_| {
            eprintln!("blkzeroout: {s:?} is not a number");
            std::process::exit(2)
        })
    };
    let range = [num(&args[2]), num(&args[3])];
    let dev = std::fs::OpenOptions::new()
        .write(true)
        .open(&args[1])
        .unwrap_or_else(|e| {
            eprintln!("blkzeroout: {}: {e}", args[1]);
            std::process::exit(1)
        });
    // SAFETY: BLKZEROOUT reads two u64s (offset, length) from `range`, which outlives the call.
    let rc = unsafe { libc::ioctl(dev.as_raw_fd(), BLKZEROOUT, range.as_ptr()) };
    if rc != 0 {
        eprintln!(
            "blkzeroout: {}: {}",
            args[1],
            std::io::Error::last_os_error()
        );
        std::process::exit(1);
    }
}
