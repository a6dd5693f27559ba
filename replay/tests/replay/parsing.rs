//! Spatter JSON: generators, defaults, delta rules, truncation and boundary.

use std::path::Path;

use mgbench_replay::config::{parse_bytes, Defaults, Kernel, KernelKind};
use mgbench_replay::pattern::Pattern;

use crate::common::config;

fn indices(spec: &str) -> Vec<usize> {
    Pattern::parse(spec).unwrap().indices
}

#[test]
fn design_generator_examples() {
    assert_eq!(indices("MS1:8:4:32"), [0, 1, 2, 3, 35, 36, 37, 38]);
    assert_eq!(indices("MS1:8:2,3:20"), [0, 1, 21, 41, 42, 43, 44, 45]);
    assert_eq!(
        indices("LAPLACIAN:2:2:100"),
        [0, 100, 198, 199, 200, 201, 202, 300, 400]
    );
    assert_eq!(indices("UNIFORM:5:2"), [0, 2, 4, 6, 8]);
}

#[test]
fn generators_inside_json() {
    let c = config(r#"{"pattern":"MS1:8:4:32"}"#);
    assert_eq!(c.kernel.effective_pattern().0, [0, 1, 2, 3, 35, 36, 37, 38]);
    // Spatter's CLI form: a comma-separated string.
    let c = config(r#"{"pattern":"3,1,4"}"#);
    assert_eq!(c.kernel.effective_pattern().0, [3, 1, 4]);
}

#[test]
fn every_default_is_spatters() {
    let c = config(r#"{"pattern":[0]}"#);
    assert_eq!(c.kernel.kind(), KernelKind::Gather);
    assert_eq!(c.kernel.delta(), 8);
    assert_eq!(c.count, 1024);
    assert_eq!(c.wrap, 1);
    assert_eq!(c.nruns, 10);
    assert_eq!(c.delta_source, "default");
    let c = config(r#"{"kernel":"gs","pattern-gather":[0],"pattern-scatter":[0]}"#);
    match c.kernel {
        Kernel::GatherScatter {
            delta_gather,
            delta_scatter,
            ..
        } => assert_eq!((delta_gather, delta_scatter), (8, 8)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn delta_rules() {
    // Explicit key beats the default.
    let c = config(r#"{"pattern":[0,1],"delta":3}"#);
    assert_eq!((c.kernel.delta(), c.delta_source.as_str()), (3, "config"));
    // NR sets delta = len * stride.
    let c = config(r#"{"pattern":"UNIFORM:8:4:NR"}"#);
    assert_eq!(c.kernel.delta(), 32);
    assert_eq!(c.delta_source, "generator:UNIFORM:NR");
    // A numeric third field sets the delta.
    let c = config(r#"{"pattern":"UNIFORM:8:4:7"}"#);
    assert_eq!(
        (c.kernel.delta(), c.delta_source.as_str()),
        (7, "generator:UNIFORM")
    );
    // LAPLACIAN forces 1, even against an explicit key, and says so.
    let c = config(r#"{"pattern":"LAPLACIAN:2:1:10","delta":8}"#);
    assert_eq!(c.kernel.delta(), 1);
    assert!(
        c.notes.iter().any(|n| n.contains("overrides")),
        "{:?}",
        c.notes
    );
    // An explicit key equal to the generator's delta is not a conflict.
    let c = config(r#"{"pattern":"UNIFORM:8:1:NR","delta":8}"#);
    assert!(c.notes.is_empty(), "{:?}", c.notes);
    // gs: each side resolves its own delta.
    let c = config(
        r#"{"kernel":"gs","pattern-gather":"UNIFORM:2:2:NR","pattern-scatter":[0,1],"delta-scatter":5}"#,
    );
    match c.kernel {
        Kernel::GatherScatter {
            delta_gather,
            delta_scatter,
            ..
        } => assert_eq!((delta_gather, delta_scatter), (4, 5)),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.delta_source, "gather=generator:UNIFORM:NR,scatter=config");
}

#[test]
fn pattern_size_truncates_and_boundary_wraps() {
    let c = config(r#"{"pattern":"UNIFORM:8:10","pattern-size":3}"#);
    assert_eq!(c.kernel.effective_pattern().0, [0, 10, 20]);
    assert!(c.notes.iter().any(|n| n.contains("truncated")));
    // pattern-size 0 means "no truncation", as in Spatter.
    let c = config(r#"{"pattern":"UNIFORM:4:1","pattern-size":0}"#);
    assert_eq!(c.kernel.pattern_len(), 4);
    let c = config(r#"{"pattern":[5, 17, 40],"boundary":16}"#);
    assert_eq!(c.kernel.effective_pattern().0, [5, 1, 8]);
    assert!(c.notes.iter().any(|n| n.contains("boundary")));
    // boundary applies after truncation (Spatter's order).
    let c = config(r#"{"pattern":[100, 3, 7],"pattern-size":2,"boundary":50}"#);
    assert_eq!(c.kernel.effective_pattern().0, [0, 3]);
}

#[test]
fn kernel_names_and_keys() {
    for (name, kind) in [
        ("Gather", KernelKind::Gather),
        ("SCATTER", KernelKind::Scatter),
        ("gs", KernelKind::GatherScatter),
        ("sg", KernelKind::GatherScatter),
        ("MultiGather", KernelKind::MultiGather),
        ("multiscatter", KernelKind::MultiScatter),
    ] {
        let c = config(&format!(
            r#"{{"kernel":"{name}","pattern":[0,1],"pattern-gather":[1,0],"pattern-scatter":[0,1],"name":"n"}}"#
        ));
        assert_eq!(c.kernel.kind(), kind, "{name}");
        assert_eq!(c.name, "n");
    }
}

#[test]
fn files_are_arrays_or_single_objects_and_unknown_keys_are_ignored() {
    let d = Defaults::default();
    let many = parse_bytes(
        br#"[{"pattern":[0]}, {"pattern":[1], "shared-memory": 4, "verbosity": 3}]"#,
        Path::new("x.json"),
        &d,
    )
    .unwrap();
    assert_eq!(many.len(), 2);
    assert_eq!(many[1].origin.index, 1);
    let one = parse_bytes(br#"{"pattern":[0]}"#, Path::new("x.json"), &d).unwrap();
    assert_eq!(one.len(), 1);
}
