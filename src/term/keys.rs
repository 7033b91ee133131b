//! Answers from the keyboard. On a terminal, the terminal is opened again as a file of
//! our own (`/proc/self/fd/0`: a new open file description, so making it non-blocking
//! does not touch the shell's) and read through the runtime, so a command can wait
//! for a typed line and for the socket at once, and stop waiting for the line the
//! moment the question is over, leaving nothing half-read. What was typed for a
//! question that is over is thrown away ([`Keys::discard_typed`]): it must neither
//! answer the next question nor reach the shell after we exit.
//!
//! Without a terminal (`yes | toolvisor approve`), a thread reads stdin line by line.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

enum Source {
    Tty { fd: AsyncFd<File>, buf: Vec<u8> },
    Lines(mpsc::Receiver<String>),
}

/// Lines typed (or piped) on stdin.
pub struct Keys {
    source: Source,
}

impl Keys {
    /// The keyboard when stdin is a terminal, else stdin's lines.
    pub fn stdin() -> Keys {
        let source = match open_tty() {
            Some(fd) => Source::Tty {
                fd,
                buf: Vec::new(),
            },
            None => Source::Lines(line_thread()),
        };
        Keys { source }
    }

    /// Throw away what was typed and not yet read (a question is over, or a new one
    /// appears: keystrokes meant for another question must not answer it).
    pub fn discard_typed(&mut self) {
        if let Source::Tty { fd, buf } = &mut self.source {
            buf.clear();
            let _ = nix::sys::termios::tcflush(
                fd.get_ref().as_fd(),
                nix::sys::termios::FlushArg::TCIFLUSH,
            );
        }
    }

    /// The next line, trimmed; `None` at the end of input (Ctrl-D, a closed pipe).
    pub async fn line(&mut self) -> Option<String> {
        match &mut self.source {
            Source::Lines(rx) => rx.recv().await,
            Source::Tty { fd, buf } => loop {
                if let Some(end) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=end).collect();
                    return Some(String::from_utf8_lossy(&line).trim().to_owned());
                }
                let mut guard = fd.readable().await.ok()?;
                let mut chunk = [0u8; 512];
                match guard.try_io(|f| f.get_ref().read(&mut chunk)) {
                    Ok(Ok(0)) => return None,
                    Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Ok(Err(_)) => return None,
                    Err(_would_block) => {}
                }
            },
        }
    }
}

/// Our own non-blocking open of the terminal on stdin (`None` when stdin is not one).
fn open_tty() -> Option<AsyncFd<File>> {
    use std::io::IsTerminal;
    use std::os::unix::fs::OpenOptionsExt;
    if !std::io::stdin().is_terminal() {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open("/proc/self/fd/0")
        .ok()?;
    // SAFETY: the `File` owns its descriptor, which stays open and names the same
    // open file description until the `AsyncFd` (which owns the `File`) is dropped.
    unsafe { AsyncFd::register_with_interest(file, tokio::io::Interest::READABLE) }.ok()
}

/// A thread that reads stdin's lines into a channel (it ends with stdin).
fn line_thread() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(1);
    std::thread::spawn(move || {
        let mut line = String::new();
        loop {
            line.clear();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if tx.blocking_send(line.trim().to_owned()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// The next line from `keys`; never resolves without a keyboard (for `select!`).
pub async fn next_line(keys: &mut Option<Keys>) -> Option<String> {
    match keys {
        Some(k) => k.line().await,
        None => std::future::pending().await,
    }
}
