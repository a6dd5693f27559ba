//! The shipped suite in patterns/: every file plans, random patterns come from their seed, and
//! every config runs.

use mgbench_replay::config::{load_file, Defaults};
use mgbench_replay::{plan, replay, Input, ReplayConfig};

use crate::common::patterns_dir;

fn suite_files() -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(patterns_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn suite_covers_the_documented_patterns_and_plans() {
    let files = suite_files();
    assert!(files.len() >= 4, "{files:?}");
    let inputs = files.iter().cloned().map(Input::File).collect();
    let planned = plan(&ReplayConfig::new(inputs)).unwrap();
    let names: Vec<&str> = planned.iter().map(|p| p.config.name.as_str()).collect();
    for want in [
        "uniform-stride-1",
        "uniform-stride-128",
        "ms1-one-gap",
        "laplacian-2d-9pt",
        "laplacian-3d-7pt",
        "random-gather-1024-l2",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // Names are unique, so results can be joined across machines by name.
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len());
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn random_patterns_are_reproducible_from_their_seed() {
    let text = std::fs::read_to_string(patterns_dir().join("random.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for c in v.as_array().unwrap() {
        let seed = c["seed"].as_u64().unwrap();
        let span: u64 = c["generator"]
            .as_str()
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let mut state = seed;
        let want: Vec<u64> = (0..1024).map(|_| splitmix64(&mut state) % span).collect();
        let got: Vec<u64> = c["pattern"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(got, want, "{}", c["name"]);
    }
}

#[test]
fn every_shipped_config_runs() {
    // Shrink counts so the whole suite runs in a moment; the point is that each kernel and
    // generator in the suite executes, not the numbers.
    let mut inputs = Vec::new();
    for f in suite_files() {
        for c in load_file(&f, &Defaults::default()).unwrap() {
            assert!(
                c.count >= 1024,
                "{}: suite sizes are meant to measure memory",
                c.name
            );
        }
        inputs.push(Input::File(f));
    }
    let mut cfg = ReplayConfig::new(inputs);
    cfg.runs = Some(1);
    cfg.warmup = 0;
    cfg.threads = 2;
    cfg.stream_elements = None;
    let recs = replay(&cfg, &mut |_| {}).unwrap();
    assert!(recs
        .iter()
        .all(|r| r.bandwidth_mbs.is_finite() && r.bandwidth_mbs > 0.0));
}
