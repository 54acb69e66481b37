//! The `ferry` command-line tool.

use std::process::ExitCode;

/// mimalloc instead of the system allocator: resolve makes many small, short-lived
/// allocations across worker threads, where glibc's malloc and free took about 9% of the CPU
/// (docs/performance.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_e` of mimalloc 3, which the
/// pinned `libmimalloc-sys` builds; the test below checks that it reads its documented default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays with the process before it goes back to the system. mimalloc 3
/// waits 1,000 ms and purges only when it allocates again, so memory freed after a burst of
/// telemetry stayed resident (312 MB after bench/run against 105 MB live); 10 ms is mimalloc
/// 2's default and cost no measurable throughput.
const PURGE_DELAY_MS: std::ffi::c_long = 10;

#[allow(unsafe_code)]
fn tune_allocator() {
    // SAFETY: setting an option is a plain store into mimalloc's option table, allowed at any
    // time; the option index is checked by `purge_delay_option_is_the_one_we_mean`.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
}

fn main() -> ExitCode {
    tune_allocator();
    ferry_server::cli::main()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(unsafe_code)]
    fn purge_delay_option_is_the_one_we_mean() {
        // SAFETY: reads mimalloc's option table.
        let default = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(
            default, 1000,
            "option 15 should be purge_delay (default 1000 ms)"
        );
        // Its neighbours are the ones the header puts there: use_numa_nodes (0) after it.
        let next = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY + 1) };
        assert_eq!(next, 0);
        tune_allocator();
        let set = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(set, PURGE_DELAY_MS);
    }
}
