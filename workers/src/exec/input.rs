//! A process's input: the write end of its standard-input pipe, or the master side of
//! its terminal. Writes never block the worker (non-blocking descriptors on the
//! runtime), and a write to a process that does not read gives up after a while
//! instead of holding the call (and the data) for ever.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::time::Instant;

use crate::CancelFlag;

/// The terminal's end-of-file character (Ctrl-D, `VEOF` of a terminal as it starts).
const EOF_CHAR: u8 = 0x04;

/// Where a process's input goes.
#[derive(Debug)]
pub(crate) enum Input {
    Pipe(pipe::Sender),
    Terminal(Terminal),
}

/// The master side of a process's terminal, for writing and resizing.
#[derive(Debug)]
pub(crate) struct Terminal {
    tx: pipe::Sender,
    /// Whether the last byte typed ended a line (then one Ctrl-D is end-of-file).
    at_line_start: bool,
}

/// How a write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteEnd {
    /// Everything was written.
    Done,
    /// The process took nothing for the stall time.
    Stalled,
    /// Nobody reads any more: the process closed its input or ended.
    Closed,
    /// The call's deadline passed, or it was cancelled.
    Stopped,
}

impl Terminal {
    /// Take the master side (made non-blocking here); also returns a second descriptor
    /// of it for reading the output.
    pub(crate) fn new(master: OwnedFd) -> std::io::Result<(Terminal, OwnedFd)> {
        rustix::io::ioctl_fionbio(&master, true)?;
        let reader = master.try_clone()?;
        let tx = pipe::Sender::from_owned_fd_unchecked(master)?;
        Ok((
            Terminal {
                tx,
                at_line_start: true,
            },
            reader,
        ))
    }

    /// Set the terminal's size; the kernel tells the foreground process group
    /// (SIGWINCH).
    pub(crate) fn resize(&self, rows: u16, cols: u16) -> std::io::Result<()> {
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: a valid descriptor and a valid winsize for the duration of the call.
        let r = unsafe { libc::ioctl(self.tx.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

impl Input {
    fn sender(&self) -> &pipe::Sender {
        match self {
            Input::Pipe(p) => p,
            Input::Terminal(t) => &t.tx,
        }
    }

    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self, Input::Terminal(_))
    }

    /// Write `data`; returns how much was written and why it stopped. Gives up when
    /// the process takes nothing for `stall` (None: never), at `until`, or on `cancel`.
    pub(crate) async fn write(
        &mut self,
        data: &[u8],
        until: Option<Instant>,
        stall: Option<Duration>,
        cancel: &CancelFlag,
    ) -> (usize, WriteEnd) {
        let mut done = 0;
        let mut progress = Instant::now();
        let end = loop {
            if done == data.len() {
                break WriteEnd::Done;
            }
            let stall_at = stall.map(|s| progress + s);
            let limit = match (until, stall_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let ready = tokio::select! {
                r = self.sender().writable() => r.is_ok(),
                _ = super::launch::sleep_until_opt(limit) => {
                    break if stall_at.is_some_and(|s| Instant::now() >= s) {
                        WriteEnd::Stalled
                    } else {
                        WriteEnd::Stopped
                    };
                }
                _ = cancel.cancelled() => break WriteEnd::Stopped,
            };
            if !ready {
                break WriteEnd::Closed;
            }
            match self.sender().try_write(&data[done..]) {
                Ok(n) => {
                    done += n;
                    progress = Instant::now();
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break WriteEnd::Closed,
            }
        };
        if let (Input::Terminal(t), Some(&last)) = (&mut *self, data[..done].last()) {
            t.at_line_start = last == b'\n' || last == b'\r';
        }
        (done, end)
    }

    /// End the input: a terminal gets end-of-file typed (Ctrl-D; twice after an
    /// unfinished line, whose first one only hands the line over); a pipe's write end
    /// is closed by dropping this.
    pub(crate) async fn end(&mut self, until: Option<Instant>, cancel: &CancelFlag) -> WriteEnd {
        let eof: &[u8] = match self {
            Input::Pipe(_) => return WriteEnd::Done,
            Input::Terminal(t) if t.at_line_start => &[EOF_CHAR],
            Input::Terminal(_) => &[EOF_CHAR, EOF_CHAR],
        };
        let stall = Some(Duration::from_secs(5));
        let (_, end) = self.write(eof, until, stall, cancel).await;
        if let Input::Terminal(t) = self {
            t.at_line_start = true;
        }
        end
    }
}

/// A command's input as its job holds it: `write_input` calls (and the writing of
/// `run_command`'s `stdin`) take turns; None once it can no longer be written.
pub(crate) type SharedInput = Arc<tokio::sync::Mutex<Option<Input>>>;

/// What [`prepare`] made of a command's input.
pub(crate) struct Prepared {
    pub input: SharedInput,
    /// Whether `write_input` may write to it.
    pub open: bool,
    /// The task writing `run_command`'s `stdin`, if it was given.
    pub feeder: Option<tokio::task::JoinHandle<()>>,
}

/// Set up a command's input. With `stdin`, a task writes it and then ends the input:
/// a pipe is closed (and no longer writable), a terminal gets end-of-file typed and
/// stays writable, `write_input` calls waiting behind the task.
pub(crate) fn prepare(input: Option<Input>, stdin: Option<&str>, cancel: &CancelFlag) -> Prepared {
    let data = stdin.map(|s| s.as_bytes().to_vec());
    match (input, data) {
        (None, _) => Prepared {
            input: Arc::default(),
            open: false,
            feeder: None,
        },
        (Some(Input::Pipe(p)), Some(data)) => Prepared {
            input: Arc::default(),
            open: false,
            feeder: Some(tokio::spawn(feed(Input::Pipe(p), data, cancel.clone()))),
        },
        (Some(input), None) => Prepared {
            input: Arc::new(tokio::sync::Mutex::new(Some(input))),
            open: true,
            feeder: None,
        },
        (Some(term), Some(data)) => {
            let shared: SharedInput = Arc::new(tokio::sync::Mutex::new(Some(term)));
            // Taken now, before anyone else can: the data goes in first.
            let guard = Arc::clone(&shared).try_lock_owned();
            let cancel = cancel.clone();
            let feeder = guard.ok().map(|mut slot| {
                tokio::spawn(async move {
                    if let Some(input) = slot.as_mut() {
                        let (_, end) = input.write(&data, None, None, &cancel).await;
                        if end == WriteEnd::Done {
                            input.end(None, &cancel).await;
                        }
                    }
                })
            });
            Prepared {
                input: shared,
                open: true,
                feeder,
            }
        }
    }
}

/// A pipe for a command's standard input: the read end for the command, the write end
/// for the worker.
pub(crate) fn stdin_pipe() -> std::io::Result<(OwnedFd, pipe::Sender)> {
    let (read, write) = std::io::pipe()?;
    let tx = pipe::Sender::from_owned_fd(OwnedFd::from(write))?;
    Ok((OwnedFd::from(read), tx))
}

/// Write all of `data` to a command's input and end it (`run_command`'s `stdin`), in
/// the background of the call: until the command stops reading (it ended, or closed
/// its input), or `cancel`.
pub(crate) async fn feed(mut input: Input, data: Vec<u8>, cancel: CancelFlag) {
    let (_, end) = input.write(&data, None, None, &cancel).await;
    if end == WriteEnd::Done {
        input.end(None, &cancel).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reader_that_never_reads_stalls_the_write_not_the_worker() {
        let (read, tx) = stdin_pipe().unwrap();
        let mut input = Input::Pipe(tx);
        let data = vec![b'x'; 4 << 20];
        let t0 = std::time::Instant::now();
        let (n, end) = input
            .write(
                &data,
                None,
                Some(Duration::from_millis(200)),
                &CancelFlag::new(),
            )
            .await;
        assert_eq!(end, WriteEnd::Stalled);
        assert!(n > 0 && n < data.len(), "{n}");
        assert!(t0.elapsed() < Duration::from_secs(10));
        drop(read);
        let (_, end) = input.write(b"more", None, None, &CancelFlag::new()).await;
        assert_eq!(end, WriteEnd::Closed, "no reader left");
    }

    #[tokio::test]
    async fn a_terminal_gets_end_of_file_at_the_start_of_a_line() {
        let (master, slave) = toolvisor_sandbox::reap::control::open_terminal(24, 80).unwrap();
        let (term, _reader) = Terminal::new(master).unwrap();
        term.resize(40, 120).unwrap();
        // SAFETY: an all-zero winsize is valid; TIOCGWINSZ fills it.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and pointer.
        assert_eq!(
            unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) },
            0
        );
        assert_eq!((ws.ws_row, ws.ws_col), (40, 120));
        let mut input = Input::Terminal(term);
        let c = CancelFlag::new();
        let (n, end) = input.write(b"abc", None, None, &c).await;
        assert_eq!((n, end), (3, WriteEnd::Done));
        assert_eq!(input.end(None, &c).await, WriteEnd::Done);
        // The slave reads the line, then end-of-file.
        let mut buf = [0u8; 16];
        let n = nix::unistd::read(&slave, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"abc");
        let n = nix::unistd::read(&slave, &mut buf).unwrap();
        assert_eq!(n, 0, "end of file");
    }
}
