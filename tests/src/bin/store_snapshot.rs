//! Records the store fixture `tests/fixtures/store-v1/` (see `ferry_tests::store_snapshot`).
//! Run it only on purpose, and say why in the commit.

fn main() -> anyhow::Result<()> {
    let dest = ferry_tests::store_snapshot::dir();
    if dest.exists() {
        std::fs::remove_dir_all(&dest)?;
    }
    ferry_tests::store_snapshot::record(&dest)?;
    println!("recorded {}", dest.display());
    Ok(())
}
