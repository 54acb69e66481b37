//! A real Azure Blob Storage emulator for tests: Azurite from npm (`azurite`), installed by
//! `tests/setup.sh` into `.deps/azurite` from the lockfile in `tests/azurite/`, started on a
//! free loopback port per test with its own folder, telemetry off.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Azurite's well-known development account.
pub const ACCOUNT: &str = "devstoreaccount1";
/// Its well-known key (public: it is the same in every Azurite).
pub const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A running Azurite blob service; stopped when dropped.
pub struct Azurite {
    /// `http://127.0.0.1:<port>/devstoreaccount1`.
    pub endpoint: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.deps/azurite/node_modules/.bin/azurite-blob")
}

impl Azurite {
    /// Starts the emulator and creates `container`. Panics with how to install it when
    /// missing: tests/run installs it, and a missing emulator must fail, not skip.
    pub fn start(container: &str) -> Azurite {
        let bin = binary();
        assert!(
            bin.is_file(),
            "{} is missing: run tests/setup.sh (tests/run does) to install azurite",
            bin.display()
        );
        let addr = crate::emulator::free_addr();
        let dir = tempfile::tempdir().expect("tmp");
        let child = Command::new(&bin)
            .args([
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                &addr.port().to_string(),
            ])
            .arg("--location")
            .arg(dir.path())
            .args(["--silent", "--disableTelemetry", "--skipApiVersionCheck"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start azurite-blob");
        let az = Azurite {
            endpoint: format!("http://{addr}/{ACCOUNT}"),
            child,
            _dir: dir,
        };
        crate::emulator::wait_listening(addr, "azurite");
        az.create_container(container);
        az
    }

    /// Creates `container` (Put Container, signed with the account key).
    fn create_container(&self, container: &str) {
        use base64::Engine as _;
        use hmac::{KeyInit as _, Mac as _};
        let date = httpdate(std::time::SystemTime::now());
        let version = "2021-08-06";
        // Shared Key: verb, eleven empty standard headers, the x-ms headers, the resource.
        let to_sign = format!(
            "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{ACCOUNT}/{ACCOUNT}/{container}\nrestype:container"
        );
        let key = base64::engine::general_purpose::STANDARD
            .decode(KEY)
            .expect("key");
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).expect("hmac");
        mac.update(to_sign.as_bytes());
        let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        let mut resp = agent
            .put(format!("{}/{container}?restype=container", self.endpoint))
            .header("x-ms-date", &date)
            .header("x-ms-version", version)
            .header("Authorization", &format!("SharedKey {ACCOUNT}:{sig}"))
            .send_empty()
            .expect("create container");
        let status = resp.status();
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        assert!(
            status.is_success(),
            "creating container {container}: {status}: {body}"
        );
    }

    /// Freezes the emulator (SIGSTOP): connections are accepted but nothing answers.
    pub fn pause(&self) {
        crate::emulator::signal(self.child.id(), "-STOP", "azurite");
    }

    /// Thaws it (SIGCONT).
    pub fn resume(&self) {
        crate::emulator::signal(self.child.id(), "-CONT", "azurite");
    }

    /// A storage config for `container` on this emulator.
    pub fn storage(&self, container: &str) -> ferry_server::storage::config::StorageConfig {
        ferry_server::storage::config::StorageConfig::Azure {
            container: container.to_string(),
            account: ACCOUNT.to_string(),
            endpoint: Some(self.endpoint.clone()),
            allow_http: true,
            access_key: Some(KEY.to_string()),
        }
    }
}

/// An HTTP date (RFC 7231, always GMT).
fn httpdate(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t = time::OffsetDateTime::from_unix_timestamp(secs as i64).expect("time");
    let weekday = &t.weekday().to_string()[..3];
    let month = &t.month().to_string()[..3];
    format!(
        "{weekday}, {:02} {month} {} {:02}:{:02}:{:02} GMT",
        t.day(),
        t.year(),
        t.hour(),
        t.minute(),
        t.second()
    )
}
