//! Empty, access-less, damaged and foreign inputs.

use mgbench_synth::{synthesize, SynthConfig, SynthError};

use crate::common::{load, randoms, temp, write_trace};

#[test]
fn empty_and_accessless_traces() {
    let path = temp("empty.mgbt");
    write_trace(&path, &[], 10);
    let e = synthesize(&path, &SynthConfig::default()).unwrap_err();
    assert!(matches!(e, SynthError::Empty { .. }), "{e}");
    assert!(e.to_string().contains("no memory accesses"));
    let e = synthesize(
        &path,
        &SynthConfig {
            thread: Some(3),
            ..SynthConfig::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("thread 3"), "{e}");
}

#[test]
fn damaged_traces_are_refused_unless_allowed() {
    let v: Vec<_> = randoms(20_000, 1 << 20, 8)
        .into_iter()
        .map(|i| load(0x407000, i))
        .collect();
    let path = temp("damaged.mgbt");
    write_trace(&path, &v, 2000);
    let bytes = std::fs::read(&path).unwrap();
    let cut = temp("cut.mgbt");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = synthesize(&cut, &SynthConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("damaged at byte") && e.contains("--allow-damaged"),
        "{e}"
    );
    let r = synthesize(
        &cut,
        &SynthConfig {
            allow_damaged: true,
            keep_unsymbolized: true,
            ..SynthConfig::default()
        },
    )
    .unwrap();
    assert!(r.accesses > 0 && r.accesses < 20_000);
    assert!(r.notes.iter().any(|n| n.contains("damaged")));
}

#[test]
fn not_a_trace_and_missing_file() {
    let path = temp("notatrace.json");
    std::fs::write(&path, "[]").unwrap();
    let e = synthesize(&path, &SynthConfig::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not an mgbench trace"), "{e}");
    let e = synthesize(
        std::path::Path::new("/nonexistent.mgbt"),
        &SynthConfig::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("cannot open trace /nonexistent.mgbt"), "{e}");
    let e = synthesize(
        &path,
        &SynthConfig {
            top: 0,
            ..SynthConfig::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--top"), "{e}");
}
