//! Download progress for C apps: a callback (`ferry_client_set_progress`) and the last figures
//! for a thread that asks (`ferry_client_progress`).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;

use super::{FerryClient, FerryStatus, guard, invalid};

/// A download progress callback: `user_data` as given to `ferry_client_set_progress`, the
/// variant being downloaded, the bytes of its files on disk and their total. Called on the
/// thread that downloads, often (every few hundred KiB): return quickly.
pub type FerryProgressFn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, variant: *const c_char, done: u64, total: u64),
>;

/// Sets (or with NULL clears) the download progress callback of `client`; `user_data` is
/// passed back to it. The callback runs on the thread that downloads, while the load that
/// downloads is in progress, for every file of the variant (one count over all of them).
///
/// # Safety
/// `client` is a live handle; `callback` and `user_data` stay valid until another callback is
/// set or the client is freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_client_set_progress(
    client: *const FerryClient,
    callback: FerryProgressFn,
    user_data: *mut c_void,
) -> FerryStatus {
    guard(|| {
        if client.is_null() {
            return invalid("client is NULL");
        }
        // SAFETY: live handle per the contract.
        let c = unsafe { &*client };
        *ferry_shared::sync::lock(&c.progress.callback) = callback.map(|f| (f, user_data as usize));
        FerryStatus::FerryOk
    })
}

/// The latest download progress of `client`: bytes on disk of the variant being (or last)
/// downloaded and their total (both 0 before any download). Safe to call from any thread
/// while another loads.
///
/// # Safety
/// `client` is a live handle; `done` and `total` are valid pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferry_client_progress(
    client: *const FerryClient,
    done: *mut u64,
    total: *mut u64,
) -> FerryStatus {
    guard(|| {
        if client.is_null() || done.is_null() || total.is_null() {
            return invalid("client, done or total is NULL");
        }
        // SAFETY: live handle and valid pointers per the contract.
        unsafe {
            let c = &*client;
            // The total first: a reader never sees more done than total.
            *total = c.progress.total.load(Ordering::Relaxed);
            *done = c.progress.done.load(Ordering::Relaxed).min(*total);
        }
        FerryStatus::FerryOk
    })
}
