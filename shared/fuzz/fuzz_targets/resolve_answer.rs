//! Fuzzes the client's handling of a resolve answer: any bytes from the network go through the
//! same parsing and verification as in `Client::resolve` (decision and release envelopes, the release reference,
//! times, sequence, candidates against the signed manifest and the device, revocation lists),
//! against fixed trusted keys. It must refuse, never panic.
#![no_main]

use ferry_shared::trust::dsse::{KeyPair, KeyRole};
use ferry_shared::trust::keyring::TrustState;
use ferry_shared::wire::resolve::{ResolveRequest, ResolveResponse};
use ferry_shared::trust::TrustFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(resp) = serde_json::from_slice::<ResolveResponse>(data) else {
        return;
    };
    let mut file = TrustFile::default();
    file.push(KeyRole::Release, &KeyPair::from_seed(&[1; 32]).public());
    file.push(KeyRole::Online, &KeyPair::from_seed(&[2; 32]).public());
    let Ok(trust) = TrustState::from_trust_file(&file) else {
        return;
    };
    let request: ResolveRequest = match serde_json::from_value(serde_json::json!({
        "model": "mlp", "install_id": "fuzz", "app_version": "1.0.0",
        "runtime_version": "1.5.1", "backends": ["XnnpackBackend"], "platform": "android",
        "os_version": "14", "device_model": "phone", "soc": "SM8550", "ram_mb": 4096
    })) {
        Ok(r) => r,
        Err(_) => return,
    };
    let now = time::OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
    // The release manifest comes inline (with explain) or from its own fetch; either way it
    // is bytes the network chose: here the inline one, or the decision envelope standing in.
    let release = resp
        .release
        .clone()
        .unwrap_or_else(|| resp.decision.clone());
    let _ = ferry_client::trust::verify::verify_response(&resp, &release, &request, &trust, now, (0, 0));
    let ring = trust.ring_at(now);
    let _ = ferry_client::trust::verify::effective_revocations(
        "mlp",
        resp.revocations.as_ref().map(|e| (e, 0)),
        resp.revocations.as_ref(),
        1,
        &ring,
        0,
    );
});
