//! The typed JVM API (issue 33): `Device` and `LoadOptions` builders, `loadAsync` returning a
//! `CompletableFuture`, and `ErrorCode`, an enum of the whole catalogue with `UNKNOWN` for a
//! newer library's codes. `client/jvm/src/dev/ferry/ErrorCode.java` is generated from
//! `shared/src/errors.rs` and kept current here (`FERRY_BLESS=1` rewrites it).

use ferry_shared::errors::ErrorCode;
use ferry_tests::app::{Options, TestApp};

use crate::bindings::jvm::{compile, java, root};

/// The catalogue's codes with their doc lines, read from `shared/src/errors.rs` (the macro's
/// `/// doc` lines before each `Variant = "code",`), in catalogue order.
fn catalogue() -> Vec<(String, String)> {
    let src = std::fs::read_to_string(root().join("shared/src/errors.rs")).expect("errors.rs");
    let body = src.split("catalogue! {").nth(1).expect("the catalogue");
    let mut docs: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for line in body.lines().map(str::trim) {
        if let Some(d) = line.strip_prefix("///") {
            docs.push(d.trim().to_string());
        } else if let Some((_, rest)) = line.split_once(" = \"") {
            let code = rest.trim_end_matches("\",").to_string();
            out.push((code, docs.join(" ")));
            docs.clear();
        } else if line == "}" {
            break;
        }
    }
    out
}

/// The Java source of `dev.ferry.ErrorCode`.
fn java_enum(codes: &[(String, String)]) -> String {
    let mut s = String::from(
        "// Generated from shared/src/errors.rs by tests/tests/e2e/bindings/jvm_typed.rs; do not edit.\n\
         // Regenerate: FERRY_BLESS=1 cargo test -p ferry-tests --test e2e jvm_typed\n\
         package dev.ferry;\n\n\
         /**\n * Every error code of ferry's catalogue (docs/errors.md), to switch on. A code this\n\
         \x20* binding does not know (from a newer library) is {@link #UNKNOWN}; the exception's\n\
         \x20* {@code code()} keeps its text.\n */\npublic enum ErrorCode {\n",
    );
    for (code, doc) in codes {
        let doc = doc.replace("*/", "* /").replace('@', "&#64;");
        s.push_str(&format!(
            "    /** {doc} */\n    {}(\"{code}\"),\n",
            code.to_uppercase()
        ));
    }
    s.push_str(
        "    /** A code this binding does not know; {@code FerryException.code()} has its text. */\n\
         \x20   UNKNOWN(null);\n\n\
         \x20   private final String code;\n\n\
         \x20   ErrorCode(String code) {\n        this.code = code;\n    }\n\n\
         \x20   /** The code's text on the wire ({@code null} for {@link #UNKNOWN}). */\n\
         \x20   public String code() {\n        return code;\n    }\n\n\
         \x20   /** The member for {@code text}: {@link #UNKNOWN} when none (or null). */\n\
         \x20   public static ErrorCode of(String text) {\n\
         \x20       if (text != null) {\n\
         \x20           for (ErrorCode c : values()) {\n\
         \x20               if (text.equals(c.code)) {\n                    return c;\n                }\n\
         \x20           }\n        }\n        return UNKNOWN;\n    }\n}\n",
    );
    s
}

#[test]
fn the_java_error_code_enum_is_the_catalogue() {
    let codes = catalogue();
    let texts: Vec<&str> = codes.iter().map(|(c, _)| c.as_str()).collect();
    let all: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(texts, all, "the parse of errors.rs follows the catalogue");
    let want = java_enum(&codes);
    let path = root().join("client/jvm/src/dev/ferry/ErrorCode.java");
    if std::env::var_os("FERRY_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "ErrorCode.java is stale: FERRY_BLESS=1 cargo test -p ferry-tests --test e2e jvm_typed"
    );
}

#[test]
fn the_typed_java_api_builds_loads_asynchronously_and_maps_error_codes() {
    let target = ferry_tests::ffi_library_dir();
    let work = tempfile::tempdir().expect("tmp");
    let classes = compile(work.path());
    let app = TestApp::start_with(Options {
        demo: true,
        keys: None,
        store: None,
        tweak: None,
    });
    let run = java(&classes, &target, "TypedApi", &app)
        .arg(work.path().join("cache"))
        .args(ErrorCode::ALL.iter().map(|c| c.as_str()))
        .output()
        .expect("run java");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains(&format!("known codes={}\n", ErrorCode::ALL.len())),
        "{stdout}"
    );
    assert!(!stdout.contains("not in the enum"), "{stdout}");
    assert!(
        stdout.contains("future code=UNKNOWN null=UNKNOWN"),
        "{stdout}"
    );
    assert!(
        stdout.contains("empty install id: installId must not be empty"),
        "{stdout}"
    );
    assert!(
        stdout.contains("bad probe: probe: candidates 1 to 16"),
        "{stdout}"
    );
    // The options' JSON is what the C ABI reads (unknown keys there are refused).
    assert!(
        stdout.contains(
            r#"options={"mode":"cached_or_download","require_unmetered":false,"require_charging":false,"unmetered":true,"power_saver":false}"#
        ),
        "{stdout}"
    );
    // The device model with a quote and an accent survived the JSON.
    assert!(
        stdout.contains("async variant=xnnpack-fp32 source=downloaded"),
        "{stdout}"
    );
    assert!(stdout.contains("outputs=16"), "{stdout}");
    assert!(stdout.contains("again source=cached"), "{stdout}");
    assert!(
        stdout.contains("missing model: errorCode=MODEL_NOT_FOUND code=model_not_found"),
        "{stdout}"
    );
    assert!(!stdout.contains("accepted {"), "{stdout}");
    assert!(
        stdout.contains("bad client options: CONFIG_INVALID"),
        "{stdout}"
    );
    assert!(
        stdout.contains("refused device: INVALID_ARGUMENT")
            && stdout.contains("unknown field `ram_MB`"),
        "{stdout}"
    );
    assert!(stdout.contains("install_id is empty"), "{stdout}");
}
