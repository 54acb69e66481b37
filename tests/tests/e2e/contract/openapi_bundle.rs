//! `schemas/openapi.bundled.json`: the OpenAPI document with every schema file it refers to
//! moved into `components/schemas`, for client generators that do not follow references to
//! other files. It is generated from `schemas/` here and kept current (`FERRY_BLESS=1`
//! rewrites it), so the two cannot drift.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

fn schemas_dir() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas")
}

/// `health.schema.json` → `Health`; `resolve-request.schema.json` → `ResolveRequest`;
/// a `$defs` entry is appended (`HealthClients`).
fn component(file: &str, def: Option<&str>) -> String {
    let stem = file.trim_end_matches(".schema.json");
    let pascal = |s: &str| -> String {
        s.split(['-', '_'])
            .filter(|w| !w.is_empty())
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_uppercase().chain(c).collect::<String>())
                    .unwrap_or_default()
            })
            .collect()
    };
    format!("{}{}", pascal(stem), def.map(pascal).unwrap_or_default())
}

/// Rewrites every `$ref` in `v` to a component; `file` is the file `v` came from (its own
/// `#/$defs/x` references), and every file met is added to `todo`.
fn rewrite(v: &mut Value, file: Option<&str>, todo: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get_mut("$ref") {
                let (target, pointer) = r.split_once('#').unwrap_or((r.as_str(), ""));
                let target = if target.is_empty() {
                    file
                } else {
                    Some(target)
                };
                if let Some(t) = target.filter(|t| t.ends_with(".schema.json")) {
                    let def = pointer.strip_prefix("/$defs/");
                    assert!(
                        pointer.is_empty() || def.is_some(),
                        "unsupported reference {r}"
                    );
                    todo.push(t.to_string());
                    *r = format!("#/components/schemas/{}", component(t, def));
                }
            }
            for (k, x) in map.iter_mut() {
                if k != "$ref" {
                    rewrite(x, file, todo);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|x| rewrite(x, file, todo)),
        _ => {}
    }
}

fn bundle() -> String {
    let read = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(schemas_dir().join(name)).expect("read"))
            .expect("json")
    };
    let mut doc = read("openapi.json");
    let mut todo = Vec::new();
    rewrite(&mut doc, None, &mut todo);
    let mut hoisted: BTreeMap<String, Value> = BTreeMap::new();
    let mut done = std::collections::BTreeSet::new();
    while let Some(file) = todo.pop() {
        if !done.insert(file.clone()) {
            continue;
        }
        let mut schema = read(&file);
        rewrite(&mut schema, Some(&file), &mut todo);
        let obj = schema.as_object_mut().expect("a schema object");
        obj.remove("$schema");
        obj.remove("$id");
        if let Some(Value::Object(defs)) = obj.remove("$defs") {
            for (name, def) in defs {
                hoisted.insert(component(&file, Some(&name)), def);
            }
        }
        hoisted.insert(component(&file, None), schema);
    }
    let components = doc["components"]["schemas"]
        .as_object_mut()
        .expect("components.schemas");
    for (name, schema) in hoisted {
        assert!(
            components.insert(name.clone(), schema).is_none(),
            "{name} is defined twice"
        );
    }
    format!(
        "{}\n",
        serde_json::to_string_pretty(&doc).expect("serialise")
    )
}

#[test]
fn the_bundled_document_is_current_and_self_contained() {
    let want = bundle();
    assert!(
        !want.contains(".schema.json\""),
        "a reference to another file is left"
    );
    let path = schemas_dir().join("openapi.bundled.json");
    if std::env::var_os("FERRY_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "schemas/openapi.bundled.json is stale: FERRY_BLESS=1 cargo test -p ferry-tests --test e2e openapi_bundle"
    );
    // Every in-document reference resolves.
    let doc: Value = serde_json::from_str(&want).expect("json");
    for part in want.split("\"$ref\": \"").skip(1) {
        let target = part.split('"').next().unwrap_or_default();
        let pointer = target.strip_prefix('#').expect("in-document");
        assert!(doc.pointer(pointer).is_some(), "dangling {target}");
    }
}
