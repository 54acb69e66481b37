//! An external signer: `exec:COMMAND ARGS…` (split on spaces, run without a shell).
//!
//! The protocol (docs/keys.md):
//! - `COMMAND ARGS… public-key` prints the public key as PEM (SubjectPublicKeyInfo) on
//!   standard output: an Ed25519 or a P-256 key.
//! - `COMMAND ARGS… sign` reads the whole message to sign (the DSSE pre-authentication
//!   encoding) on standard input and prints the signature in base64 on standard output: the 64
//!   bytes for Ed25519; for P-256 the DER a KMS returns (the fixed 64-byte `r ‖ s` is taken too).
//! - Exit status 0 means done; anything else is a failure, and its standard error is shown.
//!
//! A program that cannot be started is unreachable (exit 7); one that runs longer than
//! [`TIMEOUT`] (or `FERRY_SIGNER_TIMEOUT_SECS`, 1 to 3600) is stopped with everything it started (it runs in a process group of its own) and
//! reported as unreachable too. Output past [`MAX_OUTPUT`] bytes is an error. A program that
//! exits without reading its input is judged by its exit status (the closed pipe is not an
//! error of ferry's). It does not inherit ferry's own secrets (`FERRY_TOKEN`,
//! `FERRY_ADMIN_TOKEN`, `FERRY_KEY_PASSPHRASE`, `FERRY_PKCS11_PIN`).

use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use ferry_shared::trust::key::{Algorithm, PublicKey};

use super::source::{Signer, SignerError, SignerErrorKind};

/// How long a signer may take by default (a person may have to touch a hardware key).
pub const TIMEOUT: Duration = Duration::from_secs(300);

/// How long a signer may take: `FERRY_SIGNER_TIMEOUT_SECS` when it holds 1 to 3600, else
/// [`TIMEOUT`].
fn timeout() -> Duration {
    std::env::var("FERRY_SIGNER_TIMEOUT_SECS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| (1..=3600).contains(s))
        .map_or(TIMEOUT, Duration::from_secs)
}
/// Most bytes read from a signer's standard output or error.
pub const MAX_OUTPUT: usize = 64 << 10;

/// A signer program.
#[derive(Debug)]
pub struct ExecSigner {
    argv: Vec<String>,
    public: PublicKey,
}

impl ExecSigner {
    /// Parses `COMMAND ARGS…` and asks the program for its public key.
    pub fn open(rest: &str) -> Result<Self, SignerError> {
        let argv: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
        if argv.is_empty() {
            return Err(SignerError::new(
                SignerErrorKind::Failed,
                "exec: names no command (exec:COMMAND ARGS…)",
            ));
        }
        let out = run(&argv, "public-key", &[])?;
        let pem = String::from_utf8_lossy(&out);
        let public = super::source::public_from_pem(&pem).map_err(|why| {
            SignerError::new(
                SignerErrorKind::Failed,
                format!(
                    "{} public-key printed {}: {why}",
                    describe(&argv),
                    snippet(&out)
                ),
            )
        })?;
        Ok(ExecSigner { argv, public })
    }
}

fn describe(argv: &[String]) -> String {
    format!("exec:{}", argv.join(" "))
}

/// The start of what a program printed, for an error message.
fn snippet(out: &[u8]) -> String {
    let text = String::from_utf8_lossy(&out[..out.len().min(120)]);
    if text.trim().is_empty() {
        "nothing".to_string()
    } else {
        format!("{:?}", text.trim())
    }
}

/// Reads at most [`MAX_OUTPUT`] bytes (then drains the rest so the child never blocks).
fn read_bounded(mut r: impl std::io::Read) -> (Vec<u8>, bool) {
    let mut buf = Vec::new();
    let _ = (&mut r).take(MAX_OUTPUT as u64).read_to_end(&mut buf);
    let over = std::io::copy(&mut r, &mut std::io::sink()).unwrap_or(0) > 0;
    (buf, over)
}

/// The environment variables holding ferry's own secrets, which a signer does not get.
const WITHHELD: [&str; 4] = [
    "FERRY_TOKEN",
    "FERRY_ADMIN_TOKEN",
    "FERRY_KEY_PASSPHRASE",
    "FERRY_PKCS11_PIN",
];

/// While alive, a write to a pipe whose reader is gone fails with an error instead of killing
/// the process (the command line restores SIGPIPE's default action for `ferry … | head`).
struct PipeErrorsNotSignals {
    #[cfg(unix)]
    before: libc::sighandler_t,
}

impl PipeErrorsNotSignals {
    #[cfg(unix)]
    #[allow(unsafe_code)]
    fn new() -> Self {
        // SAFETY: setting a signal's disposition to "ignore" is sound at any time; the previous
        // disposition is put back on drop.
        let before = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        PipeErrorsNotSignals { before }
    }

    #[cfg(not(unix))]
    fn new() -> Self {
        PipeErrorsNotSignals {}
    }
}

impl Drop for PipeErrorsNotSignals {
    #[cfg(unix)]
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.before != libc::SIG_ERR {
            // SAFETY: restores the disposition `new` replaced.
            unsafe {
                libc::signal(libc::SIGPIPE, self.before);
            }
        }
    }

    #[cfg(not(unix))]
    fn drop(&mut self) {}
}

/// Stops `child` and every process it started (its process group).
fn stop_all(child: &mut std::process::Child) {
    #[cfg(unix)]
    #[allow(unsafe_code)]
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: signals the process group the child leads (made at spawn); no memory is
        // touched.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last lines of a program's standard error, at most 10 lines and 1,000 characters.
fn stderr_tail(err: &[u8]) -> String {
    let text = String::from_utf8_lossy(err);
    let lines: Vec<&str> = text.lines().rev().take(10).collect();
    let joined = lines.into_iter().rev().collect::<Vec<_>>().join(" | ");
    let chars: Vec<char> = joined.chars().collect();
    if chars.len() > 1000 {
        format!(
            "…{}",
            chars[chars.len() - 1000..].iter().collect::<String>()
        )
    } else {
        joined
    }
}

/// Runs `argv verb` with `input` on standard input; returns its standard output.
fn run(argv: &[String], verb: &str, input: &[u8]) -> Result<Vec<u8>, SignerError> {
    run_within(argv, verb, input, timeout())
}

/// [`run`] with its own time limit: for other programs of the same protocol (the attestation
/// verifier of sealed variants).
pub(crate) fn run_within(
    argv: &[String],
    verb: &str,
    input: &[u8],
    limit: Duration,
) -> Result<Vec<u8>, SignerError> {
    let who = describe(argv);
    let _pipes = PipeErrorsNotSignals::new();
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]).arg(verb);
    for secret in WITHHELD {
        command.env_remove(secret);
    }
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            SignerError::new(
                SignerErrorKind::Unreachable,
                format!("{who}: cannot start {}: {e}", argv[0]),
            )
        })?;
    let mut stdin = child.stdin.take();
    let input = input.to_vec();
    // A thread per pipe: a signer that reads slowly or writes before reading never deadlocks.
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            let _ = s.write_all(&input);
        }
        drop(stdin);
    });
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out_reader = std::thread::spawn(move || stdout.map(read_bounded).unwrap_or_default());
    let err_reader = std::thread::spawn(move || stderr.map(read_bounded).unwrap_or_default());
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                stop_all(&mut child);
                // Every reader of its input is gone: the writer ends (before SIGPIPE's
                // disposition is put back).
                let _ = writer.join();
                return Err(SignerError::new(
                    SignerErrorKind::Unreachable,
                    format!(
                        "{who} {verb}: no answer within {} s; stopped it",
                        limit.as_secs()
                    ),
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                return Err(SignerError::new(
                    SignerErrorKind::Failed,
                    format!("{who} {verb}: {e}"),
                ));
            }
        }
    };
    let _ = writer.join();
    let (out, out_over) = out_reader.join().unwrap_or_default();
    let (err, _) = err_reader.join().unwrap_or_default();
    if !status.success() {
        let tail = stderr_tail(&err);
        return Err(SignerError::new(
            SignerErrorKind::Failed,
            format!(
                "{who} {verb} failed ({status}){}{tail}",
                if tail.is_empty() { "" } else { ": " },
            ),
        ));
    }
    if out_over {
        return Err(SignerError::new(
            SignerErrorKind::Failed,
            format!("{who} {verb} printed more than {MAX_OUTPUT} bytes"),
        ));
    }
    Ok(out)
}

impl Signer for ExecSigner {
    fn public(&self) -> PublicKey {
        self.public.clone()
    }

    fn describe(&self) -> String {
        describe(&self.argv)
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignerError> {
        let out = run(&self.argv, "sign", message)?;
        let text: String = String::from_utf8_lossy(&out)
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        let garbage = |why: &str| {
            SignerError::new(
                SignerErrorKind::Failed,
                format!(
                    "{} sign printed {}: {why}; nothing was signed",
                    self.describe(),
                    snippet(&out)
                ),
            )
        };
        let raw = base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|_| garbage("not base64"))?;
        match self.public.algorithm() {
            Algorithm::Ed25519 if raw.len() == 64 => Ok(raw),
            Algorithm::Ed25519 => Err(garbage(&format!(
                "{} bytes, an ed25519 signature has 64",
                raw.len()
            ))),
            _ => super::source::p256_der(&raw)
                .ok_or_else(|| garbage("not an ECDSA P-256 signature (DER or r ‖ s)")),
        }
    }
}
