use ferry_shared::trust::dsse::{Envelope, KeyPair};
use ferry_shared::trust::keyring::{KEYRING_PAYLOAD_TYPE, Keyring, KeyringKey, RootSet};
use ferry_shared::trust::{TrustFile, TrustedKeyEntry};
use time::OffsetDateTime;

use super::*;

fn entry(role: KeyRole, k: &KeyPair) -> TrustedKeyEntry {
    TrustedKeyEntry::of(role, &k.public_key())
}

/// A device pinning `root`, holding keyring version 1 whose online key `online` expires at
/// `online_expires`.
fn trust(root: &KeyPair, online: &KeyPair, online_expires: OffsetDateTime) -> TrustState {
    let ring = Keyring {
        format: 1,
        version: 1,
        created: OffsetDateTime::UNIX_EPOCH,
        root: RootSet {
            threshold: 1,
            keys: vec![entry(KeyRole::Root, root)],
        },
        keys: vec![
            KeyringKey {
                key: entry(KeyRole::Release, &KeyPair::from_seed(&[5; 32])),
                expires_at: None,
            },
            KeyringKey {
                key: entry(KeyRole::Online, online),
                expires_at: Some(online_expires),
            },
        ],
        key_release: Vec::new(),
    };
    let env = root.sign(
        KEYRING_PAYLOAD_TYPE,
        &serde_json::to_vec(&ring).expect("json"),
    );
    let mut t = TrustState::from_trust_file(&TrustFile {
        threshold: Some(1),
        keys: vec![entry(KeyRole::Root, root)],
        first_keyring: None,
    })
    .expect("trust");
    t.advance(&env).expect("keyring 1");
    t
}

fn answer(key: &KeyPair, nonce: &str, time: OffsetDateTime, keyring_version: u64) -> TimeResponse {
    let payload = SignedTime {
        format: 1,
        nonce: nonce.into(),
        time,
        keyring_version,
    };
    TimeResponse {
        time: key.sign(
            TIME_PAYLOAD_TYPE,
            &serde_json::to_vec(&payload).expect("json"),
        ),
    }
}

const NONCE: &str = "bm9uY2Utbm9uY2Utbm9uY2U";

fn at(year_day: i64) -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH + time::Duration::days(year_day)
}

#[test]
fn a_signed_time_for_this_nonce_from_the_online_key_is_learned() {
    let (root, online) = (KeyPair::from_seed(&[1; 32]), KeyPair::from_seed(&[2; 32]));
    let t = trust(&root, &online, at(20_000));
    let got =
        check_signed_time(&answer(&online, NONCE, at(19_000), 1), NONCE, &t).expect("verifies");
    assert_eq!(got.time, at(19_000));
}

#[test]
fn forged_replayed_or_misdirected_signed_times_are_refused() {
    let (root, online) = (KeyPair::from_seed(&[1; 32]), KeyPair::from_seed(&[2; 32]));
    let t = trust(&root, &online, at(20_000));
    let code = |r: Result<SignedTime, ClientError>| r.expect_err("refused").code().to_string();

    // Signed by a key the device does not trust (an attacker's), or by the root or release
    // key (not an online key).
    let stranger = KeyPair::from_seed(&[9; 32]);
    assert_eq!(
        code(check_signed_time(
            &answer(&stranger, NONCE, at(19_000), 1),
            NONCE,
            &t
        )),
        "key_unknown"
    );
    assert!(check_signed_time(&answer(&root, NONCE, at(19_000), 1), NONCE, &t).is_err());
    // A real answer to another request (recorded and replayed).
    assert!(matches!(
        check_signed_time(
            &answer(&online, "b3RoZXItbm9uY2Utb3RoZXI", at(19_000), 1),
            NONCE,
            &t
        ),
        Err(ClientError::DecisionMismatch(_))
    ));
    // For another keyring version than the one held.
    assert!(matches!(
        check_signed_time(&answer(&online, NONCE, at(19_000), 2), NONCE, &t),
        Err(ClientError::DecisionMismatch(_))
    ));
    // The online key cannot vouch for a time after its own expiry.
    assert!(check_signed_time(&answer(&online, NONCE, at(20_001), 1), NONCE, &t).is_err());
    // Bytes changed after signing (the time moved).
    let mut tampered = answer(&online, NONCE, at(19_000), 1);
    let moved = answer(&online, NONCE, at(19_500), 1);
    tampered.time.payload = moved.time.payload;
    assert_eq!(
        code(check_signed_time(&tampered, NONCE, &t)),
        "signature_invalid"
    );
    // Not a signed time at all.
    let garbage = TimeResponse {
        time: Envelope {
            payload_type: TIME_PAYLOAD_TYPE.into(),
            payload: "bm90IGpzb24".into(),
            signatures: Vec::new(),
        },
    };
    assert_eq!(
        code(check_signed_time(&garbage, NONCE, &t)),
        "envelope_malformed"
    );
}
