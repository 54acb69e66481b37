//! The committed JSON Schemas (`schemas/*.schema.json`), compiled with every schema
//! registered for `$ref`s, for the tests that check real messages against them.

/// The base URI the schemas' `$id`s live under.
pub const BASE: &str = "https://ferry.invalid/schemas/";

/// Every committed schema file: (file name, parsed schema).
pub fn schema_files() -> Vec<(String, serde_json::Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).expect("schemas dir").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".schema.json") {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(e.path()).expect("read"))
                    .expect("schema is JSON");
            out.push((name, v));
        }
    }
    out
}

/// A validator for `schema`, with every committed schema registered for `$ref`s.
pub fn validator_for(schema: &serde_json::Value) -> jsonschema::Validator {
    let mut builder = jsonschema::Registry::new();
    for (n, v) in schema_files() {
        builder = builder.add(format!("{BASE}{n}"), v).expect("valid uri");
    }
    let registry = builder.prepare().expect("registry");
    jsonschema::options()
        .with_registry(&registry)
        .build(schema)
        .unwrap_or_else(|e| panic!("schema does not compile: {e}"))
}

/// The validator of the schema file `name`.
pub fn validator(name: &str) -> jsonschema::Validator {
    let files = schema_files();
    let (_, schema) = files
        .iter()
        .find(|(n, _)| n == name)
        .expect("schema exists");
    validator_for(schema)
}

/// Asserts that `instance` is valid under the schema file `name`.
pub fn check(name: &str, instance: &serde_json::Value) {
    let v = validator(name);
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:?}\n{instance}");
}
