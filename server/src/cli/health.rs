//! `ferry health MODEL`.

use std::process::ExitCode;

use anyhow::Context as _;
use ferry_shared::select::rollout::RolloutPlan;

use super::remote::{Remote, admin_call};
use super::rollout::print_plan;

pub(crate) fn health_cmd(
    model: &str,
    since: Option<&str>,
    json: bool,
    remote: &Remote,
) -> anyhow::Result<ExitCode> {
    let v = health_of(model, since, remote)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(p) = v.get("rollout").filter(|p| !p.is_null()) {
        let plan: RolloutPlan = serde_json::from_value(p.clone())
            .context("the server's rollout is not a rollout plan")?;
        print_plan(&plan);
    }
    if let Some(w) = v.get("window").filter(|w| !w.is_null()) {
        println!(
            "window: since {} (buckets from {})",
            w["since"].as_str().unwrap_or("?"),
            w["from"].as_str().unwrap_or("?")
        );
    }
    let cohorts: Vec<String> = v["cohort_sizes"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if !cohorts.is_empty() {
        println!("cohort devices: {}", cohorts.join(", "));
    }
    // Devices whose wall clock is off (they still get their model: docs/client.md).
    if let Some(reporting) = v["clocks"]["reporting"].as_u64().filter(|n| *n > 0) {
        println!(
            "device clocks: {} of {reporting} reporting devices more than 5 minutes off",
            v["clocks"]["skewed"].as_u64().unwrap_or(0)
        );
    }
    let c = &v["crash_compare"];
    if c["staged_crashed"].as_u64().unwrap_or(0) + c["baseline_crashed"].as_u64().unwrap_or(0) > 0 {
        println!(
            "native crashes: staged {} of {} devices ({:.1}%), baseline {} of {} ({:.1}%)",
            c["staged_crashed"],
            c["staged_devices"],
            c["staged_rate"].as_f64().unwrap_or(0.0) * 100.0,
            c["baseline_crashed"],
            c["baseline_devices"],
            c["baseline_rate"].as_f64().unwrap_or(0.0) * 100.0
        );
    }
    if v["releases"].as_array().is_none_or(Vec::is_empty) {
        println!(
            "no load reported with a receipt yet{}",
            if v["window"].is_object() {
                " in this window"
            } else {
                ""
            }
        );
    }
    for r in v["releases"].as_array().into_iter().flatten() {
        let crashes = r["crashes"].as_u64().unwrap_or(0);
        if crashes > 0 {
            println!(
                "release {}  crashes {crashes} on {} of {} devices ({:.1}%)",
                r["release"].as_str().unwrap_or(""),
                r["crash_devices"],
                r["devices"],
                r["crash_rate"].as_f64().unwrap_or(0.0) * 100.0
            );
        } else {
            println!("release {}", r["release"].as_str().unwrap_or(""));
        }
        for x in r["variants"].as_array().into_iter().flatten() {
            println!(
                "  {:<16} {:<9} devices {:>6}  loads {:>7}  failures {:>5.1}%  fallbacks {:>5.1}%  crashes {:>4}  p50 {} ms  p95 {} ms",
                x["variant"].as_str().unwrap_or(""),
                x["delegate"].as_str().unwrap_or(""),
                x["devices"],
                x["loads"],
                x["failure_rate"].as_f64().unwrap_or(0.0) * 100.0,
                x["fallback_rate"].as_f64().unwrap_or(0.0) * 100.0,
                x["crashes"].as_u64().unwrap_or(0),
                ms(&x["load_ms"]["p50"]),
                ms(&x["load_ms"]["p95"])
            );
            let stages: Vec<String> = x["crash_stages"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, n)| format!("{} {n}", super::remote::sanitize(k)))
                .collect();
            if !stages.is_empty() {
                println!(
                    "    crashed on {} devices, at {}",
                    x["crash_devices"],
                    stages.join(", ")
                );
            }
            inference_lines(x);
        }
    }
    for d in v["deny"].as_array().into_iter().flatten() {
        let why = match serde_json::from_value::<ferry_shared::select::deny::DenyEntry>(d.clone()) {
            Ok(e) if e.kind != ferry_shared::select::deny::DenyKind::Fallback => e.reason(),
            _ => format!(
                "{:.0}% fallback, n={}",
                d["fallback_rate"].as_f64().unwrap_or(0.0) * 100.0,
                d["samples"]
            ),
        };
        println!(
            "  {} {} {} on {} {} ({}): {why}",
            d["state"].as_str().unwrap_or(""),
            d["release"].as_str().unwrap_or(""),
            d["variant"].as_str().unwrap_or(""),
            d["class"].as_str().unwrap_or(""),
            d["value"].as_str().unwrap_or(""),
            d["source"].as_str().unwrap_or(""),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The server's health view of `model`, for the window `since` (everything when `None`).
pub(crate) fn health_of(
    model: &str,
    since: Option<&str>,
    remote: &Remote,
) -> anyhow::Result<serde_json::Value> {
    let query = since.map_or(String::new(), |s| {
        format!(
            "?since={}",
            s.bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect::<String>()
        )
    });
    admin_call(
        remote,
        "GET",
        &format!("/v1/admin/models/{model}/health{query}"),
        None,
    )
}

/// A load time for people: one decimal, or `-` without samples.
fn ms(v: &serde_json::Value) -> String {
    v.as_f64()
        .map_or_else(|| "-".to_string(), |x| format!("{x:.1}"))
}

/// A variant's field latency, when devices reported runs: the median and p95 of the devices'
/// warm p95s, the cold first call, sustained use, then the slowest device classes by SoC.
fn inference_lines(x: &serde_json::Value) {
    let i = &x["inference"];
    if !i.is_object() {
        return;
    }
    println!(
        "  {:<26} runs {:>7} from {} devices  warm p95 {} ms (p95 over devices {} ms)  cold p95 {} ms  sustained p95 {} ms",
        "",
        i["runs"],
        i["devices"],
        ms(&i["warm_p95_ms"]["p50"]),
        ms(&i["warm_p95_ms"]["p95"]),
        ms(&i["cold_ms"]["p95"]),
        ms(&i["sustained_p95_ms"]["p50"]),
    );
    if let (Some(b), Some(share)) = (i["budget_ms"].as_f64(), i["over_budget"].as_f64()) {
        println!(
            "  {:<26} budget {b} ms: {:.1}% of device windows over it",
            "",
            share * 100.0
        );
    }
    let mut socs: Vec<(&String, f64)> = x["by_soc"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, c)| Some((k, c["warm_p95_ms"]["p50"].as_f64()?)))
        .collect();
    socs.sort_by(|a, b| b.1.total_cmp(&a.1));
    if !socs.is_empty() {
        let shown: Vec<String> = socs
            .iter()
            .take(5)
            .map(|(k, v)| format!("{k} {v:.1} ms"))
            .collect();
        println!("  {:<26} slowest SoCs (warm p95): {}", "", shown.join(", "));
    }
}
