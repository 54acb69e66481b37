//! A key in a PKCS#11 token (an HSM, a smart card, SoftHSM), named by an RFC 7512 URI:
//!
//! `pkcs11:token=ferry;object=release?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/run/pin`
//!
//! - path attributes (before `?`, separated by `;`): `token`, `manufacturer`, `serial`,
//!   `model`, `slot-id` choose the token (the first that matches all given); `object` (the
//!   label), `id` (percent-encoded bytes) and `type` (`private`, the default) choose the key.
//!   Vendor attributes (`x-…`) are ignored; any other is an error.
//! - query attributes (after `?`, separated by `&`): `module-path` (the token's PKCS#11
//!   library; required), `pin-value`, `pin-source` (`file:PATH` or a path: the first line of
//!   the file). Without either, the PIN comes from `FERRY_PKCS11_PIN`.
//!
//! The key's algorithm comes from the token: an `EC_EDWARDS` key on edwards25519 signs with
//! `CKM_EDDSA`, an `EC` key on P-256 with `CKM_ECDSA` over the SHA-256 of the message (its
//! `r ‖ s` is turned into DER). The public key is read from the public key object with the
//! same label and id. The private key never leaves the token.

use std::fmt::Write as _;

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error as CkError, RvError};
use cryptoki::mechanism::Mechanism;
use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use ferry_shared::trust::key::{Algorithm, PublicKey};
use sha2::Digest as _;

use super::source::{Signer, SignerError, SignerErrorKind};

/// Where `FERRY_PKCS11_PIN` is read when the URI names no PIN.
pub const PIN_ENV: &str = "FERRY_PKCS11_PIN";

/// DER of the object identifier 1.3.101.112 (Ed25519).
const OID_ED25519: &[u8] = &[0x06, 0x03, 0x2b, 0x65, 0x70];
/// DER of the printable string "edwards25519" (how PKCS#11 3.0 tokens may name the curve).
const NAME_ED25519: &[u8] = b"\x13\x0cedwards25519";
/// DER of the object identifier 1.2.840.10045.3.1.7 (P-256, prime256v1).
const OID_P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// A parsed `pkcs11:` URI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pkcs11Uri {
    /// Token label.
    pub token: Option<String>,
    /// Token manufacturer.
    pub manufacturer: Option<String>,
    /// Token serial number.
    pub serial: Option<String>,
    /// Token model.
    pub model: Option<String>,
    /// Slot number.
    pub slot_id: Option<u64>,
    /// Key label.
    pub object: Option<String>,
    /// Key id bytes.
    pub id: Option<Vec<u8>>,
    /// The PKCS#11 library.
    pub module_path: Option<String>,
    /// A PIN given inline.
    pub pin_value: Option<String>,
    /// Where to read the PIN.
    pub pin_source: Option<String>,
}

fn failed(message: String) -> SignerError {
    SignerError::new(SignerErrorKind::Failed, message)
}

/// Decodes the `%XX` escapes of attribute `name`'s value (errors name the attribute, never
/// the value: it may be a PIN).
fn unescape(name: &str, raw: &str) -> Result<Vec<u8>, SignerError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    failed(format!(
                        "pkcs11: URI: bad %-escape in {name} (a '%' takes two hex digits)"
                    ))
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn text(name: &str, raw: &str) -> Result<String, SignerError> {
    String::from_utf8(unescape(name, raw)?)
        .map_err(|_| failed(format!("pkcs11: URI: {name} is not UTF-8")))
}

impl Pkcs11Uri {
    /// Parses what follows `pkcs11:`.
    pub fn parse(rest: &str) -> Result<Self, SignerError> {
        if rest.len() > 4096 {
            return Err(failed("pkcs11: URI longer than 4096 characters".into()));
        }
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut uri = Pkcs11Uri::default();
        let mut seen: Vec<String> = Vec::new();
        let mut once = |name: &str| -> Result<(), SignerError> {
            if seen.iter().any(|s| s == name) {
                return Err(failed(format!("pkcs11: URI: {name} is given twice")));
            }
            seen.push(name.to_string());
            Ok(())
        };
        for attr in path.split(';').filter(|a| !a.is_empty()) {
            let (name, value) = attr.split_once('=').ok_or_else(|| {
                failed(format!(
                    "pkcs11: URI: a path attribute has no '=' ({})",
                    attr.chars().take(24).collect::<String>()
                ))
            })?;
            once(name)?;
            match name {
                "token" => uri.token = Some(text(name, value)?),
                "manufacturer" => uri.manufacturer = Some(text(name, value)?),
                "serial" => uri.serial = Some(text(name, value)?),
                "model" => uri.model = Some(text(name, value)?),
                "object" => uri.object = Some(text(name, value)?),
                "id" => uri.id = Some(unescape(name, value)?),
                "slot-id" => {
                    uri.slot_id = Some(value.parse().map_err(|_| {
                        failed(format!("pkcs11: URI: slot-id {value:?} is not a number"))
                    })?);
                }
                "type" => {
                    if value != "private" {
                        return Err(failed(format!(
                            "pkcs11: URI: type={value}: ferry signs with a private key \
                             (type=private)"
                        )));
                    }
                }
                "library-manufacturer"
                | "library-description"
                | "library-version"
                | "slot-description"
                | "slot-manufacturer" => {}
                n if n.starts_with("x-") => {}
                other => {
                    return Err(failed(format!(
                        "pkcs11: URI: unknown attribute {other:?} (RFC 7512 path attributes: \
                         token, manufacturer, serial, model, slot-id, object, id, type)"
                    )));
                }
            }
        }
        for attr in query.split('&').filter(|a| !a.is_empty()) {
            let (name, value) = attr
                .split_once('=')
                .ok_or_else(|| failed("pkcs11: URI: a query attribute has no '='".to_string()))?;
            once(name)?;
            match name {
                "module-path" => uri.module_path = Some(text(name, value)?),
                "pin-value" => uri.pin_value = Some(text(name, value)?),
                "pin-source" => uri.pin_source = Some(text(name, value)?),
                "module-name" => {
                    return Err(failed(
                        "pkcs11: URI: give the library with module-path (module-name lookup \
                         is not supported)"
                            .into(),
                    ));
                }
                n if n.starts_with("x-") => {}
                other => {
                    return Err(failed(format!(
                        "pkcs11: URI: unknown query attribute {other:?} (module-path, \
                         pin-value, pin-source)"
                    )));
                }
            }
        }
        if uri.pin_value.is_some() && uri.pin_source.is_some() {
            return Err(failed(
                "pkcs11: URI: give pin-value or pin-source, not both".into(),
            ));
        }
        if uri.object.is_none() && uri.id.is_none() {
            return Err(failed(
                "pkcs11: URI names no key: give object=LABEL (or id=…)".into(),
            ));
        }
        if uri.module_path.is_none() {
            return Err(failed(
                "pkcs11: URI names no library: add ?module-path=/path/to/the-token-library.so"
                    .into(),
            ));
        }
        Ok(uri)
    }

    /// The URI without any PIN, for messages.
    pub fn describe(&self) -> String {
        let mut s = String::from("pkcs11:");
        if let Some(t) = &self.token {
            let _ = write!(s, "token={t};");
        }
        if let Some(o) = &self.object {
            let _ = write!(s, "object={o};");
        }
        if let Some(id) = &self.id {
            let _ = write!(s, "id={};", hex::encode(id));
        }
        s.pop();
        s
    }

    fn pin(&self) -> Result<String, SignerError> {
        if let Some(p) = &self.pin_value {
            return Ok(p.clone());
        }
        if let Some(src) = &self.pin_source {
            let path = src.strip_prefix("file:").unwrap_or(src);
            let text = std::fs::read_to_string(path).map_err(|e| {
                SignerError::new(
                    SignerErrorKind::Refused,
                    format!("cannot read the PIN from pin-source {path}: {e}"),
                )
            })?;
            return Ok(text.lines().next().unwrap_or_default().to_string());
        }
        std::env::var(PIN_ENV).map_err(|_| {
            SignerError::new(
                SignerErrorKind::Refused,
                format!(
                    "{}: no PIN: add pin-source=file:PATH (or pin-value=…) to the URI, or set \
                     {PIN_ENV}",
                    self.describe()
                ),
            )
        })
    }
}

/// A key in a PKCS#11 token.
pub struct Pkcs11Signer {
    uri: Pkcs11Uri,
    session: Session,
    key: ObjectHandle,
    public: PublicKey,
    // Kept alive as long as the session.
    _ctx: Pkcs11,
}

impl std::fmt::Debug for Pkcs11Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.uri.describe())
    }
}

fn ck(uri: &Pkcs11Uri, what: &str, e: CkError) -> SignerError {
    let kind = match &e {
        CkError::Pkcs11(
            RvError::PinIncorrect
            | RvError::PinLocked
            | RvError::PinLenRange
            | RvError::PinExpired
            | RvError::PinInvalid,
            _,
        ) => SignerErrorKind::Refused,
        CkError::LibraryLoading(_)
        | CkError::Pkcs11(
            RvError::TokenNotPresent
            | RvError::DeviceRemoved
            | RvError::DeviceError
            | RvError::SlotIdInvalid
            | RvError::TokenNotRecognized,
            _,
        ) => SignerErrorKind::Unreachable,
        _ => SignerErrorKind::Failed,
    };
    let said = match &e {
        CkError::Pkcs11(RvError::PinIncorrect, _) => "the token refused the PIN".to_string(),
        CkError::Pkcs11(RvError::PinLocked, _) => {
            "the token is locked (too many wrong PINs); its security officer must unlock it"
                .to_string()
        }
        other => other.to_string(),
    };
    SignerError::new(kind, format!("{}: {what}: {said}", uri.describe()))
}

impl Pkcs11Signer {
    /// Opens the token and finds the key `rest` (what follows `pkcs11:`) names; logs in.
    pub fn open(rest: &str) -> Result<Self, SignerError> {
        let uri = Pkcs11Uri::parse(rest)?;
        let module = uri.module_path.clone().unwrap_or_default();
        if !std::path::Path::new(&module).exists() {
            return Err(SignerError::new(
                SignerErrorKind::Unreachable,
                format!("{}: no PKCS#11 library at {module}", uri.describe()),
            ));
        }
        let ctx = context(&uri, &module)?;
        let slot = find_slot(&ctx, &uri)?;
        let info = ctx
            .get_token_info(slot)
            .map_err(|e| ck(&uri, "cannot read the token", e))?;
        if info.user_pin_locked() {
            return Err(SignerError::new(
                SignerErrorKind::Refused,
                format!(
                    "{}: the token's user PIN is locked; its security officer must unlock it",
                    uri.describe()
                ),
            ));
        }
        let session = ctx
            .open_ro_session(slot)
            .map_err(|e| ck(&uri, "cannot open a session", e))?;
        let pin_text = uri.pin()?;
        let pin_digest: [u8; 32] = sha2::Sha256::digest(pin_text.as_bytes()).into();
        let pin = AuthPin::from(pin_text);
        // Login is per token and process: a second key of a token already logged in (the old
        // and the new root of a rotation) shares it, and the token does not check the second
        // PIN, so ferry does: it must be the one that logged in.
        let token = (module.clone(), slot.id());
        match session.login(UserType::User, Some(&pin)) {
            Ok(()) => {
                logged_in(token, Some(pin_digest));
            }
            Err(CkError::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => {
                if logged_in(token, None) != Some(pin_digest) {
                    return Err(SignerError::new(
                        SignerErrorKind::Refused,
                        format!(
                            "{}: PIN refused: the token is already logged in for another key \
                             of this command with another PIN (a token has one user PIN)",
                            uri.describe()
                        ),
                    ));
                }
            }
            Err(e) => return Err(ck(&uri, "login", e)),
        }
        let key = find_one(&session, &uri, ObjectClass::PRIVATE_KEY)?;
        let public_obj = find_one(&session, &uri, ObjectClass::PUBLIC_KEY)?;
        let public = read_public(&session, &uri, public_obj)?;
        Ok(Pkcs11Signer {
            uri,
            session,
            key,
            public,
            _ctx: ctx,
        })
    }
}

/// The SHA-256 of the PIN each token (library, slot) was logged in with by this process:
/// records `pin` when given, and returns what is recorded.
fn logged_in(token: (String, u64), pin: Option<[u8; 32]>) -> Option<[u8; 32]> {
    /// A token (library, slot id) and the digest of the PIN it was logged in with.
    type Login = ((String, u64), [u8; 32]);
    static LOGINS: std::sync::Mutex<Vec<Login>> = std::sync::Mutex::new(Vec::new());
    let mut held = LOGINS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(p) = pin {
        held.retain(|(t, _)| *t != token);
        held.push((token.clone(), p));
    }
    held.iter().find(|(t, _)| *t == token).map(|(_, p)| *p)
}

/// One initialised context per library for the whole process: `C_Initialize` may run once, and
/// a rotation can hold two keys of one token (the old root and the new).
fn context(uri: &Pkcs11Uri, module: &str) -> Result<Pkcs11, SignerError> {
    static CONTEXTS: std::sync::Mutex<Vec<(String, Pkcs11)>> = std::sync::Mutex::new(Vec::new());
    let mut held = CONTEXTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, ctx)) = held.iter().find(|(m, _)| m == module) {
        return Ok(ctx.clone());
    }
    // A library that loads but is no PKCS#11 module (a wrong path) reaches no token either.
    let ctx = Pkcs11::new(module).map_err(|e| SignerError {
        kind: SignerErrorKind::Unreachable,
        ..ck(uri, "cannot load the library (is it a PKCS#11 module?)", e)
    })?;
    match ctx.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK)) {
        Ok(()) | Err(CkError::Pkcs11(RvError::CryptokiAlreadyInitialized, _)) => {}
        Err(e) => return Err(ck(uri, "cannot initialise the library", e)),
    }
    held.push((module.to_string(), ctx.clone()));
    Ok(ctx)
}

fn find_slot(ctx: &Pkcs11, uri: &Pkcs11Uri) -> Result<Slot, SignerError> {
    let slots = ctx
        .get_slots_with_token()
        .map_err(|e| ck(uri, "cannot list the slots", e))?;
    let mut seen = Vec::new();
    for slot in slots {
        let Ok(info) = ctx.get_token_info(slot) else {
            continue;
        };
        let fits = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        if uri.slot_id.is_none_or(|id| id == slot.id())
            && fits(&uri.token, info.label())
            && fits(&uri.manufacturer, info.manufacturer_id())
            && fits(&uri.serial, info.serial_number())
            && fits(&uri.model, info.model())
        {
            return Ok(slot);
        }
        seen.push(format!("{:?}", info.label()));
    }
    Err(SignerError::new(
        SignerErrorKind::Unreachable,
        format!(
            "{}: no such token in {} (tokens present: {})",
            uri.describe(),
            uri.module_path.as_deref().unwrap_or_default(),
            if seen.is_empty() {
                "none".to_string()
            } else {
                seen.join(", ")
            }
        ),
    ))
}

fn find_one(
    session: &Session,
    uri: &Pkcs11Uri,
    class: ObjectClass,
) -> Result<ObjectHandle, SignerError> {
    let mut template = vec![Attribute::Class(class)];
    if let Some(label) = &uri.object {
        template.push(Attribute::Label(label.as_bytes().to_vec()));
    }
    if let Some(id) = &uri.id {
        template.push(Attribute::Id(id.clone()));
    }
    let found = session
        .find_objects(&template)
        .map_err(|e| ck(uri, "cannot search the token", e))?;
    let what = if class == ObjectClass::PRIVATE_KEY {
        "private"
    } else {
        "public"
    };
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err(failed(format!(
            "{}: the token holds no {what} key with this label/id (create it there first: \
             docs/keys.md)",
            uri.describe()
        ))),
        many => Err(failed(format!(
            "{}: {} {what} keys match; add id=… to the URI to choose one",
            uri.describe(),
            many.len()
        ))),
    }
}

/// Reads the public key object's curve and point.
fn read_public(
    session: &Session,
    uri: &Pkcs11Uri,
    obj: ObjectHandle,
) -> Result<PublicKey, SignerError> {
    let attrs = session
        .get_attributes(
            obj,
            &[
                AttributeType::KeyType,
                AttributeType::EcParams,
                AttributeType::EcPoint,
            ],
        )
        .map_err(|e| ck(uri, "cannot read the public key", e))?;
    let (mut key_type, mut params, mut point) = (None, Vec::new(), Vec::new());
    for a in attrs {
        match a {
            Attribute::KeyType(t) => key_type = Some(t),
            Attribute::EcParams(p) => params = p,
            Attribute::EcPoint(p) => point = p,
            _ => {}
        }
    }
    let unsupported = || {
        failed(format!(
            "{}: the key is not an Ed25519 or P-256 key (ferry signs with ed25519 and \
             ecdsa-p256-sha256)",
            uri.describe()
        ))
    };
    let point = unwrap_octets(&point);
    if key_type == Some(KeyType::EC_EDWARDS) && (params == OID_ED25519 || params == NAME_ED25519) {
        return PublicKey::from_bytes(&Algorithm::Ed25519, point)
            .map_err(|e| failed(format!("{}: {e}", uri.describe())));
    }
    if key_type == Some(KeyType::EC) && params == OID_P256 {
        return PublicKey::p256_from_sec1(point)
            .map_err(|e| failed(format!("{}: {e}", uri.describe())));
    }
    Err(unsupported())
}

/// `CKA_EC_POINT` is a DER OCTET STRING around the point (some tokens give the bare point).
fn unwrap_octets(raw: &[u8]) -> &[u8] {
    match raw {
        [0x04, len, rest @ ..] if usize::from(*len) == rest.len() && rest.len() < 0x80 => {
            // A bare uncompressed P-256 point (65 bytes) starts with 0x04 too.
            if raw.len() == 65 { raw } else { rest }
        }
        _ => raw,
    }
}

impl Signer for Pkcs11Signer {
    fn public(&self) -> PublicKey {
        self.public.clone()
    }

    fn describe(&self) -> String {
        self.uri.describe()
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignerError> {
        match self.public.algorithm() {
            Algorithm::Ed25519 => {
                let mech = Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure));
                self.session
                    .sign(&mech, self.key, message)
                    .map_err(|e| ck(&self.uri, "C_Sign", e))
            }
            _ => {
                let digest = sha2::Sha256::digest(message);
                let raw = self
                    .session
                    .sign(&Mechanism::Ecdsa, self.key, &digest)
                    .map_err(|e| ck(&self.uri, "C_Sign", e))?;
                super::source::p256_der(&raw).ok_or_else(|| {
                    failed(format!(
                        "{}: the token's ECDSA signature is {} bytes, neither r ‖ s nor DER",
                        self.uri.describe(),
                        raw.len()
                    ))
                })
            }
        }
    }
}

#[cfg(test)]
mod tests;
