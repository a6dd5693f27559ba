//! The apex kernel: Apex-MAP configs, their errors, and a measured run.

use mgbench_replay::apex::ApexParams;
use mgbench_replay::config::{parse_config, Defaults, Kernel, KernelKind, Origin};
use mgbench_replay::{replay, InlineSpec, Input, ReplayConfig};

use crate::common::config;

fn parse_err(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    parse_config(
        &v,
        Origin {
            source: "apex.json".into(),
            index: 2,
        },
        &Defaults::default(),
    )
    .unwrap_err()
    .to_string()
}

#[test]
fn keys_defaults_and_block_starts() {
    let c = config(r#"{"kernel":"apex","L":16,"K":0.25,"M":65536,"count":100,"seed":7}"#);
    assert_eq!(c.kernel.kind(), KernelKind::Apex);
    let Kernel::Apex(a) = &c.kernel else {
        unreachable!()
    };
    let p = ApexParams {
        m: 65536,
        l: 16,
        k: 0.25,
    };
    assert_eq!(a.params, p);
    assert_eq!(a.starts, p.block_starts(100, 7));
    assert!(a.starts.iter().all(|&s| s % 16 == 0 && s + 16 <= 65536));
    assert_eq!(c.bytes(), 8 * 16 * 100);
    assert_eq!(c.kernel.pattern_len(), 16);
    // Lower-case keys, defaults for M, seed and count (2^23 words per run).
    let c = config(r#"{"kernel":"APEX","l":4,"k":1}"#);
    let Kernel::Apex(a) = &c.kernel else {
        unreachable!()
    };
    assert_eq!((a.params.m, a.seed, c.count), (1 << 24, 1, (1 << 23) / 4));
    assert_eq!(c.name, "apex#0");
    // Other kernels ignore the apex keys, as Spatter ignores unknown keys.
    let c = config(r#"{"pattern":[0,1],"L":"junk","K":[1]}"#);
    assert_eq!(c.kernel.kind(), KernelKind::Gather);
}

#[test]
fn bad_apex_configs_are_refused_with_the_key_named() {
    for (json, want) in [
        (r#"{"kernel":"apex","K":0.5}"#, "\"L\" is missing"),
        (r#"{"kernel":"apex","L":8}"#, "\"K\" is missing"),
        (r#"{"kernel":"apex","L":0,"K":0.5}"#, "\"L\" is 0"),
        (r#"{"kernel":"apex","L":8,"K":0}"#, "\"K\" is 0"),
        (r#"{"kernel":"apex","L":8,"K":1.5}"#, "must be in (0, 1]"),
        (
            r#"{"kernel":"apex","L":8,"K":"x"}"#,
            "\"K\": \"x\" is not a number",
        ),
        (
            r#"{"kernel":"apex","L":-2,"K":0.5}"#,
            "\"L\": negative value -2",
        ),
        (
            r#"{"kernel":"apex","L":64,"K":0.5,"M":32}"#,
            "smaller than \"L\"",
        ),
        (
            r#"{"kernel":"apex","L":8,"l":8,"K":0.5}"#,
            "both \"L\" and \"l\"",
        ),
        (
            r#"{"kernel":"apex","L":8,"K":0.5,"count":0}"#,
            "\"count\" is 0",
        ),
        (
            r#"{"kernel":"apex","L":1,"K":0.5,"count":1e9}"#,
            "blocks per run",
        ),
    ] {
        let e = parse_err(json);
        assert!(e.starts_with("apex.json: config #2: "), "{e}");
        assert!(e.contains(want), "{json}: {e}");
    }
}

#[test]
fn an_apex_run_reports_accesses_and_ns_per_access() {
    let mut cfg = ReplayConfig::new(vec![Input::Inline(Box::new(InlineSpec {
        kernel: Some("apex".into()),
        apex_l: Some(8),
        apex_k: Some(0.1),
        apex_m: Some(1 << 20),
        count: Some(4096),
        ..InlineSpec::default()
    }))]);
    cfg.threads = 2;
    cfg.runs = Some(3);
    cfg.stream_elements = None;
    let recs = replay(&cfg, &mut |_| {}).unwrap();
    let r = &recs[0];
    assert_eq!(r.kernel, KernelKind::Apex);
    assert_eq!(r.accesses, 8 * 4096);
    assert_eq!(r.bytes, 8 * r.accesses);
    assert_eq!(r.sparse_bytes, 8 << 20);
    let a = r.apex.unwrap();
    assert_eq!((a.l, a.k, a.m, a.seed), (8, 0.1, 1 << 20, 1));
    assert!(r.min_time_s > 0.0 && r.accesses_per_s > 0.0);
    let ns = r.min_time_s * 1e9 / r.accesses as f64;
    assert!((r.ns_per_access - ns).abs() < 1e-9 * ns.max(1.0));
    assert!((r.accesses_per_s * r.min_time_s - r.accesses as f64).abs() < 1.0);
}
