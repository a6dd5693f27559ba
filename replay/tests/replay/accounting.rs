//! Bytes and bandwidth follow Spatter: 8 x elements x count, MB = 1e6 bytes, minimum time.

use mgbench_replay::{replay, InlineSpec, Input, ReplayConfig};

use crate::common::config;

#[test]
fn bytes_per_kernel() {
    assert_eq!(
        config(r#"{"pattern":"UNIFORM:8:1","count":100}"#).bytes(),
        8 * 8 * 100
    );
    assert_eq!(
        config(r#"{"kernel":"scatter","pattern":[0,9,3],"count":7}"#).bytes(),
        8 * 3 * 7
    );
    // gs counts both sides.
    assert_eq!(
        config(r#"{"kernel":"gs","pattern-gather":[0,1],"pattern-scatter":[2,3],"count":10}"#)
            .bytes(),
        8 * (2 + 2) * 10
    );
    // Multi-kernels count the inner pattern.
    assert_eq!(
        config(
            r#"{"kernel":"multigather","pattern":[0,1,2,3,4],"pattern-gather":[4,1],"count":3}"#
        )
        .bytes(),
        8 * 2 * 3
    );
    assert_eq!(
        config(
            r#"{"kernel":"multiscatter","pattern":[0,1,2,3],"pattern-scatter":[3,3,0],"count":5}"#
        )
        .bytes(),
        8 * 3 * 5
    );
}

#[test]
fn records_report_minimum_time_and_decimal_megabytes() {
    let mut cfg = ReplayConfig::new(vec![Input::Inline(Box::new(InlineSpec {
        kernel: Some("gather".into()),
        pattern: Some("UNIFORM:8:1".into()),
        count: Some(4096),
        ..InlineSpec::default()
    }))]);
    cfg.threads = 2;
    cfg.runs = Some(5);
    cfg.stream_elements = None;
    let recs = replay(&cfg, &mut |_| {}).unwrap();
    let r = &recs[0];
    assert_eq!(r.bytes, 8 * 8 * 4096);
    assert_eq!(r.run_times_s.len(), 5);
    let min = r.run_times_s.iter().cloned().fold(f64::INFINITY, f64::min);
    assert_eq!(r.min_time_s, min);
    let expect = r.bytes as f64 / min / 1e6;
    assert!((r.bandwidth_mbs - expect).abs() <= 1e-9 * expect);
    assert_eq!((r.threads, r.ranks, r.warmup_runs), (2, 1, 1));
    assert!(r.stream_copy_mbs.is_none() && r.pct_of_stream.is_none());
}

#[test]
fn percent_of_stream_uses_copy() {
    let mut cfg = ReplayConfig::new(vec![Input::Inline(Box::new(InlineSpec {
        pattern: Some("UNIFORM:8:1".into()),
        count: Some(1024),
        ..InlineSpec::default()
    }))]);
    cfg.threads = 1;
    cfg.runs = Some(2);
    cfg.stream_elements = Some(mgbench_replay::StreamSize::Elements(100_000));
    let mut stream_copy = None;
    let recs = replay(&cfg, &mut |e| {
        if let mgbench_replay::Event::Stream(s) = e {
            stream_copy = Some(s.copy_mbs);
        }
    })
    .unwrap();
    let r = &recs[0];
    assert_eq!(r.stream_copy_mbs, stream_copy);
    let pct = 100.0 * r.bandwidth_mbs / stream_copy.unwrap();
    assert!((r.pct_of_stream.unwrap() - pct).abs() < 1e-9 * pct);
}
