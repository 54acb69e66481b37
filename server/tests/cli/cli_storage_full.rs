//! A full store (issue 35): the local store on a file system with no room answers a publish
//! with 507 `storage_full` naming the store, the server log has the cause with the request id
//! the answer carries, and once there is room the same publish succeeds.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{TOKEN, ferry};

/// Unmounts on drop.
struct Mount<'a>(&'a Path);

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0).status();
    }
}

#[test]
fn a_full_store_answers_507_naming_it_and_logs_the_cause() {
    let s = common::setup("full");
    let store = s.data.join("store");
    std::fs::create_dir_all(&store).expect("store dir");
    // A 4 KiB file system under the store: the 6 KiB program does not fit.
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4k", "tmpfs"])
        .arg(&store)
        .status()
        .expect("run mount");
    assert!(
        status.success(),
        "mounting a small tmpfs needs root (CI and the dev machines run as root)"
    );
    let guard = Mount(&store);
    let (server, log) = common::serve_logged(&s.data, None, "info");
    let out = ferry()
        .arg("publish")
        .arg(&s.v1)
        .arg("--files")
        .arg(&s.files)
        .args(["--server", &server.url, "--token", TOKEN, "--json"])
        .output()
        .expect("run publish");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    let said = format!("{stdout}\n{stderr}");
    assert!(said.contains("storage_full"), "{said}");
    assert!(said.contains("507"), "{said}");
    assert!(
        said.contains(&format!("the local store at {}", store.display())),
        "{said}"
    );
    // The log has the cause, at error level, with the answer's request id.
    let id = said
        .split("request ")
        .nth(1)
        .or_else(|| said.split("request_id\": \"").nth(1))
        .and_then(|r| {
            r.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .next()
        })
        .unwrap_or_default()
        .to_string();
    assert!(!id.is_empty(), "no request id in {said}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let lines = log.lock().expect("log").clone();
    let cause = lines
        .iter()
        .find(|l| l.contains(&id) && l.contains("storage_full"))
        .unwrap_or_else(|| panic!("no log line for {id}: {lines:#?}"));
    assert!(
        cause.contains("ERROR") && cause.contains("No space left on device"),
        "{cause}"
    );
    // Room again: the same publish goes through.
    drop(server);
    drop(guard);
    let server = common::serve(&s.data);
    let ok = common::run_ok(
        ferry()
            .arg("publish")
            .arg(&s.v1)
            .arg("--files")
            .arg(&s.files)
            .args(["--server", &server.url, "--token", TOKEN, "--quiet"]),
    );
    assert!(ok.contains("published full 1.0.0"), "{ok}");
}
