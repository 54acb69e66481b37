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

/// The device's state as the app knows it. Both default to `true` (no restriction known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conditions {
    /// The network is not metered (Wi-Fi, Ethernet).
    pub unmetered: bool,
    /// The device is charging.
    pub charging: bool,
}

impl Default for Conditions {
    fn default() -> Self {
        Self {
            unmetered: true,
            charging: true,
        }
    }
}

/// When a download may start. Checked before any byte is fetched; a refused download is not a
/// failure of the variant (no fallback telemetry): the load uses what is cached, or fails with
/// `download_deferred`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DownloadPolicy {
    /// Download only on an unmetered network.
    pub require_unmetered: bool,
    /// Download only while charging.
    pub require_charging: bool,
    /// The most bytes one download may fetch (the variant's signed size).
    pub max_download_bytes: Option<u64>,
}

impl DownloadPolicy {
    /// Why a download of `bytes` may not start under `conditions`, or `None` when it may.
    pub fn refusal(&self, bytes: u64, conditions: &Conditions) -> Option<String> {
        if self.require_unmetered && !conditions.unmetered {
            return Some(
                "the network is metered and the policy downloads only on unmetered networks".into(),
            );
        }
        if self.require_charging && !conditions.charging {
            return Some(
                "the device is not charging and the policy downloads only while charging".into(),
            );
        }
        match self.max_download_bytes {
            Some(max) if bytes > max => Some(format!(
                "the download is {bytes} bytes, over the budget of {max} bytes"
            )),
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
    /// Its signed size in bytes.
    pub size: u64,
    /// Bytes still to fetch: 0 when the verified file is cached, less than `size` when a
    /// partial download can be resumed.
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
        let ok = Conditions::default();
        assert_eq!(p.refusal(100, &ok), None);
        assert!(
            p.refusal(101, &ok)
                .is_some_and(|r| r.contains("over the budget"))
        );
        let metered = Conditions {
            unmetered: false,
            ..ok
        };
        assert!(
            p.refusal(1, &metered)
                .is_some_and(|r| r.contains("metered"))
        );
        let unplugged = Conditions {
            charging: false,
            ..ok
        };
        assert!(
            p.refusal(1, &unplugged)
                .is_some_and(|r| r.contains("charging"))
        );
        assert_eq!(DownloadPolicy::default().refusal(u64::MAX, &metered), None);
    }
}
