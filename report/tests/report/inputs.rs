//! Inputs: what is recognised, and clear errors for the rest.

use mgbench_report::inputs::load;
use mgbench_report::{build, ReportConfig, ReportError};

use crate::common::{fixture, temp_dir};

#[test]
fn every_fixture_kind_is_recognised() {
    let i = load(&[crate::common::data()], Default::default()).unwrap();
    assert_eq!(i.streams.len(), 3);
    assert_eq!(i.gpu_streams.len(), 1);
    assert_eq!(i.patterns.len(), 1);
    assert_eq!(i.analyses.len(), 1);
    assert_eq!(i.mpi_sweeps.len(), 12);
    assert!(i.records.len() > 40);
    // README.md is not a results file: directories only read .json, .csv and .mgbt.
    assert!(i.files.iter().all(|f| f.path.extension().unwrap() != "md"));
    assert!(i.files.iter().all(|f| f.sha256.len() == 64));
    // Named one by one, as a shell glob over the directory names them, the README is
    // skipped with a note and the rest read alike.
    let mut named: Vec<_> = std::fs::read_dir(crate::common::data())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    named.sort();
    assert!(named.iter().any(|p| p.ends_with("README.md")), "{named:?}");
    let j = load(&named, Default::default()).unwrap();
    assert_eq!(j.records.len(), i.records.len());
    assert_eq!(j.files.len(), i.files.len());
    assert!(
        j.notes
            .iter()
            .any(|n| n.contains("README.md: not an input") && n.contains("skipped")),
        "{:?}",
        j.notes
    );
}

fn err(files: &[std::path::PathBuf]) -> String {
    match load(files, Default::default()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{files:?} should be refused"),
    }
}

#[test]
fn bad_inputs_name_the_file_and_what_to_do() {
    let d = temp_dir("bad-inputs");
    let w = |n: &str, t: &str| {
        let p = d.join(n);
        std::fs::write(&p, t).unwrap();
        p
    };
    let e = err(&[d.join("missing.json")]);
    assert!(
        e.contains("missing.json") && e.contains("cannot read"),
        "{e}"
    );
    let e = err(&[w("notjson.json", "hello {")]);
    assert!(
        e.contains("notjson.json") && e.contains("not JSON") && e.contains("line 1"),
        "{e}"
    );
    let e = err(&[w("object.json", r#"{"what": 1}"#)]);
    assert!(
        e.contains("object.json") && e.contains("pattern file"),
        "{e}"
    );
    let e = err(&[w("other.csv", "a,b\n1,2\n")]);
    assert!(e.contains("other.csv") && e.contains("MPI sweep"), "{e}");
    let e = err(&[w(
        "lfs.json",
        "version https://git-lfs.github.com/spec/v1\noid sha256:1\nsize 5\n",
    )]);
    assert!(e.contains("git lfs pull"), "{e}");
    // A results CSV alone: report asks for its JSON twin.
    let csv = std::fs::read_to_string(fixture("mpi-sweep-weak.csv")).unwrap();
    let _ = csv;
    let e = err(&[w(
        "replay-x.csv",
        "schema_version,time,name,kernel,bandwidth_mbs\n1,t,n,gather,5\n",
    )]);
    assert!(e.contains("replay-x.json"), "{e}");
    let e = err(&[]);
    assert!(e.contains("no inputs"), "{e}");
    // An empty results file and an empty directory are noted; nothing to draw is an error.
    let empty = temp_dir("empty-inputs");
    std::fs::write(empty.join("replay-empty.json"), "[]").unwrap();
    let cfg = ReportConfig::new(vec![empty.clone()], "t".into());
    match build(&cfg) {
        Err(ReportError::NothingToReport(why)) => assert!(why.contains("1 file"), "{why}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("nothing to draw must be an error"),
    }
}

#[test]
fn traces_are_analysed() {
    use mgbench_capture::trace::*;
    let d = temp_dir("trace-input");
    let p = d.join("t.mgbt");
    let meta = TraceMeta {
        command: vec!["./demo".into()],
        backend: "test".into(),
        mode: Mode::Full,
        start_time: "2026-01-01T00:00:00Z".into(),
        roi: None,
        notes: vec![],
    };
    let mut w = TraceWriter::create(std::fs::File::create(&p).unwrap(), &meta).unwrap();
    let accesses: Vec<Access> = (0..5000u64)
        .map(|i| Access {
            ip: 0x401000,
            addr: 0x10000 + 8 * (i % 700),
            size: 8,
            kind: AccessKind::Load,
        })
        .collect();
    w.write_chunk(&Chunk {
        thread: 0,
        samples: vec![SampleHeader {
            id: 0,
            skipped_before: 0,
            len: accesses.len() as u32,
        }],
        accesses,
    })
    .unwrap();
    w.write_end(&EndInfo::default()).unwrap();
    drop(w);
    let r = build(&ReportConfig::new(vec![p], "t".into())).unwrap();
    assert!(
        r.figures
            .iter()
            .any(|f| f.id.starts_with("reuse-cdf-words")),
        "{:?}",
        r.figures
    );
    assert!(r.html.contains("a trace of 5000 accesses (analysed)"));
}
