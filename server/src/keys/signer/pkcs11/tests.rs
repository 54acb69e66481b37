use super::*;

#[test]
fn uris_parse_with_escapes_and_refuse_what_they_cannot_use() {
    let u = Pkcs11Uri::parse(
        "token=my%20token;object=release;id=%01%02?module-path=/lib/x.so&pin-source=file:/p",
    )
    .expect("parse");
    assert_eq!(u.token.as_deref(), Some("my token"));
    assert_eq!(u.object.as_deref(), Some("release"));
    assert_eq!(u.id.as_deref(), Some(&[1u8, 2][..]));
    assert_eq!(u.module_path.as_deref(), Some("/lib/x.so"));
    assert_eq!(u.pin_source.as_deref(), Some("file:/p"));
    assert_eq!(u.describe(), "pkcs11:token=my token;object=release;id=0102");
    for bad in [
        "token=a?pin-value=1",                    // no object, no library
        "object=a",                               // no library
        "object=a;colour=red?module-path=/x",     // unknown attribute
        "object=a?module-path=/x&frobnicate=1",   // unknown query attribute
        "object=%zz?module-path=/x",              // bad escape
        "object=a;type=public?module-path=/x",    // not a private key
        "object=a;slot-id=twelve?module-path=/x", // not a number
        "object?module-path=/x",                  // no '='
    ] {
        assert!(Pkcs11Uri::parse(bad).is_err(), "{bad}");
    }
    assert!(Pkcs11Uri::parse(&"x".repeat(5000)).is_err());
    // A PIN never shows in messages.
    let u = Pkcs11Uri::parse("object=a?module-path=/x&pin-value=secret").expect("parse");
    assert!(!u.describe().contains("secret"));
}

#[test]
fn ec_points_are_unwrapped_from_their_octet_string() {
    let wrapped_ed = [&[0x04, 0x20][..], &[9u8; 32]].concat();
    assert_eq!(unwrap_octets(&wrapped_ed), &[9u8; 32]);
    let bare_p256 = [&[0x04][..], &[7u8; 64]].concat();
    assert_eq!(unwrap_octets(&bare_p256), &bare_p256[..]);
    let wrapped_p256 = [&[0x04, 0x41][..], &bare_p256].concat();
    assert_eq!(unwrap_octets(&wrapped_p256), &bare_p256[..]);
}
