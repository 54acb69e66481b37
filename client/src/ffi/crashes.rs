//! Crashes through the C ABI: forgetting the variants that crashed the app, so they are tried
//! again (the app shipped its own fix, say). What crashed is in each load's report (`attempts`
//! with `error_code` `crashed`) and in the error of a load whose every candidate crashed.

use std::ffi::c_char;

use ferry_shared::errors::ErrorCode;

use super::{FerryClient, FerryStatus, arg, fail, guard, status_of};

/// Forgets the crashes recorded for `model` (NULL or `""`: every model), so the variants that
/// crashed this app are tried again on the next load; `*forgotten` (may be NULL) says how many
/// were forgotten. A crash is otherwise forgotten only when the app, runtime or OS version
/// changes (then the variant is tried once more).
///
/// # Safety
/// `client` is a live handle; `model` is NULL or a NUL-terminated string; `forgotten` is NULL
/// or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_client_forget_crashes(
    client: *const FerryClient,
    model: *const c_char,
    forgotten: *mut usize,
) -> FerryStatus {
    guard(|| {
        if client.is_null() {
            return fail(
                FerryStatus::FerryErrInvalidArgument,
                ErrorCode::InvalidArgument.as_str(),
                "client is NULL",
            );
        }
        let model = if model.is_null() {
            None
        } else {
            // SAFETY: a NUL-terminated string per the contract.
            match unsafe { arg(model, "model") } {
                Ok("") => None,
                Ok(m) => Some(m),
                Err(status) => return status,
            }
        };
        // SAFETY: live handle per the contract.
        let c = unsafe { &*client };
        match c.client.forget_crashes(model) {
            Ok(n) => {
                if !forgotten.is_null() {
                    // SAFETY: valid per the contract.
                    unsafe { *forgotten = n };
                }
                FerryStatus::FerryOk
            }
            Err(e) => fail(status_of(&e), e.code(), &e.detail()),
        }
    })
}
