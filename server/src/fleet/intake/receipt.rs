//! Telemetry receipts: proof that an event comes from a device the server really answered.
//!
//! Every resolve answer carries a `receipt`: `v1.<variant ids, comma-separated>.<mac>`, where
//! `mac` is HMAC-SHA-256 (base64url, no padding) over the install id, model, release, the
//! device's platform, SoC and device model as it reported them, and the candidate variant ids,
//! keyed by a key derived from the online signing key (so every replica
//! computes the same receipts and nothing new has to be provisioned). The client copies the
//! receipt into each telemetry event about that answer. An event counts toward halts, ramps,
//! deny entries and health only when its receipt verifies and names its variant (and, for a
//! fallback, the variant it fell back to). Forged events from a client that never resolved
//! are kept in the raw log but change no decision.

use base64::Engine as _;
use ferry_shared::trust::dsse::KeyPair;
use ferry_shared::wire::telemetry::TelemetryEvent;
use hmac::{KeyInit as _, Mac as _};
use sha2::{Digest as _, Sha256};

type HmacSha256 = hmac::Hmac<Sha256>;

/// What a receipt binds besides the variants: the answer's install id, model and release, and
/// the device class the device reported (so its events cannot speak for another class).
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// Install id.
    pub install_id: &'a str,
    /// Model.
    pub model: &'a str,
    /// Release.
    pub release: &'a str,
    /// Platform, as on the wire (`android`).
    pub platform: &'a str,
    /// SoC as reported.
    pub soc: &'a str,
    /// Device model as reported.
    pub device_model: &'a str,
}

/// The receipt key of a server whose online key is `online`.
#[derive(Clone)]
pub struct ReceiptKey([u8; 32]);

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReceiptKey(..)")
    }
}

impl ReceiptKey {
    /// Derives the key from the online key's secret.
    pub fn derive(online: &KeyPair) -> Self {
        let mut h = Sha256::new();
        h.update(b"ferry telemetry receipt key v1\0");
        h.update(online.seed());
        Self(h.finalize().into())
    }

    fn mac(&self, facts: &Facts<'_>, variants: &str) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any size");
        for part in [
            facts.install_id,
            facts.model,
            facts.release,
            facts.platform,
            facts.soc,
            facts.device_model,
            variants,
        ] {
            m.update(&(part.len() as u64).to_be_bytes());
            m.update(part.as_bytes());
        }
        m
    }

    /// The receipt for an answer about `facts` offering `variants`.
    pub fn issue(&self, facts: &Facts<'_>, variants: &[&str]) -> String {
        let list = variants.join(",");
        let mac = self.mac(facts, &list).finalize().into_bytes();
        format!(
            "v1.{list}.{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac)
        )
    }

    /// True when `e` carries a receipt this server issued for its install id, model and release
    /// that names its variant (and the variant it fell back to, if any).
    pub fn verifies(&self, e: &TelemetryEvent) -> bool {
        let Some(receipt) = e.receipt.as_deref() else {
            return false;
        };
        let facts = Facts {
            install_id: &e.install_id,
            model: &e.model,
            release: &e.release,
            platform: &e.platform,
            soc: &e.soc,
            device_model: &e.device_model,
        };
        let mut variants = vec![e.variant.as_str()];
        variants.extend(e.to_variant.as_deref());
        self.names(receipt, &facts, &variants)
    }

    /// True when `receipt` is one this server issued for `facts` and it names every one of
    /// `variants`.
    pub fn names(&self, receipt: &str, facts: &Facts<'_>, variants: &[&str]) -> bool {
        let Some(rest) = receipt.strip_prefix("v1.") else {
            return false;
        };
        let Some((list, mac)) = rest.rsplit_once('.') else {
            return false;
        };
        let Ok(mac) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(mac) else {
            return false;
        };
        if self.mac(facts, list).verify_slice(&mac).is_err() {
            return false;
        }
        variants.iter().all(|v| list.split(',').any(|x| x == *v))
    }
}

/// The experiment arm a receipt names (see
/// [`ferry_shared::experiment::ArmTag::receipt_entry`]); only meaningful for a receipt that
/// verified.
pub fn arm_of(receipt: &str) -> Option<ferry_shared::experiment::ArmTag> {
    let rest = receipt.strip_prefix("v1.")?;
    let (list, _) = rest.rsplit_once('.')?;
    list.split(',')
        .find_map(ferry_shared::experiment::ArmTag::from_receipt_entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_shared::wire::telemetry::{EventKind, Outcome};

    fn event(receipt: Option<String>) -> TelemetryEvent {
        TelemetryEvent {
            kind: EventKind::Fallback,
            model: "m".into(),
            release: "1.0.0".into(),
            variant: "vulkan-fp32".into(),
            delegate: "vulkan".into(),
            outcome: Outcome::Failed,
            error_code: Some("runtime_load_failed".into()),
            load_ms: None,
            install_id: "device-1".into(),
            platform: "android".into(),
            soc: "SM8550".into(),
            device_model: "phone".into(),
            os_version: "14".into(),
            app_version: "1.0.0".into(),
            runtime_version: "1.5.1".into(),
            at: "2026-12-03T00:00:00Z".into(),
            to_variant: Some("xnnpack-fp32".into()),
            receipt,
            stage: None,
            clock_offset_s: None,
            inference: Default::default(),
            bytes_fetched: None,
            bytes_total: None,
            sources: Vec::new(),
            metric: Default::default(),
        }
    }

    #[test]
    fn only_the_issued_receipt_verifies_and_only_for_its_own_event() {
        let key = ReceiptKey::derive(&KeyPair::from_seed(&[7; 32]));
        let facts = Facts {
            install_id: "device-1",
            model: "m",
            release: "1.0.0",
            platform: "android",
            soc: "SM8550",
            device_model: "phone",
        };
        let r = key.issue(&facts, &["vulkan-fp32", "xnnpack-fp32"]);
        assert!(key.verifies(&event(Some(r.clone()))));
        assert!(!key.verifies(&event(None)));
        let other_key = ReceiptKey::derive(&KeyPair::from_seed(&[8; 32]));
        assert!(!other_key.verifies(&event(Some(r.clone()))));
        for edit in [
            |e: &mut TelemetryEvent| e.install_id = "device-2".into(),
            |e: &mut TelemetryEvent| e.release = "2.0.0".into(),
            |e: &mut TelemetryEvent| e.model = "n".into(),
            |e: &mut TelemetryEvent| e.variant = "coreml-fp32".into(),
            |e: &mut TelemetryEvent| e.to_variant = Some("portable-fp32".into()),
            |e: &mut TelemetryEvent| e.soc = "SM8450".into(),
            |e: &mut TelemetryEvent| e.device_model = "Galaxy S23".into(),
            |e: &mut TelemetryEvent| e.platform = "ios".into(),
        ] {
            let mut e = event(Some(r.clone()));
            edit(&mut e);
            assert!(!key.verifies(&e), "{e:?}");
        }
        // A receipt whose variant list was widened no longer verifies.
        let widened = r.replacen("v1.vulkan-fp32,", "v1.vulkan-fp32,coreml-fp32,", 1);
        let mut e = event(Some(widened));
        e.variant = "coreml-fp32".into();
        assert!(!key.verifies(&e));
        for junk in ["", "v1.", "v2.a.b", "v1.vulkan-fp32.!!!", "v1..", "x"] {
            assert!(!key.verifies(&event(Some(junk.into()))), "{junk:?}");
        }
    }
}
