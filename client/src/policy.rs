//! When the client may download, and how a load uses the cache: load modes like Firebase's
//! download types (the cached copy or the latest; the cached copy now and the latest in the
//! background), conditions the app reports (unmetered network, charging) and a byte budget.

/// How a load uses the cache and the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoadMode {
    /// Ask the server and load what it offers now, downloading what is not cached (the
    /// default; the last known good copy only when the server cannot be used or a download is
    /// not allowed).
    #[default]
    Latest,
    /// Load the cached last known good copy without asking the server when there is one;
    /// otherwise as [`LoadMode::Latest`].
    CachedOrDownload,
    /// Load the cached copy now when there is one, and fetch the latest in the background for
    /// the next load ([`crate::Client::load_with`] starts a thread that resolves and
    /// downloads under the same policy). Without a cached copy, as [`LoadMode::Latest`].
    CachedThenUpdate,
}

/// The device's state as the app knows it. `None` (the default) is unknown: a policy that
/// requires a condition refuses while it is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Conditions {
    /// Whether the network is unmetered (Wi-Fi, Ethernet).
    pub unmetered: Option<bool>,
    /// Whether the device is charging.
    pub charging: Option<bool>,
    /// Whether the device is in power-saving mode (Android's `PowerManager.isPowerSaveMode`,
    /// iOS's `isLowPowerModeEnabled`): the on-device probe never runs then.
    pub power_saver: Option<bool>,
}

/// When a download may start. Checked before each download starts, never during one (a
/// download that started on Wi-Fi finishes on cellular); a refused download is not a failure
/// of the variant (no fallback telemetry): the load uses what is cached, or fails with
/// `download_deferred`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DownloadPolicy {
    /// Download only on an unmetered network.
    pub require_unmetered: bool,
    /// Download only while charging.
    pub require_charging: bool,
    /// The most bytes one load (or prefetch) may fetch over all its downloads: the bytes
    /// still missing of each file (its signed size less a partial download kept from before).
    pub max_download_bytes: Option<u64>,
}

impl DownloadPolicy {
    /// Why a download of `bytes` may not start under `conditions` when `spent` bytes were
    /// already fetched by the same load, or `None` when it may.
    pub fn refusal(&self, bytes: u64, spent: u64, conditions: &Conditions) -> Option<String> {
        if self.require_unmetered && conditions.unmetered != Some(true) {
            return Some(match conditions.unmetered {
                Some(false) => {
                    "the network is metered and the policy downloads only on unmetered networks"
                        .into()
                }
                _ => "the policy downloads only on unmetered networks and the app did not say \
                      the network is one"
                    .into(),
            });
        }
        if self.require_charging && conditions.charging != Some(true) {
            return Some(match conditions.charging {
                Some(false) => {
                    "the device is not charging and the policy downloads only while charging".into()
                }
                _ => "the policy downloads only while charging and the app did not say the \
                      device is"
                    .into(),
            });
        }
        match self.max_download_bytes {
            Some(max) if bytes.saturating_add(spent) > max => Some(if spent == 0 {
                format!("the download is {bytes} bytes, over the budget of {max} bytes")
            } else {
                format!(
                    "the download is {bytes} bytes and this load fetched {spent} already, over \
                     the budget of {max} bytes"
                )
            }),
            _ => None,
        }
    }
}

/// Everything [`crate::Client::load_with`] takes besides the model and device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadOptions {
    /// How to use the cache.
    pub mode: LoadMode,
    /// When downloads may start.
    pub policy: DownloadPolicy,
    /// The device's state now.
    pub conditions: Conditions,
    /// Time the top candidates on this device once per release (`None`, the default: never).
    pub probe: Option<Probe>,
}

/// The on-device probe: on the first load of a release, after the chosen variant loaded, the
/// client opens each of the decision's other top candidates in turn (the loaded one is timed by
/// the app's own runs; a candidate not cached is downloaded under the load's policy first),
/// runs its signed golden input a few times, and queues one `inference` event per candidate
/// marked `probe: true`, so the server can rank a device class before the fleet has data on
/// it. Never in power-saving mode; once per release per cache (a crash mid-probe does not
/// repeat it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// How many of the best candidates to consider, the loaded one included (default 2: the
    /// loaded variant and the next one).
    pub candidates: usize,
    /// Most timed runs per candidate (default 20).
    pub runs: u32,
    /// Time for the runs (default 2 s, at most 60 s): no candidate starts after it is spent,
    /// and the candidates share what is left after each one's load. Downloads and loads are
    /// not cut short: bound downloads with the policy's `max_download_bytes`.
    pub max_time: std::time::Duration,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            candidates: 2,
            runs: 20,
            max_time: std::time::Duration::from_secs(2),
        }
    }
}

/// What a load would download, known before it starts ([`crate::Client::plan_download`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DownloadPlan {
    /// Release.
    pub release: String,
    /// The variant that would be loaded (the best one whose backends the runtime registers).
    pub variant: String,
    /// Its delegate.
    pub delegate: String,
    /// Its signed size in bytes: the program and its data files (`.ptd`) together.
    pub size: u64,
    /// Bytes still to fetch: 0 when every file is cached, less than `size` when some are
    /// cached (a data file another variant shares, say) or a partial download can be resumed.
    pub to_download: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_condition() {
        let p = DownloadPolicy {
            require_unmetered: true,
            require_charging: true,
            max_download_bytes: Some(100),
        };
        let ok = Conditions {
            power_saver: None,
            unmetered: Some(true),
            charging: Some(true),
        };
        assert_eq!(p.refusal(100, 0, &ok), None);
        assert!(
            p.refusal(101, 0, &ok)
                .is_some_and(|r| r.contains("over the budget"))
        );
        assert!(
            p.refusal(60, 41, &ok)
                .is_some_and(|r| r.contains("fetched 41 already"))
        );
        let metered = Conditions {
            unmetered: Some(false),
            ..ok
        };
        assert!(
            p.refusal(1, 0, &metered)
                .is_some_and(|r| r.contains("is metered"))
        );
        let unplugged = Conditions {
            charging: Some(false),
            ..ok
        };
        assert!(
            p.refusal(1, 0, &unplugged)
                .is_some_and(|r| r.contains("not charging"))
        );
        // Unknown conditions do not satisfy a policy that requires them.
        let unknown = Conditions::default();
        assert!(
            p.refusal(1, 0, &unknown)
                .is_some_and(|r| r.contains("did not say"))
        );
        assert_eq!(
            DownloadPolicy::default().refusal(u64::MAX, 0, &unknown),
            None
        );
    }
}
