use super::*;
use proptest::prelude::*;

const T: &str = "application/vnd.ferry.test+json";

fn key(n: u8) -> KeyPair {
    KeyPair::from_seed(&[n; 32])
}

fn ring_with(keys: &[(&KeyPair, KeyRole)]) -> KeyRing {
    let mut r = KeyRing::new();
    for (k, role) in keys {
        r.add(*role, &k.public()).expect("valid key");
    }
    r
}

fn check(env: &Envelope, ring: &KeyRing) -> Result<Verified<Vec<u8>>, DsseError> {
    verify(env, T, ring, KeyRole::Release, 1, &DsseLimits::default())
}

#[test]
fn pae_matches_the_spec_layout() {
    assert_eq!(pae("a/b", b"hello"), b"DSSEv1 3 a/b 5 hello".to_vec());
    assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
}

#[test]
fn round_trip() {
    let k = key(1);
    let env = k.sign(T, b"{\"x\":1}");
    let json = serde_json::to_string(&env).expect("serialise");
    assert!(json.contains("\"payloadType\""));
    let back: Envelope = serde_json::from_str(&json).expect("parse");
    let v = check(&back, &ring_with(&[(&k, KeyRole::Release)])).expect("verifies");
    assert_eq!(v.value(), b"{\"x\":1}");
    assert_eq!(v.signers(), &[k.id()]);
}

#[test]
fn each_attack_has_its_own_code() {
    let k = key(1);
    let other = key(2);
    let ring = ring_with(&[(&k, KeyRole::Release), (&other, KeyRole::Online)]);
    let good = k.sign(T, b"payload bytes");
    let mut codes = BTreeSet::new();

    // Wrong key: a trusted key, but one that may not sign releases.
    let e = check(&other.sign(T, b"payload bytes"), &ring).expect_err("wrong key");
    assert_eq!(e.code().as_str(), "key_wrong_role");
    codes.insert(e.code().as_str());

    // Flipped payload byte.
    let mut env = good.clone();
    let mut p = B64.decode(&env.payload).expect("b64");
    p[3] ^= 0x01;
    env.payload = B64.encode(&p);
    let e = check(&env, &ring).expect_err("flipped payload");
    assert_eq!(e.code().as_str(), "signature_invalid");
    codes.insert(e.code().as_str());

    // Flipped signature byte (top bit of S: no longer a canonical scalar).
    let mut env = good.clone();
    let mut s = B64.decode(&env.signatures[0].sig).expect("b64");
    s[63] ^= 0x80;
    env.signatures[0].sig = B64.encode(&s);
    let e = check(&env, &ring).expect_err("flipped signature");
    assert_eq!(e.code().as_str(), "signature_malformed");
    codes.insert(e.code().as_str());

    // Duplicate signatures must not count twice.
    let mut env = good.clone();
    env.signatures.push(env.signatures[0].clone());
    let e = check(&env, &ring).expect_err("duplicate");
    assert_eq!(e.code().as_str(), "signature_duplicate");
    codes.insert(e.code().as_str());

    // Unknown key id.
    let stranger = key(3);
    let e = check(&stranger.sign(T, b"payload bytes"), &ring).expect_err("unknown");
    assert_eq!(e.code().as_str(), "key_unknown");
    codes.insert(e.code().as_str());

    assert_eq!(
        codes.len(),
        5,
        "five attacks, five distinct codes: {codes:?}"
    );
}

#[test]
fn forged_key_id_is_a_bad_signature() {
    let k = key(1);
    let attacker = key(9);
    let mut env = attacker.sign(T, b"evil");
    env.signatures[0].keyid = k.id().to_hex();
    let e = check(&env, &ring_with(&[(&k, KeyRole::Release)])).expect_err("forged");
    assert_eq!(e.code().as_str(), "signature_invalid");
}

#[test]
fn every_signature_bit_flip_is_refused() {
    let k = key(1);
    let ring = ring_with(&[(&k, KeyRole::Release)]);
    let good = k.sign(T, b"abc");
    let sig = B64.decode(&good.signatures[0].sig).expect("b64");
    for i in 0..64 * 8 {
        let mut s = sig.clone();
        s[i / 8] ^= 1 << (i % 8);
        let mut env = good.clone();
        env.signatures[0].sig = B64.encode(&s);
        let e = check(&env, &ring).expect_err("bit flip must be refused");
        assert!(
            matches!(
                e.code().as_str(),
                "signature_invalid" | "signature_malformed"
            ),
            "{e}"
        );
    }
}

#[test]
fn envelope_shape_errors() {
    let k = key(1);
    let ring = ring_with(&[(&k, KeyRole::Release)]);
    let good = k.sign(T, b"abc");

    let e = verify(
        &good,
        "other/type",
        &ring,
        KeyRole::Release,
        1,
        &DsseLimits::default(),
    )
    .expect_err("type");
    assert_eq!(e.code().as_str(), "payload_type_mismatch");

    let mut env = good.clone();
    env.signatures.clear();
    assert_eq!(
        check(&env, &ring).expect_err("none").code().as_str(),
        "signature_missing"
    );

    let mut env = good.clone();
    env.payload = "!!!not base64!!!".into();
    assert_eq!(
        check(&env, &ring).expect_err("b64").code().as_str(),
        "envelope_malformed"
    );

    let mut env = good.clone();
    env.signatures[0].sig = B64.encode([0u8; 10]);
    assert_eq!(
        check(&env, &ring).expect_err("short").code().as_str(),
        "signature_malformed"
    );

    let mut env = good.clone();
    env.signatures[0].keyid = "not hex".into();
    assert_eq!(
        check(&env, &ring).expect_err("keyid").code().as_str(),
        "key_unknown"
    );

    let big = k.sign(T, &vec![b'x'; 2000]);
    let limits = DsseLimits {
        max_payload: 1000,
        max_signatures: 16,
    };
    let e = verify(&big, T, &ring, KeyRole::Release, 1, &limits).expect_err("big");
    assert_eq!(e.code().as_str(), "envelope_too_large");

    let mut env = good.clone();
    for n in 10..30 {
        key(n).add_signature(&mut env).expect("add");
    }
    assert_eq!(
        check(&env, &ring).expect_err("many").code().as_str(),
        "signature_too_many"
    );
}

#[test]
fn thresholds_count_distinct_trusted_keys() {
    let (a, b, c) = (key(1), key(2), key(3));
    let ring = ring_with(&[
        (&a, KeyRole::Root),
        (&b, KeyRole::Root),
        (&c, KeyRole::Root),
    ]);
    let mut env = a.sign(T, b"keyring");
    let two = |env: &Envelope| verify(env, T, &ring, KeyRole::Root, 2, &DsseLimits::default());
    let e = two(&env).expect_err("one of two");
    assert_eq!(e.code().as_str(), "signature_threshold");
    key(7).add_signature(&mut env).expect("add");
    assert_eq!(
        two(&env)
            .expect_err("stranger does not count")
            .code()
            .as_str(),
        "signature_threshold"
    );
    b.add_signature(&mut env).expect("add");
    let v = two(&env).expect("two of three, stranger ignored");
    assert_eq!(v.signers().len(), 2);
}

#[test]
fn verified_try_map() {
    let k = key(1);
    let v = check(&k.sign(T, b"42"), &ring_with(&[(&k, KeyRole::Release)])).expect("ok");
    let n: Verified<u32> = v
        .try_map(|b| {
            String::from_utf8(b)
                .map_err(|_| ())
                .and_then(|s| s.parse().map_err(|_| ()))
        })
        .expect("parse");
    assert_eq!(*n, 42);
}

proptest! {
    #[test]
    fn any_payload_round_trips(payload in proptest::collection::vec(any::<u8>(), 0..512), seed in any::<[u8; 32]>()) {
        let k = KeyPair::from_seed(&seed);
        let ring = ring_with(&[(&k, KeyRole::Release)]);
        let env = k.sign(T, &payload);
        let v = check(&env, &ring).expect("verifies");
        prop_assert_eq!(v.value(), &payload);
    }

    #[test]
    fn any_payload_change_is_refused(payload in proptest::collection::vec(any::<u8>(), 1..256), idx in any::<usize>(), bit in 0u8..8) {
        let k = key(5);
        let ring = ring_with(&[(&k, KeyRole::Release)]);
        let mut env = k.sign(T, &payload);
        let mut p = payload.clone();
        let i = idx % p.len();
        p[i] ^= 1 << bit;
        env.payload = B64.encode(&p);
        prop_assert_eq!(check(&env, &ring).expect_err("refused").code().as_str(), "signature_invalid");
    }
}

/// A P-256 key of the tests, as an HSM or a KMS would hold it.
fn p256_key(seed: u8) -> (p256::ecdsa::SigningKey, crate::trust::key::PublicKey) {
    let sk = p256::ecdsa::SigningKey::from_slice(&[seed; 32]).expect("scalar");
    let pk = crate::trust::key::PublicKey::P256(*sk.verifying_key());
    (sk, pk)
}

fn p256_sign(env: &mut Envelope, sk: &p256::ecdsa::SigningKey, pk: &crate::trust::key::PublicKey) {
    use p256::ecdsa::signature::Signer as _;
    let sig: p256::ecdsa::Signature = sk.sign(&env.signing_input().expect("input"));
    env.push_signature(pk.id(), sig.to_der().as_bytes());
}

#[test]
fn p256_signatures_verify_and_count_toward_thresholds_with_ed25519_ones() {
    let ed = KeyPair::from_seed(&[1; 32]);
    let (sk, pk) = p256_key(9);
    let mut ring = KeyRing::new();
    ring.add(KeyRole::Release, &ed.public()).expect("ed25519");
    ring.insert(KeyRole::Release, pk.clone());
    let mut env = ed.sign("t", b"payload");
    p256_sign(&mut env, &sk, &pk);
    let v = verify(
        &env,
        "t",
        &ring,
        KeyRole::Release,
        2,
        &DsseLimits::default(),
    )
    .expect("2 of 2");
    assert_eq!(v.signers().len(), 2);
    // A P-256 signature alone, and one over other bytes.
    let mut only = Envelope::unsigned("t", b"payload");
    p256_sign(&mut only, &sk, &pk);
    verify(
        &only,
        "t",
        &ring,
        KeyRole::Release,
        1,
        &DsseLimits::default(),
    )
    .expect("p256 alone");
    let mut forged = only.clone();
    forged.payload = B64.encode(b"other payload");
    assert!(matches!(
        verify(
            &forged,
            "t",
            &ring,
            KeyRole::Release,
            1,
            &DsseLimits::default()
        ),
        Err(DsseError::SignatureInvalid { .. })
    ));
    // The fixed r || s form is not DER: malformed, not invalid.
    let mut raw = Envelope::unsigned("t", b"payload");
    use p256::ecdsa::signature::Signer as _;
    let sig: p256::ecdsa::Signature = sk.sign(&raw.signing_input().expect("input"));
    raw.push_signature(pk.id(), &sig.to_bytes());
    assert!(matches!(
        verify(
            &raw,
            "t",
            &ring,
            KeyRole::Release,
            1,
            &DsseLimits::default()
        ),
        Err(DsseError::SignatureMalformed { .. })
    ));
}

#[test]
fn a_release_signed_by_both_algorithms_verifies_for_a_client_that_knows_only_ed25519() {
    // What a client from before P-256 holds: the Ed25519 release key only. The P-256
    // signature names a key it does not know, and is passed over.
    let ed = KeyPair::from_seed(&[1; 32]);
    let (sk, pk) = p256_key(9);
    let mut old_ring = KeyRing::new();
    old_ring
        .add(KeyRole::Release, &ed.public())
        .expect("ed25519");
    let mut env = ed.sign("t", b"payload");
    p256_sign(&mut env, &sk, &pk);
    let v = verify(
        &env,
        "t",
        &old_ring,
        KeyRole::Release,
        1,
        &DsseLimits::default(),
    )
    .expect("the ed25519 signature counts");
    assert_eq!(v.signers(), &[ed.id()]);
}
