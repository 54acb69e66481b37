//! Learning the server's time before anything needs a clock: `GET /v1/time` with a fresh
//! nonce, through the pool whose certificate check leaves out the dates (`transfer/tls.rs`), answered
//! with the server's time for that nonce, signed by the online key.

use ferry_shared::errors::ErrorCode;
use ferry_shared::trust::clock::{SignedTime, TIME_PAYLOAD_TYPE, TimeResponse};
use ferry_shared::trust::dsse::KeyRole;
use ferry_shared::trust::keyring::TrustState;
use ferry_shared::wire::resolve::ErrorBody;
use time::OffsetDateTime;

use crate::Client;
use crate::error::ClientError;

impl Client {
    /// Asks the server for its signed time for a fresh nonce and, when the answer verifies and
    /// came back within [`crate::trust::timekeeping::MAX_LEARNING_ROUND_TRIP`], keeps it as the
    /// client's estimate (what every later time check and certificate check uses).
    ///
    /// The answer is trusted for its signature (an online key of the keyring the client
    /// holds, walked forward first when the answer names a newer one) and its nonce, never
    /// for the connection it came through. The online key's `expires_at` is judged at the
    /// signed time: with no trusted time, that is the only time there is.
    pub(crate) fn learn_time(&self) -> Result<OffsetDateTime, ClientError> {
        let nonce = fresh_nonce()
            .ok_or_else(|| ClientError::Config("no system randomness for a nonce".into()))?;
        let url = format!("{}/v1/time?nonce={nonce}", self.server);
        let (sent, started) = (self.clock.since_boot(), std::time::Instant::now());
        let network = |message: String| ClientError::Network {
            url: url.clone(),
            message,
        };
        let bad = |message: String| ClientError::BadResponse {
            url: url.clone(),
            message,
        };
        let mut got = self.time_agent.get(&url).call().map_err(|e| {
            crate::transfer::tls::certificate_error(&url, &e)
                .unwrap_or_else(|| network(e.to_string()))
        })?;
        let status = got.status().as_u16();
        let text = got
            .body_mut()
            .with_config()
            .limit(self.max_response_bytes.min(64 << 10))
            .read_to_string()
            .map_err(|e| bad(e.to_string()))?;
        if status != 200 {
            return Err(match serde_json::from_str::<ErrorBody>(&text) {
                Ok(e) => ClientError::Rejected {
                    code: e.code,
                    message: e.message,
                    status,
                },
                Err(_) => bad(format!("HTTP {status} without an error body")),
            });
        }
        let answer: TimeResponse = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        // The claims are read before any check, to pick the keyring and the ring's time; the
        // signature over these same bytes is checked next.
        let claimed = ferry_shared::trust::dsse::decode_payload(&answer.time, &Default::default())
            .ok()
            .and_then(|b| SignedTime::from_json(&b).ok())
            .ok_or_else(|| bad("the signed time does not parse".into()))?;
        // (Only to know whether to walk the keyring first; nothing else is read from it.)
        if self.trust().is_rooted() && claimed.keyring_version > self.trust().version() {
            self.walk_keyring(&self.time_agent)?;
        }
        let signed = check_signed_time(&answer, &nonce, &self.trust())?;
        let round_trip = match (&sent, self.clock.since_boot()) {
            (Some((id, then)), Some((now_id, now))) if *id == now_id => now.saturating_sub(*then),
            _ => started.elapsed(),
        };
        if round_trip > crate::trust::timekeeping::MAX_LEARNING_ROUND_TRIP {
            return Err(network(format!(
                "the signed time took {} s to arrive: too long to learn the time from",
                round_trip.as_secs()
            )));
        }
        self.time
            .learn(signed.time, sent, false, self.trust().created())
            .map_err(|message| ClientError::Verify {
                code: ErrorCode::DecisionUntimely,
                message,
            })?;
        Ok(signed.time)
    }
}

/// Verifies a signed time answer to `nonce` against what the client trusts: signed by an
/// online key of the keyring held (the key's `expires_at` judged at the signed time, the only
/// time there is), carrying this nonce and naming this keyring version.
pub(crate) fn check_signed_time(
    answer: &TimeResponse,
    nonce: &str,
    trust: &TrustState,
) -> Result<SignedTime, ClientError> {
    let claimed = ferry_shared::trust::dsse::decode_payload(&answer.time, &Default::default())
        .ok()
        .and_then(|b| SignedTime::from_json(&b).ok())
        .ok_or_else(|| ClientError::Verify {
            code: ErrorCode::EnvelopeMalformed,
            message: "the signed time does not parse".into(),
        })?;
    let verified = ferry_shared::trust::dsse::verify(
        &answer.time,
        TIME_PAYLOAD_TYPE,
        &trust.ring_at(claimed.time),
        KeyRole::Online,
        1,
        &Default::default(),
    )
    .map_err(|e| ClientError::Verify {
        code: e.code(),
        message: format!("the signed time: {e}"),
    })?;
    let signed =
        SignedTime::from_json(verified.value()).map_err(|message| ClientError::Verify {
            code: ErrorCode::EnvelopeMalformed,
            message,
        })?;
    if signed.nonce != nonce {
        return Err(ClientError::DecisionMismatch(
            "the signed time answers another request (its nonce is not this request's)".into(),
        ));
    }
    if signed.keyring_version != trust.version() {
        return Err(ClientError::DecisionMismatch(format!(
            "the signed time names keyring version {}; this device holds version {}",
            signed.keyring_version,
            trust.version()
        )));
    }
    Ok(signed)
}

/// A fresh request nonce: 24 random bytes, base64url without padding; `None` without system
/// randomness (the request then asks for the shared answer).
pub(crate) fn fresh_nonce() -> Option<String> {
    use base64::Engine as _;
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).ok()?;
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests;
