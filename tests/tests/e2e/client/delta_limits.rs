//! Delta updates at the edges of the client's limits and its cache: kept chunk indexes that
//! lie or are not files, the download size limit, and a byte budget that a delta fits.

use std::sync::Arc;

use ferry_client::ClientBuilder;
use ferry_client::executorch_runtime::ExecuTorchRuntime;
use ferry_shared::Sha256Digest;

use super::delta::{LARGE, World, client, fine_tuned, noise, served, walk};
use ferry_tests::kit::device;

/// Loads 2.0.0 on another thread, failing the test instead of hanging when it takes over a
/// minute.
fn load_v2_within_a_minute(world: &World) {
    let url = world.app.url();
    let (app_trust, cache) = (world.app.trust(), world.cache());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let c = ClientBuilder::new(&url, app_trust)
            .cache_dir(&cache)
            .app_version(semver::Version::new(1, 0, 0))
            .runtime(Arc::new(ExecuTorchRuntime::new()))
            .build()
            .expect("client");
        let _ = tx.send(
            c.load("delta", &device("delta-device"))
                .map(|m| m.release.clone()),
        );
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the load ends within a minute");
    assert_eq!(got.expect("2.0.0 loads"), "2.0.0");
}

#[test]
fn a_planted_or_wrong_kept_index_never_breaks_an_update() {
    let v1 = noise(LARGE, 11);
    let v1_digest = Sha256Digest::of(&v1);
    // A kept index that parses but lies: 2.0.0's own chunks claimed for 1.0.0's blob. The
    // chunks before the rewritten region match, the first after it does not: the delta stops,
    // the file comes whole from there, and the lying index is dropped.
    let world = World::new(&v1, fine_tuned(&v1));
    let memo = world
        .cache()
        .join("chunks")
        .join(format!("{}.json", v1_digest.to_hex()));
    let v2_index = ferry_server::release::sign::chunks::index_of_file(
        &world.dir.path().join("v2/weights.bin"),
    )
    .expect("index");
    std::fs::write(&memo, v2_index.to_bytes()).expect("plant");
    let before = served(&world.app);
    world.load_v2(&world.app.url());
    assert!(
        served(&world.app) - before >= LARGE as u64 / 4,
        "the rest came whole"
    );
    assert!(
        world.memo(&v1_digest).is_none(),
        "the lying index is dropped"
    );
    // A kept index that is a link to an endless device, or a pipe nobody writes: not read;
    // the blob is cut again and the delta works.
    for plant in ["link", "fifo"] {
        let world = World::new(&v1, fine_tuned(&v1));
        let memo = world
            .cache()
            .join("chunks")
            .join(format!("{}.json", v1_digest.to_hex()));
        std::fs::remove_file(&memo).expect("kept index");
        if plant == "link" {
            std::os::unix::fs::symlink("/dev/zero", &memo).expect("symlink");
        } else {
            let ok = std::process::Command::new("mkfifo")
                .arg(&memo)
                .status()
                .expect("mkfifo");
            assert!(ok.success());
        }
        let before = served(&world.app);
        load_v2_within_a_minute(&world);
        let sent = served(&world.app) - before;
        assert!(sent <= LARGE as u64 / 10, "{plant}: {sent}");
        assert_eq!(
            world.memo(&v1_digest).map(|i| i.size),
            Some(LARGE as u64),
            "{plant}: the blob was cut again and its index kept as a file"
        );
    }
}

#[test]
fn a_delta_keeps_to_the_download_size_limit() {
    let v1 = noise(LARGE, 13);
    let world = World::new(&v1, fine_tuned(&v1));
    let c = Arc::new(
        ClientBuilder::new(world.app.url(), world.app.trust())
            .cache_dir(world.cache())
            .app_version(semver::Version::new(1, 0, 0))
            .runtime(Arc::new(ExecuTorchRuntime::new()))
            .download_limits(ferry_client::DownloadLimits {
                max_bytes: LARGE as u64 - 1,
                ..Default::default()
            })
            .build()
            .expect("client"),
    );
    let before = served(&world.app);
    // 2.0.0's file is over the limit: not built from chunks either.
    let err = c
        .load("delta", &device("delta-device"))
        .expect_err("over the limit");
    assert!(err.to_string().contains("(too_large)"), "{err}");
    assert_eq!(served(&world.app), before, "no byte of 2.0.0 was fetched");
    let v2 = Sha256Digest::of(&world.v2).to_hex();
    // (Its download lock file, empty, is all there is of it.)
    let held: Vec<_> = walk(&world.cache())
        .into_iter()
        .filter(|p| {
            p.to_string_lossy().contains(&v2) && !p.starts_with(world.cache().join("locks"))
        })
        .collect();
    assert!(held.is_empty(), "nothing of 2.0.0 in the cache: {held:?}");
}

#[test]
fn a_byte_budget_counts_what_the_delta_fetches() {
    use ferry_client::{DownloadPolicy, LoadOptions};
    let v1 = noise(LARGE, 15);
    let world = World::new(&v1, fine_tuned(&v1));
    let c = client(&world.app.url(), &world.app, &world.cache());
    // The plan counts the index and the missing chunks, not the whole file.
    let plan = c
        .plan_download("delta", &device("delta-device"))
        .expect("plan");
    assert_eq!(plan.release, "2.0.0");
    assert!(
        plan.to_download >= LARGE as u64 / 20 && plan.to_download <= LARGE as u64 / 8,
        "{plan:?}"
    );
    // A budget the whole file is over and the delta is within: the update loads.
    let budget = LARGE as u64 / 5;
    let opts = LoadOptions {
        policy: DownloadPolicy {
            max_download_bytes: Some(budget),
            ..DownloadPolicy::default()
        },
        ..LoadOptions::default()
    };
    let before = served(&world.app);
    let m = c
        .load_with("delta", &device("delta-device"), &opts)
        .expect("loads");
    assert_eq!(m.release, "2.0.0", "{:?}", m.source);
    let sent = served(&world.app) - before;
    assert!(sent <= budget, "{sent} over the budget of {budget}");
    // A budget under the delta too defers, before any chunk is fetched.
    let v1 = noise(LARGE, 17);
    let world = World::new(&v1, fine_tuned(&v1));
    let c = client(&world.app.url(), &world.app, &world.cache());
    let tight = LoadOptions {
        policy: DownloadPolicy {
            max_download_bytes: Some(LARGE as u64 / 50),
            ..DownloadPolicy::default()
        },
        ..LoadOptions::default()
    };
    let m = c
        .load_with("delta", &device("delta-device"), &tight)
        .expect("the last known good");
    assert_eq!(m.release, "1.0.0");
    assert!(
        matches!(&m.source, ferry_client::Source::LastKnownGood { code, .. } if code == "download_deferred"),
        "{:?}",
        m.source
    );
}
