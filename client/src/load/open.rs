//! Opening a verified program in the runtime: open, compare the method's backends with the
//! registered ones, load the method, run the golden check; each native step under the flight
//! recorder's mark (`crash/flight.rs`), so a step that takes the process down is known on the
//! next start.

use ferry_shared::manifest::Variant;

use crate::Client;
use crate::cache::VerifiedBlob;
use crate::crash::flight::{Flight, FlightRecord};
use crate::error::Stage;
use crate::run::golden::{LoadFailure, check_golden};
use crate::runtime::Program;
use crate::seal::{FileKeys, KeyAsk};
use crate::types::DeviceInfo;

/// An opened program that passed its checks: the program, the golden check's largest
/// difference, its flight (idle), which the loaded model keeps for its runs, and for a sealed
/// variant its file keys (its assets are read with them).
pub(crate) type Opened = (
    Box<dyn Program>,
    Option<f64>,
    Option<Flight>,
    Option<FileKeys>,
);

impl Client {
    /// Opens the program, checks backends, loads the method, runs the golden check, each step
    /// marked in flight for `record` (as `probe` when `probing`). The mark is written to disk
    /// before the first step and cleared after the last, whatever the outcome.
    pub(crate) fn open_and_check(
        &self,
        blob: &VerifiedBlob,
        v: &Variant,
        (record, device, stopped): (&FlightRecord, &DeviceInfo, &[String]),
        probing: bool,
    ) -> Result<Opened, LoadFailure> {
        // A sealed variant's keys first: no native step, nothing to mark in flight.
        let keys = match &v.sealed {
            Some(s) => {
                let ask = KeyAsk {
                    record,
                    device,
                    stopped: stopped.contains(&record.release),
                };
                Some(self.file_keys(v, s, &ask)?)
            }
            None => None,
        };
        let mut flight = self.flight(record);
        let mut steps = Steps {
            flight: flight.as_mut(),
            probing,
            first: true,
        };
        let sealed = keys
            .as_ref()
            .zip(v.sealed.as_ref())
            .map(|(k, s)| (s, k, device.install_id.as_str()));
        let out = self.open_steps(blob, v, sealed, &mut steps);
        if let Some(f) = &mut flight {
            f.clear(true);
        }
        out.map(|(program, diff)| (program, diff, flight, keys))
    }

    fn open_steps(
        &self,
        blob: &VerifiedBlob,
        v: &Variant,
        sealed: Option<(&ferry_shared::manifest::Sealing, &FileKeys, &str)>,
        steps: &mut Steps<'_>,
    ) -> Result<(Box<dyn Program>, Option<f64>), LoadFailure> {
        let registered = self.runtime.registered_backends();
        steps.mark(Stage::LoadProgram);
        let mut program = match sealed {
            Some((sealing, keys, install)) => self.open_sealed(blob, v, sealing, keys, install)?,
            None => self
                .runtime
                .open(blob)
                .map_err(|e| LoadFailure::runtime(Stage::LoadProgram, e))?,
        };
        let needed = program
            .method_backends(&self.method)
            .map_err(|e| LoadFailure::runtime(Stage::LoadMethod, e))?;
        let missing: Vec<String> = needed
            .into_iter()
            .filter(|b| !registered.contains(b))
            .collect();
        steps.mark(Stage::LoadMethod);
        if let Err(e) = program.load_method(&self.method) {
            let msg = if missing.is_empty() {
                e.message
            } else {
                format!(
                    "{}; method {} needs {}, which this runtime does not register",
                    e.message,
                    self.method,
                    missing.join(", ")
                )
            };
            return Err(LoadFailure {
                stage: Stage::LoadMethod,
                code: e.code,
                message: msg,
            });
        }
        let diff = match &v.golden {
            Some(g) => {
                steps.mark(Stage::Golden);
                check_golden(program.as_mut(), &self.method, g)?
            }
            None => None,
        };
        Ok((program, diff))
    }
}

/// The marks of one open: the first is flushed to disk, the later ones only change the stage.
struct Steps<'f> {
    flight: Option<&'f mut Flight>,
    probing: bool,
    first: bool,
}

impl Steps<'_> {
    fn mark(&mut self, stage: Stage) {
        let stage = if self.probing { Stage::Probe } else { stage };
        if let Some(f) = self.flight.as_deref_mut() {
            f.mark(stage, self.first);
        }
        self.first = false;
    }
}
