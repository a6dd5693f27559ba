//! Property tests: the parsers never panic, and random small configs match the reference.

use std::path::Path;

use mgbench_replay::config::{parse_bytes, Defaults};
use mgbench_replay::kernel::{execute, reference, Buffers, WriteMode};
use mgbench_replay::pattern::Pattern;
use mgbench_replay::plan::{check_memory, footprint};
use mgbench_replay::pool::{static_range, Placement, Pool};
use proptest::prelude::*;

/// Arbitrary JSON values, biased towards config-shaped objects.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[A-Za-z0-9:,\\- ]{0,24}".prop_map(Value::String),
        prop_oneof![
            Just("UNIFORM:8:1"),
            Just("UNIFORM:8:4:NR"),
            Just("MS1:8:4:32"),
            Just("LAPLACIAN:2:2:100"),
            Just("gather"),
            Just("multigather"),
            Just("gs")
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    let keys = prop_oneof![
        Just("kernel"),
        Just("pattern"),
        Just("pattern-gather"),
        Just("pattern-scatter"),
        Just("delta"),
        Just("delta-gather"),
        Just("delta-scatter"),
        Just("count"),
        Just("wrap"),
        Just("pattern-size"),
        Just("boundary"),
        Just("nruns"),
        Just("name"),
        Just("other"),
    ];
    leaf.prop_recursive(3, 48, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..8).prop_map(|kv| {
                serde_json::Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn config_parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_bytes(&bytes, Path::new("fuzz.json"), &Defaults::default());
    }

    #[test]
    fn config_parser_never_panics_on_json(v in json_value()) {
        let text = serde_json::to_vec(&v).unwrap();
        if let Ok(configs) = parse_bytes(&text, Path::new("fuzz.json"), &Defaults::default()) {
            // Whatever parses can be planned without panicking, too.
            for c in &configs {
                if let Ok(f) = footprint(c) {
                    let _ = check_memory(c, &f, 4, Some(1 << 30));
                }
            }
        }
    }

    #[test]
    fn pattern_parser_never_panics(s in "[A-Za-z0-9:,\\- ]{0,40}") {
        let _ = Pattern::parse(&s);
    }

    #[test]
    fn generators_with_small_numbers_are_well_formed(
        len in 1usize..64, stride in 0usize..100, locs in prop::collection::btree_set(0usize..64, 0..4),
        gap in 1usize..50, dim in 1usize..4, order in 1usize..4, n in 1usize..20,
    ) {
        let u = Pattern::parse(&format!("UNIFORM:{len}:{stride}")).unwrap();
        prop_assert_eq!(u.indices.len(), len);
        let locs: Vec<usize> = locs.into_iter().filter(|&l| l < len).collect();
        if !locs.is_empty() {
            let list = locs.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(",");
            let m = Pattern::parse(&format!("MS1:{len}:{list}:{gap}")).unwrap();
            prop_assert_eq!(m.indices.len(), len);
            // MS1 never decreases.
            prop_assert!(m.indices.windows(2).all(|w| w[0] <= w[1]));
        }
        let l = Pattern::parse(&format!("LAPLACIAN:{dim}:{order}:{n}")).unwrap();
        prop_assert_eq!(l.indices.len(), 2 * dim * order + 1);
        // The centre is in the middle, neighbours symmetric around it.
        let c = l.indices[dim * order];
        for k in 0..dim * order {
            prop_assert_eq!(c - l.indices[k], l.indices[2 * dim * order - k] - c);
        }
    }

    #[test]
    fn random_gathers_match_reference(
        pattern in prop::collection::vec(0usize..200, 1..40),
        delta in 0usize..20, count in 1usize..60, wrap in 1usize..5, threads in 1usize..4,
    ) {
        let json = serde_json::json!({
            "pattern": pattern, "delta": delta, "count": count, "wrap": wrap
        });
        let cs = parse_bytes(json.to_string().as_bytes(), Path::new("p.json"), &Defaults::default()).unwrap();
        let c = &cs[0];
        let f = footprint(c).unwrap();
        let pool = Pool::new(threads, Placement::Unpinned).unwrap();
        let mut b = Buffers::allocate(&pool, &f).unwrap();
        execute(&pool, c, &mut b, WriteMode::Store);
        for t in 0..threads {
            let (_, _, dense) = reference(c, &f, WriteMode::Store, static_range(count, threads, t));
            prop_assert_eq!(&b.dense[t][..], &dense[..]);
        }
    }

    #[test]
    fn random_atomic_scatters_match_reference(
        pattern in prop::collection::vec(0usize..100, 1..30),
        delta in 0usize..10, count in 1usize..50, threads in 1usize..4,
    ) {
        let json = serde_json::json!({
            "kernel": "scatter", "pattern": pattern, "delta": delta, "count": count
        });
        let cs = parse_bytes(json.to_string().as_bytes(), Path::new("p.json"), &Defaults::default()).unwrap();
        let c = &cs[0];
        let f = footprint(c).unwrap();
        let pool = Pool::new(threads, Placement::Unpinned).unwrap();
        let mut b = Buffers::allocate(&pool, &f).unwrap();
        execute(&pool, c, &mut b, WriteMode::AtomicAdd);
        let (sparse, _, _) = reference(c, &f, WriteMode::AtomicAdd, 0..count);
        prop_assert_eq!(&b.sparse[..], &sparse[..]);
    }
}
