//! A real Varnish in front of a test server, as a CDN or a site cache is: Debian's `varnish`
//! (tests/setup.sh installs it) running the configuration operators are given,
//! `deploy/cdn/varnish.vcl`, with only the backend's port changed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running Varnish, stopped when dropped.
#[derive(Debug)]
pub struct Varnish {
    child: Child,
    /// Where clients reach it (`http://127.0.0.1:<port>`).
    pub url: String,
    dir: tempfile::TempDir,
}

/// A binary from `/usr/sbin` or `/usr/bin` (not on every user's `PATH`), else by name.
fn binary(name: &str) -> PathBuf {
    for d in ["/usr/sbin", "/usr/bin"] {
        let p = Path::new(d).join(name);
        if p.is_file() {
            return p;
        }
    }
    PathBuf::from(name)
}

/// The configuration operators are given.
pub fn shipped_vcl() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/cdn/varnish.vcl")
}

impl Varnish {
    /// Starts Varnish on a free loopback port in front of the ferry server at `backend`
    /// (`127.0.0.1:<port>`), with `deploy/cdn/varnish.vcl`.
    pub fn in_front_of(backend: std::net::SocketAddr) -> Varnish {
        let dir = tempfile::tempdir().expect("varnish dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let vcl = std::fs::read_to_string(shipped_vcl()).expect("deploy/cdn/varnish.vcl");
        let vcl = vcl
            .replace(
                ".host = \"127.0.0.1\";",
                &format!(".host = \"{}\";", backend.ip()),
            )
            .replace(
                ".port = \"8080\";",
                &format!(".port = \"{}\";", backend.port()),
            );
        let path = dir.path().join("ferry.vcl");
        std::fs::write(&path, vcl).expect("vcl");
        let mut command = Command::new(binary("varnishd"));
        // Its own process group: the manager and the cache process it starts go together.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command
            .args(["-F", "-j", "none", "-n"])
            .arg(dir.path().join("work"))
            .args(["-a", &format!("127.0.0.1:{port}"), "-f"])
            .arg(&path)
            .args(["-s", "malloc,256m"])
            // Counters folded into the shared ones after every job, for the tests to read.
            .args(["-p", "thread_stats_rate=1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("varnishd is needed for this test; tests/setup.sh installs varnish");
        let v = Varnish {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        };
        let until = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < until,
                "varnishd did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        v
    }

    /// Varnish's own counter `name` (`MAIN.cache_hit`, `MAIN.cache_miss`, `MAIN.s_pass`…), read
    /// with `varnishstat`.
    pub fn counter(&self, name: &str) -> u64 {
        let out = Command::new(binary("varnishstat"))
            .arg("-n")
            .arg(self.dir.path().join("work"))
            .args(["-1", "-f", name])
            .output()
            .expect("varnishstat");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in varnishstat: {text}"))
    }
}

impl Varnish {
    /// Counter `name` once it is at least `min` (Varnish folds its workers' counts into the
    /// shared ones after their jobs; this waits up to 20 s for that), panicking otherwise.
    pub fn counter_at_least(&self, name: &str, min: u64) -> u64 {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let v = self.counter(name);
            if v >= min {
                return v;
            }
            assert!(Instant::now() < until, "{name} stays at {v}, below {min}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Varnish {
    fn drop(&mut self) {
        // The group: the manager and its cache process.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
