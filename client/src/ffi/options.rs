//! Load options as the C ABI and the JVM take them: a JSON object, every field optional.

/// Load options as JSON; every field optional.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct OptionsJson {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    require_unmetered: bool,
    #[serde(default)]
    require_charging: bool,
    #[serde(default)]
    max_download_bytes: Option<u64>,
    #[serde(default)]
    unmetered: Option<bool>,
    #[serde(default)]
    charging: Option<bool>,
    #[serde(default)]
    power_saver: Option<bool>,
    #[serde(default)]
    probe: Option<ProbeJson>,
}

/// The on-device probe's settings in load options; `{}` takes the defaults.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ProbeJson {
    #[serde(default)]
    candidates: Option<usize>,
    #[serde(default)]
    runs: Option<u32>,
    #[serde(default)]
    max_ms: Option<u64>,
}

impl ProbeJson {
    fn into_probe(self) -> Result<crate::Probe, String> {
        let d = crate::Probe::default();
        let probe = crate::Probe {
            candidates: self.candidates.unwrap_or(d.candidates),
            runs: self.runs.unwrap_or(d.runs),
            max_time: self
                .max_ms
                .map_or(d.max_time, std::time::Duration::from_millis),
        };
        if !(1..=16).contains(&probe.candidates)
            || !(1..=10_000).contains(&probe.runs)
            || probe.max_time > std::time::Duration::from_secs(60)
        {
            return Err(
                "probe: candidates 1 to 16, runs 1 to 10,000, max_ms at most 60,000".into(),
            );
        }
        Ok(probe)
    }
}

impl OptionsJson {
    pub(super) fn into_options(self) -> Result<crate::LoadOptions, String> {
        let mode = match self.mode.as_deref() {
            None | Some("latest") => crate::LoadMode::Latest,
            Some("cached_or_download") => crate::LoadMode::CachedOrDownload,
            Some("cached_then_update") => crate::LoadMode::CachedThenUpdate,
            Some(other) => {
                return Err(format!(
                    "mode {other:?}: expected latest, cached_or_download or cached_then_update"
                ));
            }
        };
        Ok(crate::LoadOptions {
            mode,
            policy: crate::DownloadPolicy {
                require_unmetered: self.require_unmetered,
                require_charging: self.require_charging,
                max_download_bytes: self.max_download_bytes,
            },
            conditions: crate::Conditions {
                unmetered: self.unmetered,
                charging: self.charging,
                power_saver: self.power_saver,
            },
            probe: self.probe.map(ProbeJson::into_probe).transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<crate::LoadOptions, String> {
        serde_json::from_str::<OptionsJson>(json)
            .map_err(|e| e.to_string())?
            .into_options()
    }

    #[test]
    fn the_probe_and_power_saver_are_read_and_bounded() {
        let o = parse(r#"{"power_saver": true, "probe": {}}"#).expect("defaults");
        assert_eq!(o.conditions.power_saver, Some(true));
        assert_eq!(o.probe, Some(crate::Probe::default()));
        let o = parse(r#"{"probe": {"candidates": 3, "runs": 5, "max_ms": 800}}"#).expect("set");
        let p = o.probe.expect("probe");
        assert_eq!((p.candidates, p.runs, p.max_time.as_millis()), (3, 5, 800));
        assert_eq!(parse("{}").expect("none").probe, None, "off by default");
        for bad in [
            r#"{"probe": {"candidates": 0}}"#,
            r#"{"probe": {"runs": 0}}"#,
            r#"{"probe": {"max_ms": 600000}}"#,
        ] {
            assert!(parse(bad).expect_err(bad).contains("probe:"), "{bad}");
        }
        assert!(parse(r#"{"probe": {"rounds": 3}}"#).is_err(), "unknown key");
        assert!(parse(r#"{"probe": true}"#).is_err(), "an object");
    }
}
