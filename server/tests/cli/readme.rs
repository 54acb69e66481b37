//! The README's "Quick start" and "Publishing a model" run as written, on a clean data
//! directory: the server command of the quick start, then every other shell block of both
//! sections in one bash (`set -euo pipefail`), in a fresh folder that sees the repository's
//! `tests/fixtures`. Two substitutions only: the `cargo` commands become the binary this test
//! was built with (a release build would take minutes), and port 8080 a free one.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The fenced `sh` blocks of the README section headed `heading`.
fn blocks(readme: &str, heading: &str) -> Vec<String> {
    let start = readme
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading}"));
    let rest = &readme[start + heading.len() + 5..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    section
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("\n```").next().expect("closed block").to_string())
        .collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

#[test]
fn the_quick_start_and_publishing_sections_run_as_written() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let quick = blocks(&readme, "Quick start");
    let publishing = blocks(&readme, "Publishing a model");
    assert_eq!(quick.len(), 3, "server, try it, tests: {quick:?}");
    assert_eq!(publishing.len(), 1, "{publishing:?}");

    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ferry"));
    let bin_dir = bin.parent().expect("bin dir").to_path_buf();
    let work = tempfile::tempdir().expect("tmp");
    std::os::unix::fs::symlink(root.join("tests"), work.path().join("tests")).expect("symlink");
    let port = free_port();
    let subst = |text: &str| {
        text.replace(
            "cargo run --release -p ferry-server --",
            &bin.display().to_string(),
        )
        .replace(
            "cargo build --release -p ferry-server && export PATH=\"$PWD/target/release:$PATH\"",
            &format!("export PATH=\"{}:$PATH\"", bin_dir.display()),
        )
        .replace("localhost:8080", &format!("localhost:{port}"))
    };

    // Terminal one: the server, exactly the README's command (no FERRY_ADMIN_TOKEN).
    let server_cmd = subst(quick[0].trim());
    assert!(
        server_cmd.ends_with("serve --demo") && !server_cmd.contains("cargo"),
        "{server_cmd}"
    );
    let mut server = Command::new("bash")
        .args(["-c", &format!("exec {server_cmd}")])
        .current_dir(work.path())
        .env("FERRY_LISTEN", format!("127.0.0.1:{port}"))
        .env_remove("FERRY_ADMIN_TOKEN")
        .env_remove("FERRY_TOKEN")
        .env_remove("FERRY_SERVER")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the server");
    let stderr = server.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut said = Vec::new();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the server stopped: {said:?}"))
            .expect("read");
        let listening = line.starts_with("ferry: listening on ");
        said.push(line);
        if listening {
            break;
        }
    }
    // It says where the admin token is and what to run next.
    for _ in 0..3 {
        if let Some(Ok(l)) = lines.next() {
            said.push(l);
        }
    }
    std::thread::spawn(move || for _ in lines {});
    assert!(
        said.iter()
            .any(|l| l.contains("admin-token") && l.contains("FERRY_TOKEN=")),
        "{said:?}"
    );

    // Terminal two: the rest of the quick start, then the publishing section.
    let script = format!(
        "set -euo pipefail\n{}\n{}\n",
        subst(&quick[1]),
        subst(&publishing[0])
    );
    assert!(!script.contains("cargo "), "{script}");
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(work.path())
        .env_remove("FERRY_ADMIN_TOKEN")
        .env_remove("FERRY_TOKEN")
        .env_remove("FERRY_SERVER")
        .output()
        .expect("run the README");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "{script}\n---\n{stdout}\n---\n{stderr}"
    );
    // What each step should have shown.
    assert!(
        stdout.contains("vulkan-fp32 0"),
        "the Vulkan variant first: {stdout}"
    );
    assert!(
        stdout.contains("coreml-fp32 - platform android"),
        "{stdout}"
    );
    assert!(
        stdout.contains("model.pte"),
        "the blob was fetched and hashed: {stdout}"
    );
    assert!(work.path().join("model.pte").is_file());
    assert!(stdout.contains("VulkanBackend"), "inspect: {stdout}");
    assert!(stdout.contains("signed demo-mlp 1.1.0"), "{stdout}");
    assert!(stdout.contains("published demo-mlp 1.1.0"), "{stdout}");
    assert!(stdout.contains("1.1.0"), "{stdout}");
    assert!(stdout.contains("staged 1.1.0 at 5%"), "{stdout}");
    assert!(
        Path::new(&work.path().join("ferry-data/admin-token")).is_file(),
        "the demo's token file"
    );
}
