//! What the storage emulators (moto, Azurite) have in common: a free loopback port, waiting
//! until the emulator listens, and freezing or thawing its process.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// A free loopback address to start an emulator on.
pub(crate) fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
}

/// Waits (up to about a minute) until something listens on `addr`.
pub(crate) fn wait_listening(addr: SocketAddr, what: &str) {
    let mut waited = 0;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
        assert!(waited < 300, "{what} did not start");
    }
}

/// Sends `sig` (`-STOP`, `-CONT`) to process `pid` with the shell's own `kill` (no procps
/// needed).
pub(crate) fn signal(pid: u32, sig: &str, what: &str) {
    let status = std::process::Command::new("sh")
        .args(["-c", &format!("kill {sig} {pid}")])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {sig} {what}");
}
