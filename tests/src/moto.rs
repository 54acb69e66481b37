//! A real S3 emulator for tests: moto from PyPI (`moto[server]`), installed by
//! `tests/setup.sh` into `.deps/moto`, started on a free loopback port per test.
//!
//! moto's own `moto_server` serves requests on many threads, and its conditional put
//! (`If-None-Match: *`) checks and writes without a lock: under load two racing creates of one
//! key can both succeed (seen here: 31 acknowledged rollout revisions, 30 stored). Real S3
//! decides conditional writes atomically, so the tests serve moto's app on one thread
//! ([`SERVE`]), which makes every request atomic, as S3's conditional writes are.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A running emulator, stopped on drop.
pub struct Moto {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    child: Child,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.deps/moto/bin/python")
}

/// Serves moto's S3 app on `argv[1]:argv[2]` with a single-threaded server.
const SERVE: &str = "import sys
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
run_simple(sys.argv[1], int(sys.argv[2]), DomainDispatcherApplication(create_backend_app),
           threaded=False, use_reloader=False)
";

impl Moto {
    /// Starts the emulator and creates `bucket`. Panics with how to install it when missing:
    /// tests/run installs it, and a missing emulator must fail, not skip.
    pub fn start(bucket: &str) -> Moto {
        let bin = binary();
        assert!(
            bin.is_file(),
            "{} is missing: run tests/setup.sh (tests/run does) to install moto[server]",
            bin.display()
        );
        let addr = crate::emulator::free_addr();
        let child = Command::new(&bin)
            .args(["-c", SERVE, "127.0.0.1", &addr.port().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        let moto = Moto {
            endpoint: format!("http://{addr}"),
            child,
        };
        crate::emulator::wait_listening(addr, "moto_server");
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        let status = agent
            .put(format!("{}/{bucket}", moto.endpoint))
            .send_empty()
            .expect("create bucket")
            .status();
        assert!(status.is_success(), "creating bucket {bucket}: {status}");
        moto
    }

    /// Freezes the emulator (SIGSTOP): connections are accepted by the kernel but nothing
    /// answers, as with a store that hangs. Its data stays.
    pub fn pause(&self) {
        crate::emulator::signal(self.child.id(), "-STOP", "moto");
    }

    /// Thaws it (SIGCONT).
    pub fn resume(&self) {
        crate::emulator::signal(self.child.id(), "-CONT", "moto");
    }

    /// A storage config for `bucket` on this emulator.
    pub fn storage(&self, bucket: &str) -> ferry_server::storage::config::StorageConfig {
        ferry_server::storage::config::StorageConfig::S3 {
            bucket: bucket.to_string(),
            endpoint: Some(self.endpoint.clone()),
            region: "us-east-1".into(),
            allow_http: true,
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
        }
    }
}
