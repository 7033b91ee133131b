//! A command on a pseudo-terminal, as a person runs it: its stdin, stdout and stderr
//! are the terminal (its controlling one, in a session of its own, so Ctrl-C is a
//! SIGINT), and what it writes is fed to a terminal model (`vt100`), so a test reads
//! the screen a person would see — a line rewritten in place or erased is gone — as
//! well as the raw bytes. Every wait has a deadline.

#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::num::NonZeroU16;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{BIN, wait_child};

pub const ROWS: u16 = 40;
pub const COLS: u16 = 120;

struct Screen {
    parser: vt100::Parser,
    raw: Vec<u8>,
    closed: bool,
}

/// `toolvisor` running on a terminal.
pub struct Pty {
    child: Option<Child>,
    master: File,
    screen: Arc<(Mutex<Screen>, Condvar)>,
}

impl Pty {
    /// `toolvisor ARGS…` in `dir` on a fresh terminal of [`ROWS`]×[`COLS`].
    pub fn spawn(dir: &Path, args: &[&str]) -> Pty {
        let size = nix::pty::Winsize {
            ws_row: ROWS,
            ws_col: COLS,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
        let slave: OwnedFd = pty.slave;
        let mut cmd = Command::new(BIN);
        cmd.current_dir(dir)
            .args(args)
            .env("TERM", "xterm")
            .stdin(Stdio::from(slave.try_clone().expect("dup")))
            .stdout(Stdio::from(slave.try_clone().expect("dup")))
            .stderr(Stdio::from(slave));
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn toolvisor on a pty");
        // Our copies of the slave are gone with `cmd`'s Stdio: once the child exits,
        // reading the master ends.
        drop(cmd);
        let master = File::from(pty.master);
        let rows = NonZeroU16::new(ROWS).expect("rows");
        let cols = NonZeroU16::new(COLS).expect("cols");
        let screen = Arc::new((
            Mutex::new(Screen {
                parser: vt100::Parser::new(rows, cols, 0),
                raw: Vec::new(),
                closed: false,
            }),
            Condvar::new(),
        ));
        let reader = master.try_clone().expect("dup master");
        let shared = screen.clone();
        std::thread::spawn(move || read_loop(reader, shared));
        Pty {
            child: Some(child),
            master,
            screen,
        }
    }

    /// Type `bytes` (a `\r` is Enter, `\x03` Ctrl-C).
    pub fn send(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).expect("write to the pty");
    }

    /// The screen as a person sees it now.
    pub fn screen(&self) -> String {
        let (lock, _) = &*self.screen;
        lock.lock().expect("screen").parser.screen().contents()
    }

    /// Every byte written so far, escape sequences included.
    pub fn raw(&self) -> String {
        let (lock, _) = &*self.screen;
        String::from_utf8_lossy(&lock.lock().expect("screen").raw).into_owned()
    }

    /// Wait until `ok(screen, raw)` holds; the screen then.
    pub fn wait_for(
        &self,
        what: &str,
        deadline: Duration,
        ok: impl Fn(&str, &str) -> bool,
    ) -> String {
        let end = Instant::now() + deadline;
        let (lock, cv) = &*self.screen;
        let mut s = lock.lock().expect("screen");
        loop {
            let screen = s.parser.screen().contents();
            if ok(&screen, &String::from_utf8_lossy(&s.raw)) {
                return screen;
            }
            let left = end.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero() && !s.closed,
                "{what}: not seen within {deadline:?} (terminal closed: {}); screen:\n{screen}",
                s.closed
            );
            s = cv.wait_timeout(s, left).expect("screen").0;
        }
    }

    /// Wait until the screen shows `needle`.
    pub fn wait_screen(&self, needle: &str, deadline: Duration) -> String {
        self.wait_for(needle, deadline, |screen, _| screen.contains(needle))
    }

    /// Wait for the command to exit, and for the terminal to have shown everything it
    /// wrote (the reader reaches the end once the last writer is gone).
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("still running");
        let status = wait_child(&mut child, deadline).unwrap_or_else(|| {
            let _ = child.kill();
            panic!(
                "did not exit within {deadline:?}; screen:\n{}",
                self.screen()
            )
        });
        let end = Instant::now() + deadline;
        let (lock, cv) = &*self.screen;
        let mut s = lock.lock().expect("screen");
        while !s.closed {
            let left = end.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "the terminal did not close after the exit");
            s = cv.wait_timeout(s, left).expect("screen").0;
        }
        status
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn read_loop(mut master: File, shared: Arc<(Mutex<Screen>, Condvar)>) {
    let mut buf = [0u8; 4096];
    loop {
        // EIO once the last process holding the terminal is gone.
        let n = master.read(&mut buf).unwrap_or(0);
        let (lock, cv) = &*shared;
        let Ok(mut s) = lock.lock() else { return };
        if n == 0 {
            s.closed = true;
            cv.notify_all();
            return;
        }
        s.parser.process(&buf[..n]);
        s.raw.extend_from_slice(&buf[..n]);
        cv.notify_all();
    }
}
