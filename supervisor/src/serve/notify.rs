//! systemd's readiness protocol (`Type=notify`, sd_notify(3)): when `NOTIFY_SOCKET`
//! names a datagram socket — a path, or an abstract name written with a leading `@` —
//! `serve` sends `READY=1` once its socket accepts connections, `RELOADING=1` and
//! `READY=1` around a SIGHUP, and `STOPPING=1` when a drain begins. Without the
//! variable nothing is sent. A failed send is logged once at debug level and otherwise
//! ignored: readiness is a courtesy to the init system, never a reason to stop serving.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Where the init system listens, if it does.
pub struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
}

impl Notifier {
    /// From `NOTIFY_SOCKET` (`None` when unset, empty or unusable).
    pub fn from_env() -> Option<Notifier> {
        let value = std::env::var_os("NOTIFY_SOCKET")?;
        match Notifier::new(&value.to_string_lossy()) {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!("NOTIFY_SOCKET is set but unusable ({e}); not notifying");
                None
            }
        }
    }

    /// A notifier for the address `spec`: `/path` or `@abstract-name`.
    pub fn new(spec: &str) -> std::io::Result<Notifier> {
        let addr = parse_addr(spec)?;
        let socket = UnixDatagram::unbound()?;
        Ok(Notifier { socket, addr })
    }

    /// Send one state message (`KEY=VALUE` lines).
    pub fn send(&self, state: &str) {
        if let Err(e) = self.socket.send_to_addr(state.as_bytes(), &self.addr) {
            tracing::debug!("cannot notify the init system ({state:?}): {e}");
        }
    }
}

/// `READY=1`, with our pid and a status line.
pub fn ready_message(status: &str) -> String {
    format!("READY=1\nMAINPID={}\nSTATUS={status}", std::process::id())
}

/// `RELOADING=1` with the monotonic clock in microseconds (systemd wants it with
/// `Type=notify-reload`; `Type=notify` ignores it).
pub fn reloading_message() -> String {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let usec = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000;
    format!("RELOADING=1\nMONOTONIC_USEC={usec}")
}

/// `/path` is a file system socket, `@name` an abstract one (Linux).
fn parse_addr(spec: &str) -> std::io::Result<SocketAddr> {
    if let Some(name) = spec.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        return SocketAddr::from_abstract_name(name.as_bytes());
    }
    if spec.starts_with('/') {
        return SocketAddr::from_pathname(spec);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("`{spec}` is neither an absolute path nor an @abstract name"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn recv(s: &UnixDatagram) -> String {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 512];
        let n = s.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn path_and_abstract_addresses_receive() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        Notifier::new(path.to_str().unwrap())
            .unwrap()
            .send("READY=1");
        assert_eq!(recv(&listener), "READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("toolvisor-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        Notifier::new(&format!("@{name}"))
            .unwrap()
            .send(&ready_message("serving"));
        let got = recv(&listener);
        assert!(got.starts_with("READY=1\nMAINPID="), "{got}");
    }

    #[test]
    fn other_addresses_are_refused() {
        assert!(Notifier::new("relative/path").is_err());
        assert!(Notifier::new("").is_err());
        assert!(reloading_message().starts_with("RELOADING=1\nMONOTONIC_USEC="));
    }
}
