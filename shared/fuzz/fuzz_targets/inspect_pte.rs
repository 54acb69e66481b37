//! Fuzzes the `.pte` inspector: any bytes must give a report or an error, never a panic,
//! a hang or an unbounded allocation. Seed the corpus with `tests/fixtures/pte/*.pte`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(report) = ferry_shared::pte::inspect(data) {
        // Exercise the report paths too.
        let _ = report.to_text();
        let _ = report.backends();
    }
    if data.len() >= 40 {
        let limits = ferry_shared::pte::PteLimits::default();
        if let Ok(n) = ferry_shared::pte::required_prefix(&data[..40], &limits) {
            let n = (n as usize).min(data.len());
            let _ = ferry_shared::pte::inspect_prefix(&data[..n], data.len() as u64, &limits);
        }
    }
});
