//! Keys outside files, for the signer tests: a SoftHSM2 token in a temporary folder (its own
//! `SOFTHSM2_CONF`, keys made with opensc's `pkcs11-tool`), an `exec:` signer of the tests' own
//! (a shell script around the openssl CLI holding a P-256 key), and the real `ferry` binary to
//! drive them as an operator would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The PKCS#11 library Debian's softhsm2 installs.
pub const SOFTHSM_MODULE: &str = "/usr/lib/softhsm/libsofthsm2.so";
/// The user PIN of every test token.
pub const PIN: &str = "4321";

/// The `ferry` binary of this build (cargo builds it for the workspace's tests; built here when
/// it is missing).
pub fn ferry() -> Command {
    let exe = std::env::current_exe().expect("test binary");
    // target/<profile>/deps/<test> -> target/<profile>/ferry
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("ferry"))
        .expect("target folder");
    if !bin.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "ferry-server", "--bin", "ferry"])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .status()
            .expect("cargo build");
        assert!(status.success(), "cannot build the ferry binary");
    }
    Command::new(bin)
}

/// A SoftHSM2 token store in a temporary folder, with one initialised token.
pub struct SoftHsm {
    /// Holds the configuration, the token store and the PIN file.
    pub dir: tempfile::TempDir,
    /// The token's label.
    pub label: String,
}

impl SoftHsm {
    /// Initialises a token labelled `label` (user PIN [`PIN`]).
    pub fn new(label: &str) -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(dir.path().join("tokens")).expect("mkdir");
        std::fs::write(
            dir.path().join("softhsm2.conf"),
            format!(
                "directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n",
                dir.path().join("tokens").display()
            ),
        )
        .expect("conf");
        std::fs::write(dir.path().join("pin"), format!("{PIN}\n")).expect("pin");
        let hsm = SoftHsm {
            dir,
            label: label.to_string(),
        };
        hsm.run(Command::new("softhsm2-util").args([
            "--init-token",
            "--free",
            "--label",
            label,
            "--so-pin",
            "87654321",
            "--pin",
            PIN,
        ]));
        hsm
    }

    /// Sets this token store's configuration on `cmd`.
    pub fn env<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.env("SOFTHSM2_CONF", self.dir.path().join("softhsm2.conf"))
    }

    fn run(&self, cmd: &mut Command) -> Output {
        let out = self.env(cmd).output().expect("run");
        assert!(
            out.status.success(),
            "{cmd:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Makes a key pair labelled `label` in the token, inside it: `kind` is
    /// `EC:edwards25519` or `EC:prime256v1`.
    pub fn keygen(&self, label: &str, id: &str, kind: &str) {
        self.run(Command::new("pkcs11-tool").args([
            "--module",
            SOFTHSM_MODULE,
            "--token-label",
            &self.label,
            "--login",
            "--pin",
            PIN,
            "--keypairgen",
            "--key-type",
            kind,
            "--label",
            label,
            "--id",
            id,
        ]));
    }

    /// The URI of key `object`, its PIN read from a file.
    pub fn uri(&self, object: &str) -> String {
        format!(
            "pkcs11:token={};object={object}?module-path={SOFTHSM_MODULE}&pin-source=file:{}",
            self.label,
            self.dir.path().join("pin").display()
        )
    }

    /// The URI of key `object` with `pin` given inline.
    pub fn uri_with_pin(&self, object: &str, pin: &str) -> String {
        format!(
            "pkcs11:token={};object={object}?module-path={SOFTHSM_MODULE}&pin-value={pin}",
            self.label
        )
    }
}

/// Makes a new P-256 key with openssl at `path` (PEM).
pub fn p256_pem(path: &Path) {
    let out = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
        ])
        .arg(path)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An `exec:` signer of the tests' own: `tests/signers/openssl-p256.sh` with a new P-256 key
/// made by openssl in `dir`. Returns the `exec:` URI.
pub fn openssl_p256_signer(dir: &Path) -> String {
    let key = dir.join("signer-p256.pem");
    p256_pem(&key);
    format!(
        "exec:/bin/sh {} {}",
        script("openssl-p256.sh").display(),
        key.display()
    )
}

/// A script under `tests/signers/`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("signers")
        .join(name)
}

/// Every file under `dir` (relative paths), sorted.
pub fn files_under(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).expect("under").display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}
