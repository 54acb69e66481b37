//! Writes the protocol v1 conformance vectors into `schemas/vectors/v1/` (see
//! `ferry_tests::vectors`). Run it only on purpose, and say why in the commit: the tests fail
//! whenever the code would write other bytes than the committed ones.

fn main() -> anyhow::Result<()> {
    let dir = ferry_tests::vectors::dir();
    let files = ferry_tests::vectors::generate()?;
    for (name, bytes) in &files {
        let path = dir.join(name);
        let old = std::fs::read(&path).ok();
        if old.as_deref() != Some(bytes.as_slice()) {
            std::fs::write(&path, bytes)?;
            println!("wrote {}", path.display());
        }
    }
    println!("{} vectors in {}", files.len(), dir.display());
    Ok(())
}
