//! Fuzzes release-manifest and DSSE envelope parsing.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ferry_shared::manifest::ReleaseManifest::from_json_strict(data);
    if let Ok(env) = serde_json::from_slice::<ferry_shared::trust::dsse::Envelope>(data) {
        let ring = ferry_shared::trust::dsse::KeyRing::new();
        let _ = ferry_shared::trust::dsse::verify(
            &env,
            ferry_shared::manifest::RELEASE_PAYLOAD_TYPE,
            &ring,
            ferry_shared::trust::dsse::KeyRole::Release,
            1,
            &Default::default(),
        );
    }
});
