//! Fuzzes every document a device or server reads about keys and requests: trust files,
//! keyrings (parsed, and walked from a pinned root), keyring chains, revocation lists,
//! resolve requests (parsed and validated), decisions and telemetry events. Any bytes must give
//! a value or an error, never a panic.
#![no_main]

use ferry_shared::trust::dsse::{Envelope, KeyPair, KeyRole};
use ferry_shared::trust::keyring::{Keyring, KeyringResponse, TrustState};
use ferry_shared::trust::TrustFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = TrustFile::from_json(data) {
        let _ = file.to_keyring();
        let _ = TrustState::from_trust_file(&file);
    }
    let _ = Keyring::from_json(data);
    let _ = ferry_shared::trust::revocation::RevocationList::from_json(data);
    if let Ok(r) = serde_json::from_slice::<ferry_shared::wire::resolve::ResolveRequest>(data) {
        let _ = r.validate();
    }
    let _ = serde_json::from_slice::<ferry_shared::wire::resolve::Decision>(data);
    let _ = serde_json::from_slice::<ferry_shared::wire::telemetry::TelemetryEvent>(data);
    // Walk whatever chain the bytes hold from a pinned root: the walk must refuse, never panic.
    let root = KeyPair::from_seed(&[7; 32]);
    let mut pinned = TrustFile::default();
    pinned.push(KeyRole::Root, &root.public());
    let Ok(mut state) = TrustState::from_trust_file(&pinned) else {
        return;
    };
    if let Ok(chain) = serde_json::from_slice::<KeyringResponse>(data) {
        let _ = state.advance_all(&chain.keyrings);
    }
    if let Ok(env) = serde_json::from_slice::<Envelope>(data) {
        let _ = state.advance(&env);
        let _ = Keyring::peek_version(&env);
        let _ = ferry_shared::trust::revocation::verify_revocations(&env, &state.ring_at(time_zero()));
    }
});

fn time_zero() -> time::OffsetDateTime {
    time::OffsetDateTime::UNIX_EPOCH
}
