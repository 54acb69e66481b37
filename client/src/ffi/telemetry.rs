//! Telemetry through the C ABI: sending the queued events (with the loaded models' run
//! timings since the last flush) and the device's thermal state.

use std::ffi::c_char;

use ferry_shared::errors::ErrorCode;
use ferry_shared::wire::telemetry::Thermal;

use super::{FerryClient, FerryStatus, arg, fail, guard};

fn null_client() -> FerryStatus {
    fail(
        FerryStatus::FerryErrInvalidArgument,
        ErrorCode::InvalidArgument.as_str(),
        "client is NULL",
    )
}

/// Queues the run timings of the loaded models since the last flush as `inference` events,
/// then sends the queued telemetry to the server; `*sent` and `*queued` (each may be NULL) say
/// how many events the server took and how many wait for the next try. Blocking network
/// I/O: call it from a background thread. Returns `FERRY_OK` even when the server could not be
/// reached (the events stay queued).
///
/// # Safety
/// `client` is a live handle; `sent` and `queued` are NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_client_send_telemetry(
    client: *const FerryClient,
    sent: *mut usize,
    queued: *mut usize,
) -> FerryStatus {
    guard(|| {
        if client.is_null() {
            return null_client();
        }
        // SAFETY: live handle per the contract.
        let c = unsafe { &*client };
        let report = c.client.send_telemetry();
        // SAFETY: each is NULL or valid per the contract.
        unsafe {
            if !sent.is_null() {
                *sent = report.sent;
            }
            if !queued.is_null() {
                *queued = report.queued;
            }
        }
        FerryStatus::FerryOk
    })
}

/// Sets the device's thermal state as the app learns it from the OS: `"nominal"`, `"fair"`,
/// `"serious"` or `"critical"` (Android's `PowerManager` none and light are nominal, moderate
/// fair, severe serious, critical, emergency and shutdown critical); NULL or `""` when not
/// known. Anything else is `FERRY_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `client` is a live handle; `state` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_client_set_thermal_state(
    client: *const FerryClient,
    state: *const c_char,
) -> FerryStatus {
    guard(|| {
        if client.is_null() {
            return null_client();
        }
        let parsed = if state.is_null() {
            None
        } else {
            // SAFETY: a NUL-terminated string per the contract.
            match unsafe { arg(state, "state") } {
                Ok("") => None,
                Ok(s) => match serde_json::from_value::<Thermal>(s.into()) {
                    Ok(Thermal::Other) | Err(_) => {
                        return fail(
                            FerryStatus::FerryErrInvalidArgument,
                            ErrorCode::InvalidArgument.as_str(),
                            &format!(
                                "thermal state {s:?} is not nominal, fair, serious or critical"
                            ),
                        );
                    }
                    Ok(t) => Some(t),
                },
                Err(status) => return status,
            }
        };
        // SAFETY: live handle per the contract.
        let c = unsafe { &*client };
        c.client.set_thermal_state(parsed);
        FerryStatus::FerryOk
    })
}

/// Records one value of the app metric `name` (for example `"accepted"`, 1.0 or 0.0) against
/// every model this client has loaded and not freed; `*models` (may be NULL) says how many
/// took it (0: none is loaded). Values are averaged per telemetry send and go out as `metric`
/// events with each model's receipt, which experiments compare between arms. A name that is
/// not 1–64 characters of `[a-z0-9_.-]` starting with a letter, or a value that is not a
/// finite number within ±1e12, is `FERRY_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `client` is a live handle; `name` is a NUL-terminated string; `models` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_client_record_metric(
    client: *const FerryClient,
    name: *const c_char,
    value: f64,
    models: *mut usize,
) -> FerryStatus {
    guard(|| {
        if client.is_null() {
            return null_client();
        }
        // SAFETY: a NUL-terminated string per the contract.
        let name = match unsafe { arg(name, "name") } {
            Ok(n) => n,
            Err(status) => return status,
        };
        // SAFETY: live handle per the contract.
        let c = unsafe { &*client };
        match c.client.record_metric(name, value) {
            Ok(n) => {
                if !models.is_null() {
                    // SAFETY: NULL or valid per the contract.
                    unsafe { *models = n };
                }
                FerryStatus::FerryOk
            }
            Err(e) => fail(
                FerryStatus::FerryErrInvalidArgument,
                ErrorCode::InvalidArgument.as_str(),
                &e.to_string(),
            ),
        }
    })
}
