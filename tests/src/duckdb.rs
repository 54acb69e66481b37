//! An independent reader for the Parquet files ferry writes: DuckDB from PyPI, installed by
//! `tests/setup.sh` into `.deps/pytools`. Queries run in a Python process and come back as JSON
//! rows, so what the tests check is what an analyst's DuckDB sees, not ferry's own decoder.

use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.deps/pytools/bin/python")
}

const RUN: &str = "import sys, json, duckdb
rel = duckdb.sql(sys.argv[1])
cols = rel.columns
print(json.dumps([dict(zip(cols, row)) for row in rel.fetchall()], default=str))
";

/// Runs `sql` in DuckDB and returns its rows as JSON objects (column name to value; values
/// JSON cannot carry, such as timestamps, as strings). Panics with DuckDB's message on error,
/// and with how to install DuckDB when it is missing (a missing reader must fail, not skip).
pub fn query(sql: &str) -> Vec<serde_json::Value> {
    let py = python();
    assert!(
        py.is_file(),
        "{} is missing: run tests/setup.sh (tests/run does) to install duckdb",
        py.display()
    );
    let out = Command::new(&py)
        .args(["-c", RUN, sql])
        .output()
        .expect("run duckdb");
    assert!(
        out.status.success(),
        "duckdb failed on {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("duckdb rows as json")
}

/// The `read_parquet` call over the raw telemetry under `root` (a store's root folder), with
/// the Hive partition column `date`.
pub fn events_table(root: &Path) -> String {
    format!(
        "read_parquet('{}/telemetry/events/*/*.parquet', hive_partitioning = true, union_by_name = true)",
        root.display()
    )
}
