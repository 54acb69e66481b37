//! What a device reports and what ops read of it: telemetry events with the receipts a server
//! gives, a model's fleet health and deny list as the admin API answers them.

use std::path::Path;

use ferry_server::keys;

/// Each event with a valid receipt made with the online key of the server whose data directory
/// is `data` (what a device holds after resolving); anything that is not an object is kept as
/// it is.
pub fn with_receipts_of(data: &Path, events: &[serde_json::Value]) -> Vec<serde_json::Value> {
    let online = keys::load(&data.join("keys/online.key")).expect("online key");
    let key = ferry_server::fleet::intake::receipt::ReceiptKey::derive(&online.pair);
    events
        .iter()
        .map(|e| {
            if !e.is_object() {
                return e.clone();
            }
            let field = |k: &str| e[k].as_str().unwrap_or("").to_string();
            let mut variants = vec![field("variant")];
            if let Some(t) = e["to_variant"].as_str() {
                variants.push(t.to_string());
            }
            let names: Vec<&str> = variants.iter().map(String::as_str).collect();
            let mut out = e.clone();
            let (install_id, model, release) =
                (field("install_id"), field("model"), field("release"));
            let (platform, soc, device_model) =
                (field("platform"), field("soc"), field("device_model"));
            let facts = ferry_server::fleet::intake::receipt::Facts {
                install_id: &install_id,
                model: &model,
                release: &release,
                platform: &platform,
                soc: &soc,
                device_model: &device_model,
            };
            out["receipt"] = key.issue(&facts, &names).into();
            out
        })
        .collect()
}

/// `GET /v1/admin/models/{model}/health` of the server at `url` (a replica, or a server in a
/// process of its own), read with `token`.
pub fn model_health(url: &str, model: &str, token: &str) -> serde_json::Value {
    let mut r = ureq::get(format!("{url}/v1/admin/models/{model}/health"))
        .header("authorization", format!("Bearer {token}"))
        .call()
        .expect("health");
    serde_json::from_reader(r.body_mut().as_reader()).expect("json")
}

/// The variant rows of `health` (a model's health), of release `release` only when given.
pub fn variant_rows(health: &serde_json::Value, release: Option<&str>) -> Vec<serde_json::Value> {
    health["releases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| release.is_none_or(|want| r["release"] == want))
        .flat_map(|r| r["variants"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// The deny entries in force for `model` on the server at `url`, read with `token`.
pub fn deny_entries(url: &str, model: &str, token: &str) -> Vec<serde_json::Value> {
    let mut r = ureq::get(format!("{url}/v1/admin/models/{model}/deny"))
        .header("authorization", format!("Bearer {token}"))
        .call()
        .expect("deny list");
    let list: serde_json::Value = serde_json::from_reader(r.body_mut().as_reader()).expect("json");
    list["entries"].as_array().cloned().expect("entries")
}
