//! Time the device can trust: the server's signed time, learned from a decision made for one
//! of this client's requests (its nonce), carried forward by a clock that keeps counting
//! through suspend and is tied to the current boot. While that estimate holds, every time
//! check (decision expiry, the keyring's key expiries, telemetry stamps) uses it instead of
//! the wall clock, which users set by hand and devices without a battery-backed clock start
//! in 1970.
//!
//! The estimate is kept in `<cache>/clock.json` so it survives app restarts; a reboot (another
//! boot id) drops it, and so does age ([`MAX_ESTIMATE_AGE`]): the next resolve learns it again.
//! The file also remembers that the server answers nonces, so that later a nonce request
//! answered without one is refused rather than judged by the wall clock.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// Where time comes from (injectable so tests can play an expired decision).
pub trait Clock: Send + Sync {
    /// The current UTC time (the wall clock, which may be wrong).
    fn now(&self) -> OffsetDateTime;

    /// This boot's id and the time since it started, counting suspend: what the client's
    /// estimate of the server's time is carried by (`docs/client.md`, device clocks). `None`
    /// (the default) keeps the client on [`Clock::now`].
    fn since_boot(&self) -> Option<(String, std::time::Duration)> {
        None
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    /// Linux and Android: the kernel's boot id and `CLOCK_BOOTTIME` (`/proc/uptime`).
    fn since_boot(&self) -> Option<(String, std::time::Duration)> {
        system_since_boot()
    }
}

/// How long an estimate is used before the next resolve learns the time again (a server whose
/// clock was wrong, or a boot id that repeats, cannot mislead a device for longer).
pub(crate) const MAX_ESTIMATE_AGE: Duration = Duration::from_secs(24 * 3600);

/// The longest a request for a decision of its own may take for the client to learn the time
/// from it: the learned time is off by at most this.
pub(crate) const MAX_LEARNING_ROUND_TRIP: Duration = Duration::from_secs(60);

/// What `<cache>/clock.json` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ClockFile {
    #[serde(default)]
    estimate: Option<Estimate>,
    /// The server has answered a nonce with a decision carrying it.
    #[serde(default)]
    server_echoes_nonce: bool,
    /// The newest server time ever learned, kept across reboots: time does not go back, so a
    /// later answer vouching for an earlier time is refused (a recorded or back-dated one).
    #[serde(default, with = "time::serde::rfc3339::option")]
    latest: Option<OffsetDateTime>,
}

/// No server time before this is believed (this SDK did not exist then): a floor for what a
/// signed time or a decision's time may say, whatever key signed it.
/// (2026-12-01T00:00:00Z.)
pub(crate) const EARLIEST_TIME: OffsetDateTime =
    match OffsetDateTime::from_unix_timestamp(1_796_083_200) {
        Ok(t) => t,
        Err(_) => OffsetDateTime::UNIX_EPOCH,
    };

/// How far a learned time may fall behind the newest one learned before (replicas' clocks
/// differ a little).
pub(crate) const LEARNED_TIME_SLACK: time::Duration = time::Duration::minutes(5);

/// The server's time at one instant of this boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Estimate {
    /// The boot it was learned in.
    pub boot_id: String,
    /// Time since that boot when it was learned, in milliseconds.
    pub since_boot_ms: u64,
    /// The server's time then.
    #[serde(with = "time::serde::rfc3339")]
    pub server_time: OffsetDateTime,
}

impl Estimate {
    /// The server's time now, by `boot` (this boot's id and time since it started); `None`
    /// after a reboot or when the boot clock went back (it never does within a boot).
    pub(crate) fn at(&self, boot: &(String, Duration)) -> Option<OffsetDateTime> {
        let (id, since) = boot;
        let now_ms = u64::try_from(since.as_millis()).ok()?;
        if *id != self.boot_id
            || now_ms < self.since_boot_ms
            || now_ms - self.since_boot_ms > MAX_ESTIMATE_AGE.as_millis() as u64
        {
            return None;
        }
        let elapsed =
            time::Duration::milliseconds(i64::try_from(now_ms - self.since_boot_ms).ok()?);
        self.server_time.checked_add(elapsed)
    }
}

/// The client's time estimate and where it is kept.
#[derive(Debug)]
pub(crate) struct TimeKeeper {
    path: PathBuf,
    held: Mutex<ClockFile>,
}

impl TimeKeeper {
    /// The keeper of `<cache>/clock.json` (a missing or unreadable file: no estimate yet).
    pub(crate) fn open(cache_root: &Path) -> Self {
        let path = cache_root.join("clock.json");
        let held = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<ClockFile>(&b).ok())
            .unwrap_or_default();
        Self {
            path,
            held: Mutex::new(held),
        }
    }

    /// The estimated time now, when an estimate from this boot holds.
    pub(crate) fn estimate(&self, clock: &dyn Clock) -> Option<OffsetDateTime> {
        let boot = clock.since_boot()?;
        ferry_shared::sync::lock(&self.held)
            .estimate
            .as_ref()?
            .at(&boot)
    }

    /// The time to judge by: the estimate while it holds, else the wall clock.
    pub(crate) fn now(&self, clock: &dyn Clock) -> OffsetDateTime {
        self.estimate(clock).unwrap_or_else(|| clock.now())
    }

    /// How far the wall clock is from the estimate, in whole seconds (positive: the wall clock
    /// is ahead); `None` without an estimate.
    pub(crate) fn offset_secs(&self, clock: &dyn Clock) -> Option<i64> {
        self.estimate(clock)
            .map(|est| (clock.now() - est).whole_seconds())
    }

    /// Whether the server has answered a nonce with a decision carrying it.
    pub(crate) fn server_echoes_nonce(&self) -> bool {
        ferry_shared::sync::lock(&self.held).server_echoes_nonce
    }

    /// The earliest time a server may vouch for now: this SDK's floor, the creation of the
    /// keyring held (`keyring_created`), and the newest time learned before (less a little
    /// slack), whichever is latest.
    pub(crate) fn floor(&self, keyring_created: Option<OffsetDateTime>) -> OffsetDateTime {
        let latest = ferry_shared::sync::lock(&self.held)
            .latest
            .map(|t| t - LEARNED_TIME_SLACK);
        [Some(EARLIEST_TIME), keyring_created, latest]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(EARLIEST_TIME)
    }

    /// Learns `server_time` (from a signed time or a decision made for this client's nonce)
    /// as the time at `sent`, the boot clock's reading when the request left (so the estimate
    /// runs ahead of the true time by at most the round trip, never behind it), and keeps it
    /// for later processes of this boot. `echoed`: it came in a decision (the server answers
    /// nonces in decisions). Without a boot clock only that is kept. A time before
    /// [`TimeKeeper::floor`] is refused and nothing is learned.
    pub(crate) fn learn(
        &self,
        server_time: OffsetDateTime,
        sent: Option<(String, Duration)>,
        echoed: bool,
        keyring_created: Option<OffsetDateTime>,
    ) -> Result<(), String> {
        let floor = self.floor(keyring_created);
        if server_time < floor {
            return Err(format!(
                "the server vouches for {server_time}, before {floor} (the earliest time this \
                 device believes: a recorded or back-dated answer?)"
            ));
        }
        let mut held = ferry_shared::sync::lock(&self.held);
        held.server_echoes_nonce |= echoed;
        held.latest = held.latest.max(Some(server_time));
        if let Some((boot_id, since)) = sent {
            held.estimate = Some(Estimate {
                boot_id,
                since_boot_ms: u64::try_from(since.as_millis()).unwrap_or(u64::MAX),
                server_time,
            });
        }
        if let Ok(bytes) = serde_json::to_vec(&*held) {
            // Best effort: an estimate that cannot be written is learned again next start.
            let _ = ferry_fs::write(&self.path, &bytes, ferry_fs::Mode::Public);
        }
        Ok(())
    }
}

/// This boot's id and the time since it started, counting suspend (Linux and Android: the
/// kernel's boot id and `/proc/uptime`, which is `CLOCK_BOOTTIME`, what `elapsedRealtime`
/// reads). `None` elsewhere.
pub(crate) fn system_since_boot() -> Option<(String, Duration)> {
    if !cfg!(any(target_os = "linux", target_os = "android")) {
        return None;
    }
    // The boot id cannot change while this process runs: read it once.
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let id = BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .clone()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let secs: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    Some((id, Duration::from_secs_f64(secs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_moves_with_the_boot_clock_and_ends_with_the_boot() {
        let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).expect("time");
        let e = Estimate {
            boot_id: "boot-a".into(),
            since_boot_ms: 10_000,
            server_time: t0,
        };
        let later = ("boot-a".to_string(), Duration::from_millis(70_000));
        assert_eq!(e.at(&later), Some(t0 + time::Duration::seconds(60)));
        assert_eq!(
            e.at(&("boot-b".to_string(), Duration::from_millis(70_000))),
            None
        );
        assert_eq!(
            e.at(&("boot-a".to_string(), Duration::from_millis(5_000))),
            None
        );
        let last = (
            "boot-a".to_string(),
            Duration::from_millis(10_000) + MAX_ESTIMATE_AGE,
        );
        assert!(e.at(&last).is_some());
        let older = (
            "boot-a".to_string(),
            Duration::from_millis(10_001) + MAX_ESTIMATE_AGE,
        );
        assert_eq!(e.at(&older), None, "an estimate is used for a day at most");
    }

    #[test]
    fn no_time_before_the_floor_or_the_newest_learned_is_believed() {
        let dir = tempfile::tempdir().expect("tmp");
        let keeper = TimeKeeper::open(dir.path());
        let boot = Some(("boot-a".to_string(), Duration::from_secs(100)));
        let before = EARLIEST_TIME - time::Duration::days(30);
        assert!(keeper.learn(before, boot.clone(), false, None).is_err());
        let created = EARLIEST_TIME + time::Duration::days(10);
        assert!(
            keeper
                .learn(
                    created - time::Duration::SECOND,
                    boot.clone(),
                    false,
                    Some(created)
                )
                .is_err(),
            "not before the keyring held was made"
        );
        let t = EARLIEST_TIME + time::Duration::days(20);
        keeper.learn(t, boot.clone(), false, None).expect("learned");
        assert!(
            !keeper.server_echoes_nonce(),
            "a signed time is not a decision"
        );
        // Another boot, another process: the newest time survives, a much earlier one is
        // refused, a little earlier (another replica's clock) is not.
        let later = TimeKeeper::open(dir.path());
        let next = Some(("boot-b".to_string(), Duration::from_secs(5)));
        assert!(
            later
                .learn(t - time::Duration::hours(1), next.clone(), false, None)
                .is_err()
        );
        later
            .learn(t - time::Duration::minutes(1), next, true, None)
            .expect("within the slack");
        assert!(later.server_echoes_nonce());
    }

    #[test]
    fn the_system_boot_clock_reads_on_linux() {
        if cfg!(target_os = "linux") {
            let (id, since) = system_since_boot().expect("boot id and uptime");
            assert_eq!(id.len(), 36, "{id}");
            assert!(since > Duration::ZERO);
        }
    }
}
