//! The test kit: the one way to build a test's devices, clients and telemetry events.
//!
//! - [`device`] makes a device ([`DeviceInfo`]) with neutral defaults; [`DeviceExt`] changes
//!   what a test cares about (`device("d").platform(Platform::Android).soc("SM8550")`).
//! - [`TestApp::client`] starts a client builder for the test server (its URL, its trust, a
//!   cache folder, app 1.0.0, the real ExecuTorch runtime); a test adds what it needs and
//!   calls `build()`.
//! - [`quick_limits`] are download limits that retry fast (tests with faults and outages).
//! - [`Event`] builds a telemetry event as JSON (or typed, [`Event::typed`]), with the defaults
//!   of a phone that loaded an XNNPACK variant now; each setter changes one field.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_client::{ClientBuilder, DeviceInfo, DownloadLimits};
use ferry_shared::manifest::Platform;

use crate::app::TestApp;

/// A device with neutral defaults: Linux, no OS version, device model or SoC reported, 4 GiB
/// of memory, no backends claimed beyond the runtime's; `install_id` names it.
pub fn device(install_id: &str) -> DeviceInfo {
    DeviceInfo {
        install_id: install_id.into(),
        platform: Platform::Linux,
        os_version: String::new(),
        device_model: String::new(),
        soc: String::new(),
        ram_mb: 4096,
        claimed_backends: Vec::new(),
    }
}

/// Changes one fact of a [`device`] at a time.
pub trait DeviceExt: Sized {
    /// Its platform.
    fn platform(self, platform: Platform) -> Self;
    /// Its OS version.
    fn os(self, version: &str) -> Self;
    /// Its device model.
    fn model(self, model: &str) -> Self;
    /// Its SoC.
    fn soc(self, soc: &str) -> Self;
    /// Its memory, in MiB.
    fn ram(self, mb: u64) -> Self;
    /// Backends it claims beyond those the runtime registers.
    fn claims(self, backends: &[&str]) -> Self;
}

impl DeviceExt for DeviceInfo {
    fn platform(mut self, platform: Platform) -> Self {
        self.platform = platform;
        self
    }

    fn os(mut self, version: &str) -> Self {
        self.os_version = version.into();
        self
    }

    fn model(mut self, model: &str) -> Self {
        self.device_model = model.into();
        self
    }

    fn soc(mut self, soc: &str) -> Self {
        self.soc = soc.into();
        self
    }

    fn ram(mut self, mb: u64) -> Self {
        self.ram_mb = mb;
        self
    }

    fn claims(mut self, backends: &[&str]) -> Self {
        self.claimed_backends = backends.iter().map(|b| (*b).to_string()).collect();
        self
    }
}

/// Download limits that retry quickly: six retries 10 to 50 ms apart, a body that may take
/// 2 s before it counts as slow.
pub fn quick_limits() -> DownloadLimits {
    DownloadLimits {
        retries: 6,
        backoff: Duration::from_millis(10),
        backoff_cap: Duration::from_millis(50),
        min_body_time: Duration::from_secs(2),
        ..DownloadLimits::default()
    }
}

impl TestApp {
    /// A client builder for this server: its URL and trust, `cache` as the cache folder, app
    /// version 1.0.0 and the real ExecuTorch runtime. [`TestApp::client_at`] for another
    /// address (a proxy, a dead port).
    pub fn client(&self, cache: &Path) -> ClientBuilder {
        self.client_at(&self.url(), cache)
    }

    /// [`TestApp::client`] talking to `server` instead (a fault proxy in front of this server,
    /// or an address where nothing answers), with this server's trust.
    pub fn client_at(&self, server: &str, cache: &Path) -> ClientBuilder {
        ClientBuilder::new(server, self.trust())
            .cache_dir(cache)
            .app_version(semver::Version::new(1, 0, 0))
            .runtime(Arc::new(ExecuTorchRuntime::new()))
    }
}

/// A telemetry event under construction, as the JSON a device sends.
#[derive(Debug, Clone)]
pub struct Event(serde_json::Value);

impl Event {
    /// A `kind` event (`load`, `fallback`, `download`, …) about `variant` of `model` `release`:
    /// outcome ok, its delegate read from the variant's name (`vulkan-…` is Vulkan, `coreml-…`
    /// Core ML, anything else XNNPACK), from install `d1` on an Android phone with the
    /// SM8550 (model `phone-SM8550`, Android 14, app 2.0.0, runtime 1.5.1), now.
    pub fn new(kind: &str, model: &str, release: &str, variant: &str) -> Self {
        let first = variant.split('-').next().unwrap_or_default();
        let delegate = match first {
            "vulkan" | "coreml" | "qnn" | "portable" | "mps" => first,
            _ => "xnnpack",
        };
        let at = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .expect("time");
        Event(serde_json::json!({
            "kind": kind, "model": model, "release": release, "variant": variant,
            "delegate": delegate, "outcome": "ok", "install_id": "d1", "platform": "android",
            "soc": "SM8550", "device_model": "phone-SM8550", "os_version": "14",
            "app_version": "2.0.0", "runtime_version": "1.5.1", "at": at,
        }))
    }

    /// A `load` event about `variant` of `model` `release` (see [`Event::new`]).
    pub fn load(model: &str, release: &str, variant: &str) -> Self {
        Self::new("load", model, release, variant)
    }

    /// Sets any field.
    pub fn set(mut self, field: &str, value: impl Into<serde_json::Value>) -> Self {
        self.0[field] = value.into();
        self
    }

    /// Removes a field.
    pub fn without(mut self, field: &str) -> Self {
        if let Some(o) = self.0.as_object_mut() {
            o.remove(field);
        }
        self
    }

    /// The device's install id.
    pub fn install(self, install_id: &str) -> Self {
        self.set("install_id", install_id)
    }

    /// The device's SoC, and its model `phone-<soc>`.
    pub fn soc(self, soc: &str) -> Self {
        let model = format!("phone-{soc}");
        self.set("soc", soc).set("device_model", model)
    }

    /// Its outcome: `failed` with `error_code`.
    pub fn failed(self, error_code: &str) -> Self {
        self.set("outcome", "failed").set("error_code", error_code)
    }

    /// Its outcome, as given.
    pub fn outcome(self, outcome: &str) -> Self {
        self.set("outcome", outcome)
    }

    /// When it happened.
    pub fn at(self, at: time::OffsetDateTime) -> Self {
        let text = at
            .format(&time::format_description::well_known::Rfc3339)
            .expect("time");
        self.set("at", text)
    }

    /// The event as JSON.
    pub fn json(self) -> serde_json::Value {
        self.0
    }

    /// The event as the server's typed value (what the store and the Parquet log keep).
    pub fn typed(self) -> ferry_shared::wire::telemetry::TelemetryEvent {
        serde_json::from_value(self.0).expect("a valid event")
    }
}

impl From<Event> for serde_json::Value {
    fn from(e: Event) -> Self {
        e.0
    }
}
