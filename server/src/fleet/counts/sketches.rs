//! Load times as a mergeable sketch: the one type rollups and field latency both hold.

use serde::{Deserialize, Serialize};
use sketches_ddsketch::{Config as SketchConfig, DDSketch};

impl std::fmt::Debug for LoadTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadTimes({} samples)", self.0.count())
    }
}

/// Load times as a DDSketch (default configuration: 1% relative error). An empty sketch has
/// infinite min and max, which JSON cannot carry, so it travels as `null`.
#[derive(Clone)]
pub struct LoadTimes(pub DDSketch);

impl Default for LoadTimes {
    fn default() -> Self {
        LoadTimes(DDSketch::new(SketchConfig::defaults()))
    }
}

impl Serialize for LoadTimes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.count() == 0 {
            s.serialize_none()
        } else {
            s.serialize_some(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for LoadTimes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Option::<DDSketch>::deserialize(d)?.map_or_else(LoadTimes::default, LoadTimes))
    }
}
