//! The side notes of a resolve: what the request established about the device (accepted, its
//! runtime, the cohort served), gathered while the request runs and handed to the fleet's
//! census in one call when it ends, whichever way it ends.

use ferry_shared::wire::resolve::Cohort;

use crate::fleet::census::ResolveNote;
use crate::fleet::intake::aggregate::Telemetry;

/// What one resolve has established so far.
#[derive(Debug, Default)]
pub struct Notes {
    /// The model and install id, once the request parsed and validated.
    device: Option<(String, String)>,
    /// Whether the request was accepted far enough to count the device (a published model,
    /// its operators answered).
    counted: bool,
    /// The device's runtime key, once its operator set is known.
    runtime: Option<String>,
    /// The cohort served.
    cohort: Option<Cohort>,
}

impl Notes {
    /// The device the request is for.
    pub fn device(&mut self, model: &str, install_id: &str) {
        self.device = Some((model.to_string(), install_id.to_string()));
    }

    /// The device counts in the client census.
    pub fn counted(&mut self) {
        self.counted = true;
    }

    /// The device's runtime is known (`APP_VERSION DIGEST`, see
    /// [`crate::fleet::census::runtimes::key`]).
    pub fn runtime(&mut self, key: String) {
        self.runtime = Some(key);
    }

    /// The device was served `cohort`.
    pub fn served(&mut self, cohort: Cohort) {
        self.cohort = Some(cohort);
    }

    /// Hands what was noted to the fleet's census (nothing when the request never named a
    /// device); `client` is the request's protocol and SDK key.
    pub fn hand_over(&self, telemetry: &Telemetry, client: &str) {
        let Some((model, install_id)) = &self.device else {
            return;
        };
        telemetry.note_resolve(&ResolveNote {
            model,
            install_id,
            client: self.counted.then_some(client),
            runtime: self.runtime.as_deref(),
            cohort: self.cohort,
        });
    }
}
