//! Fuzzes the `.ptd` (FlatTensor data file) reader, whole and from the prefix its header
//! names: any bytes must give a report or an error, never a panic, a hang or an unbounded
//! allocation. Seed the corpus with `tests/fixtures/pte/*.ptd`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ferry_shared::pte::inspect_ptd(data);
    if let Ok(n) = ferry_shared::pte::ptd_required_prefix(data) {
        let n = (n as usize).min(data.len());
        let _ = ferry_shared::pte::inspect_ptd_prefix(&data[..n], data.len() as u64);
    }
});
