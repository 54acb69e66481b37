use super::*;
use crate::trust::dsse::KeyPair;

fn entry(role: KeyRole, k: &KeyPair) -> TrustedKeyEntry {
    TrustedKeyEntry::of(role, &k.public_key())
}

fn root_set(threshold: u32, roots: &[&KeyPair]) -> RootSet {
    RootSet {
        threshold,
        keys: roots.iter().map(|k| entry(KeyRole::Root, k)).collect(),
    }
}

fn keyring(version: u64, root: RootSet, release: &KeyPair, online: &KeyPair) -> Keyring {
    Keyring {
        format: 1,
        version,
        created: OffsetDateTime::UNIX_EPOCH,
        root,
        keys: vec![
            KeyringKey {
                key: entry(KeyRole::Release, release),
                expires_at: None,
            },
            KeyringKey {
                key: entry(KeyRole::Online, online),
                expires_at: None,
            },
        ],
        key_release: Vec::new(),
    }
}

fn sign(k: &Keyring, signers: &[&KeyPair]) -> Envelope {
    let bytes = serde_json::to_vec(k).expect("json");
    let mut env = signers[0].sign(KEYRING_PAYLOAD_TYPE, &bytes);
    for s in &signers[1..] {
        s.add_signature(&mut env).expect("sign");
    }
    env
}

fn pinned(threshold: u32, roots: &[&KeyPair]) -> TrustState {
    let file = TrustFile {
        threshold: Some(threshold),
        keys: roots.iter().map(|k| entry(KeyRole::Root, k)).collect(),
        first_keyring: None,
    };
    TrustState::from_trust_file(&file).expect("trust")
}

fn kp(n: u8) -> KeyPair {
    KeyPair::from_seed(&[n; 32])
}

#[test]
fn versions_walk_in_order_and_retired_keys_leave_the_ring() {
    let (root, rel, on1, on2) = (kp(1), kp(2), kp(3), kp(4));
    let mut t = pinned(1, &[&root]);
    let v1 = sign(&keyring(1, root_set(1, &[&root]), &rel, &on1), &[&root]);
    let v2 = sign(&keyring(2, root_set(1, &[&root]), &rel, &on2), &[&root]);
    t.advance_all(&[v1.clone(), v2.clone()]).expect("walk");
    assert_eq!(t.version(), 2);
    let ring = t.ring_at(OffsetDateTime::UNIX_EPOCH);
    assert!(ring.get(&on2.id()).is_some());
    assert!(ring.get(&on1.id()).is_none(), "the retired online key");
    // Older versions are passed over by a walk and refused one by one.
    t.advance_all(&[v1.clone(), v2]).expect("already held");
    let err = t.advance(&v1).expect_err("older");
    assert_eq!(err.code(), ErrorCode::KeyringRollback);
}

#[test]
fn a_trust_file_for_a_later_root_starts_where_that_root_took_over() {
    let (old, new, rel, on) = (kp(1), kp(2), kp(3), kp(4));
    let v1 = sign(&keyring(1, root_set(1, &[&old]), &rel, &on), &[&old]);
    let v2 = sign(&keyring(2, root_set(1, &[&new]), &rel, &on), &[&old, &new]);
    let v3 = sign(&keyring(3, root_set(1, &[&new]), &rel, &on), &[&new]);
    let file = TrustFile {
        threshold: Some(1),
        keys: vec![entry(KeyRole::Root, &new)],
        first_keyring: Some(2),
    };
    let mut t = TrustState::from_trust_file(&file).expect("trust");
    assert_eq!(t.version(), 1);
    t.advance_all(&[v1, v2, v3]).expect("walk from version 2");
    assert_eq!(t.version(), 3);
    // Pinning the new root without saying where it starts fails on version 1.
    let mut from_start = TrustState::from_trust_file(&TrustFile {
        first_keyring: None,
        ..file
    })
    .expect("trust");
    let v1 = sign(&keyring(1, root_set(1, &[&old]), &rel, &on), &[&old]);
    assert!(from_start.advance(&v1).is_err());
}

#[test]
fn a_skipped_version_is_refused() {
    let (root, rel, on) = (kp(1), kp(2), kp(3));
    let mut t = pinned(1, &[&root]);
    let v2 = sign(&keyring(2, root_set(1, &[&root]), &rel, &on), &[&root]);
    let err = t.advance_all(&[v2]).expect_err("skipped");
    assert_eq!(err.code(), ErrorCode::KeyringSkipped);
    assert_eq!(t.version(), 0);
}

#[test]
fn a_keyring_signed_by_a_non_root_key_is_refused() {
    let (root, rel, on) = (kp(1), kp(2), kp(3));
    let mut t = pinned(1, &[&root]);
    let by_release = sign(&keyring(1, root_set(1, &[&root]), &rel, &on), &[&rel]);
    assert_eq!(
        t.advance(&by_release).expect_err("not root").code(),
        ErrorCode::KeyUnknown
    );
}

#[test]
fn a_key_counts_once_toward_the_threshold() {
    let (r1, r2, rel, on) = (kp(1), kp(2), kp(3), kp(4));
    let mut t = pinned(2, &[&r1, &r2]);
    let k = keyring(1, root_set(2, &[&r1, &r2]), &rel, &on);
    let mut twice = sign(&k, &[&r1]);
    let again = twice.signatures[0].clone();
    twice.signatures.push(again);
    assert_eq!(
        t.advance(&twice).expect_err("duplicate").code(),
        ErrorCode::SignatureDuplicate
    );
    let once = sign(&k, &[&r1]);
    assert_eq!(
        t.advance(&once).expect_err("below threshold").code(),
        ErrorCode::SignatureThreshold
    );
    t.advance(&sign(&k, &[&r1, &r2])).expect("both");
}

#[test]
fn rotating_root_needs_the_old_and_the_new_threshold() {
    let (old, new, rel, on) = (kp(1), kp(2), kp(3), kp(4));
    let mut t = pinned(1, &[&old]);
    t.advance(&sign(&keyring(1, root_set(1, &[&old]), &rel, &on), &[&old]))
        .expect("v1");
    let v2 = keyring(2, root_set(1, &[&new]), &rel, &on);
    for signers in [vec![&old], vec![&new]] {
        let mut copy = t.clone();
        assert!(copy.advance(&sign(&v2, &signers)).is_err());
    }
    t.advance(&sign(&v2, &[&old, &new])).expect("both");
    // Version 3 answers to the new root only.
    let v3 = keyring(3, root_set(1, &[&new]), &rel, &on);
    assert!(t.clone().advance(&sign(&v3, &[&old])).is_err());
    t.advance(&sign(&v3, &[&new])).expect("new root");
}

#[test]
fn malformed_keyrings_are_refused() {
    let (root, rel, on) = (kp(1), kp(2), kp(3));
    let good = keyring(1, root_set(1, &[&root]), &rel, &on);
    let mut cases: Vec<Keyring> = Vec::new();
    let mut k = good.clone();
    k.root.threshold = 0;
    cases.push(k);
    let mut k = good.clone();
    k.root.threshold = 2;
    cases.push(k);
    let mut k = good.clone();
    k.keys.retain(|k| k.key.role != KeyRole::Online);
    cases.push(k);
    let mut k = good.clone();
    k.keys[0].key.keyid = on.id();
    cases.push(k);
    let mut k = good.clone();
    k.keys[0].key.role = KeyRole::Root;
    cases.push(k);
    let mut k = good;
    let extra = k.root.keys[0].clone();
    k.root.keys.push(extra);
    cases.push(k);
    for (i, k) in cases.iter().enumerate() {
        let mut t = pinned(1, &[&root]);
        let err = t.advance(&sign(k, &[&root])).expect_err("invalid");
        assert_eq!(err.code(), ErrorCode::KeyringInvalid, "case {i}: {err}");
    }
}

#[test]
fn expired_online_keys_leave_the_ring() {
    let (root, rel, on) = (kp(1), kp(2), kp(3));
    let mut k = keyring(1, root_set(1, &[&root]), &rel, &on);
    let at = OffsetDateTime::UNIX_EPOCH + time::Duration::days(10);
    k.keys[1].expires_at = Some(at);
    let mut t = pinned(1, &[&root]);
    t.advance(&sign(&k, &[&root])).expect("v1");
    assert!(
        t.ring_at(at - time::Duration::SECOND)
            .get(&on.id())
            .is_some()
    );
    assert!(t.ring_at(at).get(&on.id()).is_none());
    assert!(t.ring_at(at).get(&rel.id()).is_some(), "release keys stay");
}

#[test]
fn a_fixed_trust_file_cannot_take_keyrings() {
    let (root, rel, on) = (kp(1), kp(2), kp(3));
    let mut file = TrustFile::default();
    file.push(KeyRole::Release, &rel.public());
    file.push(KeyRole::Online, &on.public());
    let mut t = TrustState::from_trust_file(&file).expect("fixed");
    assert!(!t.is_rooted());
    assert_eq!(t.ring_at(OffsetDateTime::UNIX_EPOCH).len(), 2);
    let v1 = sign(&keyring(1, root_set(1, &[&root]), &rel, &on), &[&root]);
    assert_eq!(t.advance(&v1).expect_err("no root"), KeyringError::NoRoot);
    file.push(KeyRole::Root, &root.public());
    assert!(TrustState::from_trust_file(&file).is_err(), "mixed");
}
