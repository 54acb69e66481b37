//! `ferry health MODEL`.

use std::process::ExitCode;

use anyhow::Context as _;
use ferry_shared::rollout::RolloutPlan;

use super::remote::{Remote, admin_call};
use super::rollout::print_plan;

pub(crate) fn health_cmd(model: &str, json: bool, remote: &Remote) -> anyhow::Result<ExitCode> {
    let v = admin_call(
        remote,
        "GET",
        &format!("/v1/admin/models/{model}/health"),
        None,
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(p) = v.get("rollout").filter(|p| !p.is_null()) {
        let plan: RolloutPlan = serde_json::from_value(p.clone())
            .context("the server's rollout is not a rollout plan")?;
        print_plan(&plan);
    }
    println!("cohorts: {}", v["cohort_sizes"]);
    for r in v["releases"].as_array().into_iter().flatten() {
        println!("release {}", r["release"].as_str().unwrap_or(""));
        for x in r["variants"].as_array().into_iter().flatten() {
            println!(
                "  {:<16} {:<9} devices {:>6}  loads {:>7}  failures {:>5.1}%  fallbacks {:>5.1}%  p50 {} ms  p95 {} ms",
                x["variant"].as_str().unwrap_or(""),
                x["delegate"].as_str().unwrap_or(""),
                x["devices"],
                x["loads"],
                x["failure_rate"].as_f64().unwrap_or(0.0) * 100.0,
                x["fallback_rate"].as_f64().unwrap_or(0.0) * 100.0,
                x["load_ms"]["p50"],
                x["load_ms"]["p95"]
            );
        }
    }
    for d in v["deny"].as_array().into_iter().flatten() {
        println!(
            "  {} {} {} on {} {} ({}): {:.0}% fallback, n={}",
            d["state"].as_str().unwrap_or(""),
            d["release"].as_str().unwrap_or(""),
            d["variant"].as_str().unwrap_or(""),
            d["class"].as_str().unwrap_or(""),
            d["value"].as_str().unwrap_or(""),
            d["source"].as_str().unwrap_or(""),
            d["fallback_rate"].as_f64().unwrap_or(0.0) * 100.0,
            d["samples"]
        );
    }
    Ok(ExitCode::SUCCESS)
}
