//! Download progress for C apps: a callback (`ferry_client_set_progress`) and the last figures
//! for a thread that asks (`ferry_client_progress`).
#![allow(unsafe_code)]

use std::ffi::{CString, c_char, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{FerryClient, FerryStatus, guard, invalid};
use crate::transfer::download::ProgressFn;

/// A download progress callback: `user_data` as given to `ferry_client_set_progress`, the
/// variant being downloaded, the bytes of its files on disk and their total. Called on the
/// thread that downloads, often (every few hundred KiB): return quickly.
pub type FerryProgressFn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, variant: *const c_char, done: u64, total: u64),
>;

/// The callback itself (a [`FerryProgressFn`] that is set).
type RawProgressFn = unsafe extern "C" fn(*mut c_void, *const c_char, u64, u64);

/// The app's callback and the last figures, shared by a client handle and its downloads.
#[derive(Default)]
pub(crate) struct ProgressSlot {
    /// The callback and its `user_data` (kept as an address).
    callback: std::sync::Mutex<Option<(RawProgressFn, usize)>>,
    done: AtomicU64,
    total: AtomicU64,
}

impl ProgressSlot {
    /// The client's progress function: records the figures, then calls the app's callback.
    pub(crate) fn progress_fn(self: &Arc<Self>) -> ProgressFn {
        let slot = self.clone();
        Arc::new(move |variant: &str, done: u64, total: u64| {
            slot.total.store(total, Ordering::Relaxed);
            slot.done.store(done, Ordering::Relaxed);
            let callback = *ferry_shared::sync::lock(&slot.callback);
            if let Some((f, user_data)) = callback {
                let name = CString::new(variant.replace('\0', " ")).unwrap_or_default();
                // SAFETY: the app gave this callback with this `user_data` and keeps both valid
                // until it sets another or frees the client (ferry.h); the name outlives the call.
                unsafe { f(user_data as *mut c_void, name.as_ptr(), done, total) };
            }
        })
    }
}

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
