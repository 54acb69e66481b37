use super::*;

#[test]
fn unknown_schemes_are_named_and_paths_still_work() {
    let err = open("awskms:///alias/ferry").err().expect("unknown scheme");
    let e = err.downcast_ref::<SignerError>().expect("signer error");
    assert_eq!(e.kind, SignerErrorKind::Failed);
    assert!(e.message.contains("\"awskms\""), "{}", e.message);
    // A path that does not exist is a missing file, not a scheme.
    let err = open("/nonexistent/release.key").err().expect("missing");
    assert!(err.to_string().contains("cannot read key"), "{err:#}");
}

#[test]
fn ecdsa_signatures_normalise_to_der() {
    use p256::ecdsa::signature::Signer as _;
    let sk = p256::ecdsa::SigningKey::from_slice(&[3; 32]).expect("key");
    let sig: p256::ecdsa::Signature = sk.sign(b"m");
    let der = sig.to_der().as_bytes().to_vec();
    assert_eq!(p256_der(&der), Some(der.clone()));
    assert_eq!(p256_der(&sig.to_bytes()), Some(der));
    assert_eq!(p256_der(b"garbage"), None);
}

#[test]
fn pem_public_keys_of_both_algorithms_are_read() {
    use ed25519_dalek::pkcs8::EncodePublicKey as _;
    let ed = ed25519_dalek::SigningKey::from_bytes(&[5; 32]).verifying_key();
    let pem = ed
        .to_public_key_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .expect("pem");
    let k = public_from_pem(&pem).expect("ed25519");
    assert_eq!(k.to_bytes(), ed.as_bytes().to_vec());
    let p = *p256::ecdsa::SigningKey::from_slice(&[3; 32])
        .expect("key")
        .verifying_key();
    let pem = p256::pkcs8::EncodePublicKey::to_public_key_pem(&p, p256::pkcs8::LineEnding::LF)
        .expect("pem");
    assert_eq!(public_from_pem(&pem), Ok(PublicKey::P256(p)));
    assert!(public_from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----").is_err());
    assert!(public_from_pem("hello").is_err());
}

#[test]
fn a_pin_value_never_shows_in_what_ferry_prints() {
    assert_eq!(
        super::redact("pkcs11:token=t;object=o?module-path=/m.so&pin-value=1234&x-a=b"),
        "pkcs11:token=t;object=o?module-path=/m.so&pin-value=***&x-a=b"
    );
    assert_eq!(
        super::redact("pkcs11:object=o?pin-value=12%2634&pin-value=9"),
        "pkcs11:object=o?pin-value=***&pin-value=***"
    );
    assert_eq!(super::redact("keys/release.key"), "keys/release.key");
    // An unknown scheme echoes the spec without its PIN.
    let e = super::open("PKCS11:object=o?module-path=/m.so&pin-value=secret-pin")
        .err()
        .expect("unknown scheme");
    assert!(!format!("{e:#}").contains("secret-pin"), "{e:#}");
    let e = super::open("pkcs11:object=o?module-path=/m.so&pin-value=secret%ZZ")
        .err()
        .expect("bad escape");
    assert!(!format!("{e:#}").contains("secret"), "{e:#}");
}

#[test]
fn a_pkcs11_uri_gives_each_attribute_once_and_one_pin_source() {
    for bad in [
        "object=a;object=b?module-path=/m.so",
        "object=a?module-path=/m.so&module-path=/n.so",
        "object=a?module-path=/m.so&pin-value=1&pin-source=file:/p",
    ] {
        assert!(super::pkcs11::Pkcs11Uri::parse(bad).is_err(), "{bad}");
    }
}
