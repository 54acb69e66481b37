//! The attestation verifier of key requests (`[sealing] attestation_verifier = "exec:COMMAND
//! ARGS…"`): a program of the operator's that judges a platform attestation token, as ferry's
//! external signers are run (no shell, its own process group, secrets withheld, bounded output).
//!
//! `COMMAND ARGS… verify` reads one JSON object on standard input: `kind` (`play_integrity`,
//! `app_attest`, or what the app sends), `token`, `binding` (the value the app bound the token
//! to: [`ferry_shared::wire::keys::KeyRequest::binding`]), `install_id`, `model`, `release`,
//! `variant`, `platform`, `device_model`, `soc`. It prints `{"verdict": "allow"}` or
//! `{"verdict": "deny", "reason": "..."}` and exits 0. Anything else (another exit status, no
//! answer within 10 s, output that is not such an object) refuses the key: the verifier fails
//! closed. `docs/operations.md` ("Sealed releases") says how Play Integrity and App Attest
//! verdicts plug in.

use std::time::Duration;

use ferry_shared::wire::keys::{Attestation, KeyRequest};
use serde::Deserialize;

use crate::release::key_release::AttestationVerifier;

/// How long a verifier may take.
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// `[sealing]`: the key-release policy's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealingConfig {
    /// `exec:COMMAND ARGS…`: the program that judges attestation tokens (none: tokens are not
    /// checked).
    #[serde(default)]
    pub attestation_verifier: Option<String>,
    /// Refuse key requests that carry no attestation (needs `attestation_verifier`).
    #[serde(default)]
    pub require_attestation: bool,
}

impl SealingConfig {
    /// Checks the values; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        match &self.attestation_verifier {
            Some(v) if v.strip_prefix("exec:").is_none_or(|c| c.trim().is_empty()) => Err(
                "attestation_verifier must be exec:COMMAND ARGS… (a program that judges tokens)"
                    .into(),
            ),
            None if self.require_attestation => {
                Err("require_attestation needs an attestation_verifier to check the tokens".into())
            }
            _ => Ok(()),
        }
    }

    /// The verifier it names, if any.
    pub fn verifier(&self) -> Option<ExecVerifier> {
        let argv: Vec<String> = self
            .attestation_verifier
            .as_deref()?
            .strip_prefix("exec:")?
            .split_whitespace()
            .map(str::to_string)
            .collect();
        (!argv.is_empty()).then_some(ExecVerifier { argv })
    }
}

/// A verifier program.
#[derive(Debug, Clone)]
pub struct ExecVerifier {
    argv: Vec<String>,
}

#[derive(Deserialize)]
struct Verdict {
    verdict: String,
    #[serde(default)]
    reason: String,
}

impl AttestationVerifier for ExecVerifier {
    fn verify(&self, attestation: &Attestation, request: &KeyRequest) -> Result<(), String> {
        let input = serde_json::json!({
            "kind": attestation.kind,
            "token": attestation.token,
            "binding": request.binding(),
            "install_id": request.install_id,
            "model": request.model,
            "release": request.release,
            "variant": request.variant,
            "platform": request.platform,
            "device_model": request.device_model,
            "soc": request.soc,
        });
        let out = crate::keys::signer::exec::run_within(
            &self.argv,
            "verify",
            input.to_string().as_bytes(),
            VERIFY_TIMEOUT,
        )
        .map_err(|e| format!("the verifier failed: {e}"))?;
        let verdict: Verdict = serde_json::from_slice(&out)
            .map_err(|_| "the verifier's answer is not a verdict".to_string())?;
        match verdict.verdict.as_str() {
            "allow" => Ok(()),
            "deny" => Err(verdict.reason.chars().take(300).collect()),
            other => Err(format!(
                "the verifier answered {:?}, neither allow nor deny",
                other.chars().take(32).collect::<String>()
            )),
        }
    }
}
