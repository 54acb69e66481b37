//! Check and record, without I/O: what a verified resolve answer asks the client to write to
//! its cache (the revocation list to keep, the decision's sequence as the new replay floor)
//! and whether its plan may be used. The shell (`transfer/resolve.rs`) reads what is held,
//! calls [`after_verify`], writes what it says in that order, and only then uses the plan.

use ferry_shared::trust::dsse::{Envelope, KeyRing};

use crate::error::ClientError;
use crate::trust::verify::{Plan, effective_revocations, revoked};

/// What the cache held for the model when the answer came.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held<'a> {
    /// The revocation list kept, with the keyring version it was accepted under.
    pub revocations: Option<(&'a Envelope, u64)>,
    /// The release keys in force now.
    pub ring: &'a KeyRing,
    /// The keyring version the client holds.
    pub keyring: u64,
}

/// What to write, in order, and whether the plan may then be used.
#[derive(Debug)]
pub(crate) struct Records {
    /// A newer revocation list to keep (written whatever follows: a list that revokes the
    /// decided release is still the list in force).
    pub revocations: Option<Envelope>,
    /// The decision's (keyring version, sequence) to record as the replay floor, when the
    /// plan may be used; the refusal otherwise (its release is revoked).
    pub sequence: Result<(u64, u64), ClientError>,
}

/// After `plan` verified: the revocation list in force (the held one or `received`, whichever
/// is newer and verifies under `held.ring`), a refusal when it revokes the decided release,
/// and what to record. Fails only when the received list does not verify.
pub(crate) fn after_verify(
    model: &str,
    plan: &Plan,
    received: Option<&Envelope>,
    held: Held<'_>,
) -> Result<Records, ClientError> {
    let decision = plan.decision();
    let (list, keep) = effective_revocations(
        model,
        held.revocations,
        received,
        decision.revocations_version,
        held.ring,
        held.keyring,
    )?;
    let sequence = match revoked(model, &decision.release.to_string(), list.as_ref()) {
        Some(refused) => Err(refused),
        None => Ok((decision.keyring_version, decision.sequence)),
    };
    Ok(Records {
        revocations: keep,
        sequence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::verify::tests::signed as list;
    use ferry_shared::trust::dsse::{KeyPair, KeyRole};
    use ferry_shared::wire::resolve::{Cohort, Decision};
    use time::OffsetDateTime;

    /// A plan for `release` of mlp whose decision names revocation list `revocations` and
    /// sequence 7 under keyring 3 (only what `after_verify` reads is filled in).
    fn plan(release: &str, revocations: u64) -> Plan {
        let manifest = ferry_shared::manifest::ReleaseManifest::from_json(
            &serde_json::to_vec(&serde_json::json!({
                "model": "mlp", "version": release, "created": "2026-12-01T00:00:00Z",
                "variants": [{
                    "id": "xnnpack", "delegate": "xnnpack", "quant": "fp32",
                    "backends": ["XnnpackBackend"], "size": 1, "runtime": "*", "app": "*",
                    "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                }],
            }))
            .expect("json"),
        )
        .expect("manifest");
        let digest = ferry_shared::Sha256Digest::of(b"x");
        Plan {
            decision: Decision {
                format: 1,
                model: "mlp".parse().expect("model"),
                release: release.parse().expect("version"),
                cohort: Cohort::Baseline,
                request: digest,
                cohort_rule: None,
                pinned: None,
                experiment: None,
                release_sha256: digest,
                issued_at: OffsetDateTime::UNIX_EPOCH,
                expires_at: OffsetDateTime::UNIX_EPOCH,
                keyring_version: 3,
                revocations_version: revocations,
                sequence: 7,
                candidates: Vec::new(),
                sources: Vec::new(),
                nonce: None,
                time: None,
            },
            manifest,
            release_envelope: Envelope {
                payload: String::new(),
                payload_type: String::new(),
                signatures: Vec::new(),
            },
            candidates: Vec::new(),
            receipt: None,
            sealed_stopped: Vec::new(),
        }
    }

    fn ring(key: &KeyPair) -> KeyRing {
        let mut ring = KeyRing::new();
        ring.add(KeyRole::Release, &key.public()).expect("key");
        ring
    }

    #[test]
    fn a_clean_answer_records_its_sequence_and_nothing_else() {
        let key = KeyPair::from_seed(&[4; 32]);
        let ring = ring(&key);
        let held = Held {
            revocations: None,
            ring: &ring,
            keyring: 3,
        };
        let r = after_verify("mlp", &plan("1.1.0", 0), None, held).expect("checked");
        assert!(r.revocations.is_none());
        assert_eq!(r.sequence.expect("usable"), (3, 7));
    }

    #[test]
    fn a_newer_list_is_kept_even_when_it_revokes_the_decided_release() {
        let key = KeyPair::from_seed(&[4; 32]);
        let ring = ring(&key);
        let v1 = list(&key, 1, &["1.0.0"]);
        let v2 = list(&key, 2, &["1.0.0", "1.1.0"]);
        let held = Held {
            revocations: Some((&v1, 3)),
            ring: &ring,
            keyring: 3,
        };
        let r = after_verify("mlp", &plan("1.1.0", 2), Some(&v2), held).expect("checked");
        assert_eq!(r.revocations, Some(v2));
        let refused = r.sequence.expect_err("revoked");
        assert_eq!(refused.code(), "release_revoked");
        // A release the list spares is usable, and the list is still kept.
        let again = list(&key, 2, &["1.0.0", "1.1.0"]);
        let r = after_verify("mlp", &plan("1.2.0", 2), Some(&again), held).expect("checked");
        assert!(r.revocations.is_some());
        assert_eq!(r.sequence.expect("usable"), (3, 7));
    }

    #[test]
    fn the_held_list_still_refuses_a_release_an_answer_without_one_names() {
        let key = KeyPair::from_seed(&[4; 32]);
        let ring = ring(&key);
        let v1 = list(&key, 1, &["1.1.0"]);
        let held = Held {
            revocations: Some((&v1, 3)),
            ring: &ring,
            keyring: 3,
        };
        let r = after_verify("mlp", &plan("1.1.0", 0), None, held).expect("checked");
        assert!(r.revocations.is_none());
        assert!(r.sequence.is_err());
    }

    #[test]
    fn a_list_another_key_signed_fails_the_check_and_records_nothing() {
        let key = KeyPair::from_seed(&[4; 32]);
        let forger = KeyPair::from_seed(&[5; 32]);
        let ring = ring(&key);
        let held = Held {
            revocations: None,
            ring: &ring,
            keyring: 3,
        };
        let forged = list(&forger, 1, &[]);
        let e = after_verify("mlp", &plan("1.1.0", 1), Some(&forged), held).expect_err("forged");
        assert!(
            e.code().starts_with("signature") || e.code().contains("key"),
            "{}",
            e.code()
        );
    }
}
