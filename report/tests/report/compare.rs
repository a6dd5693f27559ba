//! The machine comparison of the three fixture machines.

use mgbench_replay::record::ReplayRecord;
use mgbench_report::compare::{compare, single_runs};
use mgbench_report::inputs::load;
use mgbench_report::ReportError;

use crate::common::{data, fixture, temp_dir};

fn three() -> mgbench_report::inputs::Inputs {
    load(
        &[
            fixture("machine-a-replay.json"),
            fixture("machine-a-stream.json"),
            fixture("machine-b-replay.json"),
            fixture("machine-b-stream.json"),
            fixture("machine-c-replay.json"),
            fixture("machine-c-stream.json"),
        ],
        Default::default(),
    )
    .unwrap()
}

#[test]
fn ratios_stream_predictions_and_order() {
    let i = three();
    let c = compare(&i.records, &i.streams, &i.gpu_streams, None).unwrap();
    let names: Vec<&str> = c.machines.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["vm", "hbm-node", "ddr-node"]);
    assert_eq!(c.baseline, 0);
    // The derived machines scale STREAM by 4 and 1.5.
    for r in &c.rows {
        let p = &r.stream_predicted_ratio;
        assert!((p[0].unwrap() - 1.0).abs() < 1e-12);
        assert!((p[1].unwrap() - 4.0).abs() < 1e-9, "{p:?}");
        assert!((p[2].unwrap() - 1.5).abs() < 1e-9, "{p:?}");
        assert!((r.ratio_to_baseline[0].unwrap() - 1.0).abs() < 1e-12);
    }
    // Scatters were scaled by 2.5 and 1.1 against STREAM's 4 and 1.5: the largest departure
    // is log2(4 / 2.5), and they come first.
    let top = &c.rows[0];
    assert_eq!(top.kernel.as_str(), "scatter", "{:?}", top.pattern);
    assert!(
        (top.departure.unwrap() - (4.0f64 / 2.5).log2()).abs() < 1e-6,
        "{:?}",
        top.departure
    );
    assert!(c.rows.windows(2).all(|w| w[0].departure >= w[1].departure));
    let gather = c
        .rows
        .iter()
        .find(|r| r.pattern == "uniform-stride-1")
        .unwrap();
    assert!((gather.ratio_to_baseline[1].unwrap() - 3.5).abs() < 1e-6);
    // Threads differ between the machines: flagged, not hidden.
    assert!(
        gather.flags.iter().any(|f| f.starts_with("threads differ")),
        "{:?}",
        gather.flags
    );
    // % of STREAM: bandwidth / the machine's STREAM copy.
    let m = &c.machines[1];
    let pct = 100.0 * gather.bandwidth_mbs[1].unwrap() / m.stream_copy_mbs.unwrap();
    assert!((gather.pct_of_stream[1].unwrap() - pct).abs() < 1e-9);
}

#[test]
fn table_json_and_csv() {
    let i = three();
    let c = compare(&i.records, &i.streams, &i.gpu_streams, Some("ddr")).unwrap();
    assert_eq!(c.machines[c.baseline].name, "ddr-node");
    let t = c.table();
    assert!(
        t.contains("baseline ddr-node") && t.contains("[2] MB/s") && t.contains("STREAM x"),
        "{t}"
    );
    let csv = c.csv().unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "pattern,kernel,machine,baseline,bandwidth_mbs,runs,stream_copy_mbs,pct_of_stream,ratio_to_baseline,stream_predicted_ratio,departure_log2,flags"
    );
    assert_eq!(lines.count(), 3 * c.rows.len());
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["machines"].as_array().unwrap().len(), 3);
    assert_eq!(v["baseline"], 2);
    let e = compare(&i.records, &i.streams, &i.gpu_streams, Some("nosuch"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("nosuch") && e.contains("hbm-node"), "{e}");
}

#[test]
fn versions_and_missing_stream_are_flagged() {
    let i = three();
    let mut recs: Vec<ReplayRecord> = i.records.clone();
    for r in recs.iter_mut().filter(|r| r.host.hostname == "hbm-node") {
        r.mgbench_version = "0.0.9".into();
        r.stream_copy_mbs = None;
    }
    let c = compare(&recs, &[], &[], None).unwrap();
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("different mgbench versions")),
        "{:?}",
        c.warnings
    );
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("hbm-node has no STREAM")),
        "{:?}",
        c.warnings
    );
    assert!(c.rows[0]
        .flags
        .iter()
        .any(|f| f.contains("mgbench versions differ")));
    assert!(c.rows.iter().all(|r| r.stream_predicted_ratio[1].is_none()));
}

#[test]
fn mpi_and_sweep_records_are_not_machines() {
    let i = load(&[data()], Default::default()).unwrap();
    let single = single_runs(&i.records);
    assert!(single.len() < i.records.len());
    let c = compare(&single, &i.streams, &i.gpu_streams, None).unwrap();
    assert_eq!(
        c.machines.len(),
        3,
        "{:?}",
        c.machines.iter().map(|m| &m.name).collect::<Vec<_>>()
    );
    assert!(matches!(
        compare(&[], &[], &[], None),
        Err(ReportError::NothingToCompare)
    ));
    let _ = temp_dir("unused");
}

/// A GPU beside a CPU, as `replay --cuda` on an H100 and `replay` on its host left them: the
/// GPU launches a grid that follows each config's count, so its threads launched differ by
/// design; its user chose threads per block, which are the same. Neither is flagged, and a
/// CPU and a GPU are not "threads differ" either.
#[test]
fn a_gpu_compares_by_threads_per_block() {
    use mgbench_replay::gpu::{DeviceInfo, GpuRun};
    let i = three();
    let cpu: Vec<ReplayRecord> = i
        .records
        .iter()
        .filter(|r| r.host.hostname == "vm")
        .cloned()
        .collect();
    let gpu_of = |block: u32| -> Vec<ReplayRecord> {
        cpu.iter()
            .enumerate()
            .map(|(k, r)| {
                let mut g = r.clone();
                g.backend = "cuda".into();
                g.threads = 1_081_344 >> (k % 3);
                g.device = Some(DeviceInfo {
                    ordinal: 0,
                    name: "NVIDIA H100 80GB HBM3".into(),
                    memory_bytes: 85_017_493_504,
                    sm_count: 132,
                    compute_capability: "9.0".into(),
                    driver_version: "13.0".into(),
                });
                g.gpu = Some(GpuRun {
                    function: "gather".into(),
                    block,
                    grid: (g.threads / block as usize) as u32,
                    sweep: None,
                });
                g
            })
            .collect()
    };
    let mut recs = cpu.clone();
    recs.extend(gpu_of(256));
    let c = compare(&recs, &i.streams, &i.gpu_streams, None).unwrap();
    assert_eq!(c.machines.len(), 2);
    let gpu = c.machines.iter().find(|m| m.device.is_some()).unwrap();
    assert_eq!(gpu.threads, [256]);
    assert!(
        !c.warnings.iter().any(|w| w.contains("different")),
        "{:?}",
        c.warnings
    );
    assert!(
        c.rows
            .iter()
            .all(|r| !r.flags.iter().any(|f| f.contains("threads"))),
        "{:?}",
        c.rows.iter().map(|r| &r.flags).collect::<Vec<_>>()
    );
    assert!(c.table().contains("threads per block 256"), "{}", c.table());
    // Two block sizes on one GPU are mixed in its medians, and said so.
    let mut mixed = recs.clone();
    let other = gpu_of(128);
    mixed.truncate(cpu.len());
    let half = other.len() / 2;
    mixed.extend(gpu_of(256).into_iter().take(half));
    mixed.extend(other.into_iter().skip(half));
    let c = compare(&mixed, &i.streams, &i.gpu_streams, None).unwrap();
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("different threads per block (128, 256)")),
        "{:?}",
        c.warnings
    );
}

/// Two hosts that share a hostname (cloud VMs named "vm" or "localhost") but not a CPU model
/// are two machines, each with its own STREAM; a hostname with one CPU model keeps its plain
/// name.
#[test]
fn hosts_sharing_a_hostname_stay_apart() {
    let i = three();
    let mut recs: Vec<ReplayRecord> = i.records.clone();
    let mut streams = i.streams.clone();
    // hbm-node becomes a second "vm" with its own CPU model.
    for r in recs.iter_mut().filter(|r| r.host.hostname == "hbm-node") {
        r.host.hostname = "vm".into();
        r.host.cpu_model = "Other CPU".into();
    }
    for s in streams.iter_mut().filter(|s| s.host.hostname == "hbm-node") {
        s.host.hostname = "vm".into();
        s.host.cpu_model = "Other CPU".into();
    }
    let plain = compare(&i.records, &i.streams, &i.gpu_streams, None).unwrap();
    let c = compare(&recs, &streams, &i.gpu_streams, None).unwrap();
    let names: Vec<&str> = c.machines.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    let vm = &c.machines[0];
    let other = &c.machines[1];
    assert!(
        vm.name.starts_with("vm [") && vm.name != other.name,
        "{names:?}"
    );
    assert_eq!(other.name, "vm [Other CPU]");
    assert_eq!(c.machines[2].name, "ddr-node");
    // Each keeps the records and STREAM of its own host.
    for (k, m) in c.machines.iter().enumerate() {
        assert_eq!(m.records, plain.machines[k].records, "{}", m.name);
        assert_eq!(
            m.stream_copy_mbs, plain.machines[k].stream_copy_mbs,
            "{}",
            m.name
        );
    }
    assert!(
        !c.warnings
            .iter()
            .any(|w| w.contains("different thread counts")),
        "{:?}",
        c.warnings
    );
    // On the bandwidth-bandwidth plot, the first vm's longer name would run into ddr-node's
    // (STREAM 33 and 49 GB/s): its number stands there and a note names it; the fastest
    // machine has room up to the frame's edge.
    let s = mgbench_report::figures::machines::section(
        &c,
        &mut mgbench_report::figures::Ids::default(),
    )
    .unwrap();
    let bb = s
        .figures
        .iter()
        .find(|f| f.id == "bandwidth-bandwidth")
        .unwrap();
    assert!(bb.svg.text.contains(">[0]<"), "{}", bb.svg.text);
    assert!(bb.svg.text.contains(">vm [Other CPU]<"), "{}", bb.svg.text);
    assert!(
        bb.notes
            .iter()
            .any(|n| n == &format!("Machines by number: [0] {}", c.machines[0].name)),
        "{:?}",
        bb.notes
    );
}
