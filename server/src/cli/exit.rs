//! Exit codes by class of failure (listed in `ferry --help` and docs/cli.md), and the errors
//! that choose one.

use ferry_shared::errors::ErrorCode;

use crate::cli::remote::{NoToken, Refusal};

/// Any other failure (a local file, a bad input file, an unexpected answer).
pub const OTHER: u8 = 1;
/// The command line itself is wrong (clap's own code).
pub const USAGE: u8 = 2;
/// No token, a token the server does not know, or one without the needed scope; a signing
/// token that refused the PIN or is locked.
pub const AUTH: u8 = 3;
/// The model, release, rollout or entry does not exist.
pub const NOT_FOUND: u8 = 4;
/// The state changed or exists already (a rollout in progress, a release published).
pub const CONFLICT: u8 = 5;
/// The server refused the request by its rules (invalid input, a guard, a signature).
pub const REFUSED: u8 = 6;
/// The server could not be reached, or failed (5xx, 429); a signing token or signer program
/// that cannot be reached.
pub const UNAVAILABLE: u8 = 7;
/// `ferry evaluate`, and `ferry sign` of a release with `[evaluation]`: a variant failed
/// its accuracy bound or could not execute.
pub const EVALUATION_FAILED: u8 = 8;

/// A release refused because a variant failed its accuracy bound: exits with
/// [`EVALUATION_FAILED`], like `ferry evaluate`.
#[derive(Debug)]
pub struct EvaluationFailed(pub String);

impl std::fmt::Display for EvaluationFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EvaluationFailed {}

/// A mistake on the command line that clap cannot see (a bad version, an option that
/// contradicts another): exits with [`USAGE`].
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// The exit code for `e`.
pub fn of(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<NoToken>().is_some() {
        return AUTH;
    }
    if e.chain().any(|c| c.downcast_ref::<Usage>().is_some()) {
        return USAGE;
    }
    if e.chain()
        .any(|c| c.downcast_ref::<EvaluationFailed>().is_some())
    {
        return EVALUATION_FAILED;
    }
    if let Some(r) = e.chain().find_map(|c| c.downcast_ref::<Refusal>()) {
        return match (r.status, r.code) {
            (401, _) | (403, Some(ErrorCode::Forbidden)) => AUTH,
            (404, _) => NOT_FOUND,
            (409, Some(ErrorCode::RolloutNotNewer | ErrorCode::RolloutStrandsDevices)) => REFUSED,
            (409, _) => CONFLICT,
            (429, _) | (500..=599, _) => UNAVAILABLE,
            (400..=499, _) => REFUSED,
            _ => OTHER,
        };
    }
    if let Some(s) = e
        .chain()
        .find_map(|c| c.downcast_ref::<crate::keys::signer::SignerError>())
    {
        use crate::keys::signer::SignerErrorKind;
        return match s.kind {
            SignerErrorKind::Refused => AUTH,
            SignerErrorKind::Unreachable => UNAVAILABLE,
            SignerErrorKind::Failed => OTHER,
        };
    }
    if e.chain().any(|c| c.downcast_ref::<ureq::Error>().is_some()) {
        return UNAVAILABLE;
    }
    OTHER
}
