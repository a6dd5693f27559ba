//! `replay --cuda` and `stream --cuda` as a user on a machine without a GPU meets them: clear
//! errors and exit status 1, never a panic; option misuse caught before the GPU is looked for.
//! (The GPU logic itself is tested against a simulated device in mgbench-replay, and on a real
//! GPU by its ignored device tests, which scripts/gpu-check.sh runs.)

use crate::common::{mgbench, stderr, temp_dir};

/// Whether this machine has a CUDA driver library (then the no-driver tests do not apply).
fn has_driver() -> bool {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/local/cuda/lib64",
        "/usr/lib",
    ]
    .iter()
    .any(|d| std::path::Path::new(d).join("libcuda.so.1").exists())
}

#[test]
fn cuda_without_a_driver_is_a_clear_error() {
    if has_driver() {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    let dir = temp_dir("cuda-nodriver");
    for args in [
        &[
            "replay",
            "--cuda",
            "--pattern",
            "UNIFORM:8:1",
            "--count",
            "64",
        ][..],
        &["replay", "--cuda", "--sweep"][..],
        &["stream", "--cuda"][..],
    ] {
        let o = mgbench(args, &dir);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("no CUDA driver found"), "{args:?}: {err}");
        assert!(err.contains("libcuda.so.1"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(o.stdout.is_empty(), "{args:?} printed results");
    }
    // Nothing half-written: the results directory was never created.
    assert!(!dir.join("results").exists());
}

#[test]
fn cuda_options_are_checked_before_the_device() {
    let dir = temp_dir("cuda-options");
    std::fs::write(
        dir.join("bad.json"),
        r#"[{"kernel": "gather", "pattern": []}]"#,
    )
    .unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["replay", "--sweep", "-p", "0,1"],
            "only apply with --cuda",
        ),
        (
            &["replay", "--device", "1", "-p", "0,1"],
            "only apply with --cuda",
        ),
        (
            &["replay", "--cuda", "--sweep-len", "8", "-p", "0,1"],
            "only applies with --sweep",
        ),
        (
            &[
                "replay",
                "--cuda",
                "--sweep",
                "--sweep-len",
                "0",
                "-p",
                "0,1",
            ],
            "at least 1",
        ),
        (
            &["replay", "--cuda", "--threads", "2", "-p", "0,1"],
            "no effect with --cuda",
        ),
        (
            &["replay", "--cuda", "--mpi", "2", "-p", "0,1"],
            "--cuda with MPI",
        ),
        (&["replay", "--cuda", "bad.json"], "bad.json: config #0"),
        (&["stream", "--device", "1"], "only applies with --cuda"),
    ];
    for (args, want) in cases {
        let o = mgbench(args, &dir);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
