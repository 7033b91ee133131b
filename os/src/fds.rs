//! Which descriptors a process hands on across `exec`.
//!
//! A command, an MCP server or an external worker must start with its standard streams
//! and nothing else of ours: a descriptor that leaks through (a worker's link to the
//! supervisor, a socket, one the daemon itself inherited) lets the program read or
//! forge what flows through it (docs/SANDBOX.md, "Descriptors"). A list of what to
//! close would always miss the next descriptor someone opens, so the kernel does it:
//! [`cloexec_from`] marks every descriptor from a number on close-on-exec at once
//! (`close_range` with `CLOSE_RANGE_CLOEXEC`), and the `exec` that follows closes them.
//!
//! Marking rather than closing keeps what the forking code still needs until the
//! `exec` itself (std's close-on-exec pipe that reports a failed `exec` to the parent),
//! and is harmless at a process's start. Everything here makes only async-signal-safe
//! system calls and allocates nothing, so it may run between `fork` and `exec`.

use std::io;
use std::os::fd::RawFd;

/// The first descriptor above the standard streams.
pub const FIRST_NON_STDIO: RawFd = 3;

/// Mark `fd` close-on-exec (the other descriptor flags are kept).
pub fn cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an integer descriptor; async-signal-safe.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Mark every open descriptor numbered `first` or more close-on-exec: the next `exec`
/// of this process closes them. `close_range(2)` does it in one call (Linux 5.11);
/// an older kernel gets each descriptor `/proc/self/fd` lists marked, and without
/// `/proc` every number up to the descriptor limit. Async-signal-safe.
pub fn cloexec_from(first: RawFd) -> io::Result<()> {
    let first = first.max(0);
    // SAFETY: a system call on integers; async-signal-safe.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return Ok(());
    }
    cloexec_listed(first).or_else(|_| cloexec_up_to_limit(first))
}

/// The `/proc/self/fd` fallback: read with `getdents64` into a buffer on the stack
/// (no allocation between `fork` and `exec`).
fn cloexec_listed(first: RawFd) -> io::Result<()> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: open of a NUL-terminated literal; async-signal-safe.
    let dir = unsafe { libc::open(c"/proc/self/fd".as_ptr(), flags) };
    if dir < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 2048];
    let result = loop {
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            break Err(io::Error::last_os_error());
        }
        if n == 0 {
            break Ok(());
        }
        for fd in dirent_numbers(&buf[..n as usize]) {
            if fd >= first && fd != dir {
                // A descriptor that closed since the listing is no concern.
                let _ = cloexec(fd);
            }
        }
    };
    // SAFETY: `dir` is ours, opened above.
    unsafe { libc::close(dir) };
    result
}

/// The last resort: every number from `first` up to the soft descriptor limit
/// (capped: a huge limit must not make a start take seconds).
fn cloexec_up_to_limit(first: RawFd) -> io::Result<()> {
    const CAP: libc::rlim_t = 1 << 16;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own; async-signal-safe.
    let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(CAP)
    } else {
        CAP
    };
    for fd in first..top as RawFd {
        // EBADF for a number that is not open: nothing to do.
        let _ = cloexec(fd);
    }
    Ok(())
}

/// The descriptor numbers named by the `linux_dirent64` records in `buf` (`.` and
/// `..` name none).
fn dirent_numbers(buf: &[u8]) -> impl Iterator<Item = RawFd> + '_ {
    // d_ino (8) d_off (8) d_reclen (2) d_type (1) d_name (NUL-terminated).
    const NAME: usize = 19;
    let mut off = 0usize;
    std::iter::from_fn(move || {
        while off + NAME <= buf.len() {
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            if reclen < NAME || off + reclen > buf.len() {
                return None;
            }
            let name = &buf[off + NAME..off + reclen];
            off += reclen;
            let mut n: RawFd = 0;
            let mut digits = 0;
            for &b in name.iter().take_while(|&&b| b != 0) {
                if !b.is_ascii_digit() {
                    digits = 0;
                    break;
                }
                n = n.saturating_mul(10).saturating_add(RawFd::from(b - b'0'));
                digits += 1;
            }
            if digits > 0 {
                return Some(n);
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::sync::Mutex;

    /// The tests mark ranges of this process's descriptors: one at a time, or one
    /// test's range covers the descriptors another test checks are still unmarked.
    static MARKING: Mutex<()> = Mutex::new(());

    fn is_cloexec(fd: RawFd) -> bool {
        // SAFETY: fcntl on an integer descriptor.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        flags >= 0 && flags & libc::FD_CLOEXEC != 0
    }

    /// A descriptor without close-on-exec, at a number above `min`.
    fn inheritable(min: RawFd) -> std::os::fd::OwnedFd {
        let f = std::fs::File::open("/dev/null").unwrap();
        // SAFETY: F_DUPFD (not _CLOEXEC) of a descriptor we own.
        let raw = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD, min) };
        assert!(raw >= min);
        // SAFETY: just made, owned by nobody else.
        unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) }
    }

    #[test]
    fn every_descriptor_from_the_first_is_marked() {
        let _one = MARKING.lock().unwrap_or_else(|e| e.into_inner());
        let low = inheritable(100);
        let high = inheritable(900);
        assert!(!is_cloexec(low.as_raw_fd()) && !is_cloexec(high.as_raw_fd()));
        cloexec_from(high.as_raw_fd()).unwrap();
        assert!(is_cloexec(high.as_raw_fd()));
        assert!(!is_cloexec(low.as_raw_fd()), "below the first: untouched");
        cloexec_from(low.as_raw_fd()).unwrap();
        assert!(is_cloexec(low.as_raw_fd()));
    }

    #[test]
    fn the_proc_fallback_marks_them_too() {
        let _one = MARKING.lock().unwrap_or_else(|e| e.into_inner());
        let a = inheritable(200);
        let b = inheritable(700);
        cloexec_listed(a.as_raw_fd()).unwrap();
        assert!(is_cloexec(a.as_raw_fd()) && is_cloexec(b.as_raw_fd()));
        let c = inheritable(300);
        cloexec_up_to_limit(c.as_raw_fd()).unwrap();
        assert!(is_cloexec(c.as_raw_fd()));
    }

    #[test]
    fn dirent_records_parse() {
        let mut buf = Vec::new();
        for name in [&b"."[..], b"..", b"3", b"12345"] {
            let reclen = (19 + name.len() + 1).next_multiple_of(8);
            let mut rec = vec![0u8; reclen];
            rec[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
            rec[19..19 + name.len()].copy_from_slice(name);
            buf.extend(rec);
        }
        assert_eq!(dirent_numbers(&buf).collect::<Vec<_>>(), [3, 12345]);
        assert_eq!(
            dirent_numbers(&buf[..10]).count(),
            0,
            "a cut record ends it"
        );
    }
}
