//! Inspector tests on real exporter output and on hostile bytes.
//!
//! Ground-truth comparisons against the exporter live in the `ferry-tests` crate; these tests
//! cover robustness: every truncation, random bit flips, random bytes and crafted programs
//! whose offsets alias to make naive readers loop.

use super::*;
use crate::errors::ErrorCode;
use proptest::prelude::*;

macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            include_bytes!(concat!("../../../tests/fixtures/pte/", $name, ".pte")) as &[u8],
        )
    };
}

const FIXTURES: &[(&str, &[u8])] = &[
    fixture!("mlp-v1-portable"),
    fixture!("mlp-v1-xnnpack"),
    fixture!("mlp-v1-xnnpack-int8"),
    fixture!("mlp-v1-coreml"),
    fixture!("mlp-v1-vulkan"),
    fixture!("partial-xnnpack"),
    fixture!("dynamic-xnnpack"),
    fixture!("cnn-xnnpack"),
    fixture!("two-methods"),
];

fn fixture(name: &str) -> &'static [u8] {
    FIXTURES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
        .unwrap_or_default()
}

#[test]
fn reads_every_fixture() {
    for (name, bytes) in FIXTURES {
        let r = inspect(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.file_identifier, "ET12");
        assert_eq!(r.schema_version, 0, "{name}");
        assert!(!r.methods.is_empty(), "{name}");
        let h = r
            .extended_header
            .expect("exporter writes an extended header");
        assert!(h.program_size <= bytes.len() as u64);
    }
}

#[test]
fn xnnpack_fixture_is_delegated() {
    let r = inspect(fixture("mlp-v1-xnnpack")).expect("valid");
    let m = r.method("forward").expect("forward");
    assert_eq!(m.delegate_calls.get("XnnpackBackend"), Some(&1));
    assert_eq!(m.delegates[0].magic.as_deref(), Some("XH00"));
    assert_eq!(m.summary, "1 XnnpackBackend call");
}

#[test]
fn partial_fixture_names_the_declined_op() {
    let r = inspect(fixture("partial-xnnpack")).expect("valid");
    let m = r.method("forward").expect("forward");
    assert_eq!(
        m.summary,
        "2 XnnpackBackend calls, 1 portable kernel call: aten::cumsum.out"
    );
}

#[test]
fn vulkan_blob_magic() {
    let r = inspect(fixture("mlp-v1-vulkan")).expect("valid");
    let d = &r.methods[0].delegates[0];
    assert_eq!(d.backend, "VulkanBackend");
    assert_eq!(d.magic.as_deref(), Some("VH00"));
}

#[test]
fn required_prefix_is_enough() {
    for (name, bytes) in FIXTURES {
        let need = required_prefix(&bytes[..40], &PteLimits::default()).expect("header") as usize;
        assert!(need <= bytes.len());
        let from_prefix = inspect_prefix(&bytes[..need], bytes.len() as u64, &PteLimits::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let full = inspect(bytes).expect("valid");
        assert_eq!(from_prefix.methods.len(), full.methods.len());
        for (a, b) in from_prefix.methods.iter().zip(&full.methods) {
            assert_eq!(a.delegate_calls, b.delegate_calls, "{name}");
            assert_eq!(a.kernel_calls, b.kernel_calls, "{name}");
        }
    }
}

#[test]
fn every_truncation_is_an_error() {
    for (name, bytes) in FIXTURES {
        for len in 0..bytes.len() {
            let r = inspect(&bytes[..len]);
            assert!(r.is_err(), "{name} cut at {len} was accepted");
        }
    }
}

#[test]
fn not_a_program() {
    let e = inspect(b"PK\x03\x04 this is a zip file, not a program").expect_err("zip");
    assert_eq!(e.code().as_str(), "pte_not_a_program");
    let e = inspect(b"").expect_err("empty");
    assert_eq!(e.code().as_str(), "pte_truncated");
    let mut b = fixture("mlp-v1-xnnpack").to_vec();
    b[4..8].copy_from_slice(b"ET13");
    assert_eq!(
        inspect(&b).expect_err("future").code().as_str(),
        "pte_not_a_program"
    );
}

#[test]
fn header_lies_are_caught() {
    let good = fixture("mlp-v1-xnnpack");
    let mut b = good.to_vec();
    b[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert_eq!(
        inspect(&b).expect_err("huge program").code().as_str(),
        "pte_truncated"
    );
    let mut b = good.to_vec();
    b[12..16].copy_from_slice(&7u32.to_le_bytes());
    assert_eq!(
        inspect(&b).expect_err("short header").code().as_str(),
        "pte_bad_header"
    );
    let mut b = good.to_vec();
    b[24..32].copy_from_slice(&8u64.to_le_bytes());
    assert_eq!(
        inspect(&b).expect_err("base inside").code().as_str(),
        "pte_bad_header"
    );
}

#[test]
fn limits_are_enforced() {
    let bytes = fixture("cnn-xnnpack");
    let tight = PteLimits {
        max_work: 10,
        ..PteLimits::default()
    };
    assert_eq!(
        inspect_with(bytes, &tight)
            .expect_err("work")
            .code()
            .as_str(),
        "pte_limit_exceeded"
    );
    let tight = PteLimits {
        max_program_size: 100,
        ..PteLimits::default()
    };
    assert_eq!(
        inspect_with(bytes, &tight)
            .expect_err("size")
            .code()
            .as_str(),
        "pte_limit_exceeded"
    );
    let tight = PteLimits {
        max_string: 3,
        ..PteLimits::default()
    };
    assert_eq!(
        inspect_with(bytes, &tight)
            .expect_err("string")
            .code()
            .as_str(),
        "pte_limit_exceeded"
    );
}

/// Builds a program whose chain list holds `chains` references to one chain of `per_chain`
/// instructions, all references to a single kernel-call instruction: a few KB that expand
/// to `chains * per_chain` instructions for a naive reader.
fn aliasing_program(chains: usize, per_chain: usize) -> Vec<u8> {
    use flatbuffers::{FlatBufferBuilder, WIPOffset};
    let mut b = FlatBufferBuilder::new();
    // Operator { name, overload }
    let name = b.create_string("aten::add");
    let overload = b.create_string("out");
    let t = b.start_table();
    b.push_slot_always(4, name);
    b.push_slot_always(6, overload);
    let op: WIPOffset<flatbuffers::TableFinishedWIPOffset> = b.end_table(t);
    // KernelCall { op_index: 0 }
    let t = b.start_table();
    b.push_slot_always::<i32>(4, 0);
    let call = b.end_table(t);
    // Instruction { instr_args_type: KernelCall, instr_args }
    let t = b.start_table();
    b.push_slot_always::<u8>(4, 1);
    b.push_slot_always(6, call);
    let ins = b.end_table(t);
    let instrs = b.create_vector(&vec![ins; per_chain]);
    // Chain { instructions }
    let t = b.start_table();
    b.push_slot_always(8, instrs);
    let chain = b.end_table(t);
    let chain_vec = b.create_vector(&vec![chain; chains]);
    let ops = b.create_vector(&[op]);
    let fname = b.create_string("forward");
    // ExecutionPlan { name, chains, operators }
    let t = b.start_table();
    b.push_slot_always(4, fname);
    b.push_slot_always(14, chain_vec);
    b.push_slot_always(16, ops);
    let plan = b.end_table(t);
    let plans = b.create_vector(&[plan]);
    // Program { execution_plan }
    let t = b.start_table();
    b.push_slot_always(6, plans);
    let root = b.end_table(t);
    b.finish(root, Some("ET12"));
    b.finished_data().to_vec()
}

#[test]
fn crafted_program_reads_correctly() {
    let bytes = aliasing_program(3, 4);
    let r = inspect(&bytes).expect("valid crafted program");
    let m = &r.methods[0];
    assert_eq!(m.instructions, 12);
    assert_eq!(m.kernel_calls.get("aten::add.out"), Some(&12));
    assert_eq!(r.extended_header, None);
}

#[test]
fn aliased_offsets_cannot_make_it_loop() {
    // 4,000 references to a chain of 4,000 instructions = 16M instructions from ~100 KB.
    let bytes = aliasing_program(4000, 4000);
    assert!(bytes.len() < 200_000);
    let start = std::time::Instant::now();
    let e = inspect(&bytes).expect_err("must hit a limit");
    assert_eq!(e.code().as_str(), "pte_limit_exceeded");
    // Not a timing assertion on performance: a generous bound that only a hang would break.
    assert!(start.elapsed().as_secs() < 60);
}

#[test]
fn text_report_mentions_everything() {
    let r = inspect(fixture("partial-xnnpack")).expect("valid");
    let text = r.to_text();
    assert!(text.contains("method forward"));
    assert!(text.contains("aten::cumsum.out"));
    assert!(text.contains("XnnpackBackend"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, .. ProptestConfig::default() })]

    #[test]
    fn bit_flips_never_panic(which in 0usize..FIXTURES.len(), flips in proptest::collection::vec((any::<usize>(), 0u8..8), 1..6)) {
        let mut bytes = FIXTURES[which].1.to_vec();
        for (at, bit) in flips {
            let i = at % bytes.len();
            bytes[i] ^= 1 << bit;
        }
        let _ = inspect(&bytes);
    }

    #[test]
    fn flips_in_the_program_part_never_panic(which in 0usize..FIXTURES.len(), at in 0usize..2048, value in any::<u8>()) {
        let mut bytes = FIXTURES[which].1.to_vec();
        let i = at % bytes.len().min(2048);
        bytes[i] = value;
        let _ = inspect(&bytes);
    }

    #[test]
    fn random_bytes_are_refused(mut bytes in proptest::collection::vec(any::<u8>(), 0..4096), with_id in any::<bool>()) {
        if with_id && bytes.len() >= 8 {
            bytes[4..8].copy_from_slice(b"ET12");
        }
        // Random data almost never forms a valid program; it must never panic either way, and
        // every outcome says something checkable.
        let has_id = bytes.len() >= 8 && &bytes[4..8] == b"ET12";
        match inspect(&bytes) {
            Err(e) if bytes.len() < 8 => {
                prop_assert_eq!(e.code(), ErrorCode::PteTruncated);
            }
            Err(e) if !has_id => {
                prop_assert_eq!(e.code(), ErrorCode::PteNotAProgram);
            }
            Err(e) => {
                // Past the identifier check, so refused for what the bytes hold.
                prop_assert_ne!(e.code(), ErrorCode::PteNotAProgram);
            }
            Ok(report) => {
                // Only with the identifier, and deterministically so.
                prop_assert!(has_id);
                let again = inspect(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    serde_json::to_string(&report).map_err(|e| TestCaseError::fail(e.to_string()))?,
                    serde_json::to_string(&again).map_err(|e| TestCaseError::fail(e.to_string()))?
                );
            }
        }
    }

    #[test]
    fn spliced_fixtures_never_panic(a in 0usize..FIXTURES.len(), b in 0usize..FIXTURES.len(), cut in any::<usize>()) {
        let x = FIXTURES[a].1;
        let y = FIXTURES[b].1;
        let c = cut % x.len().min(y.len());
        let mut bytes = x[..c].to_vec();
        bytes.extend_from_slice(&y[c..]);
        let _ = inspect(&bytes);
    }
}
