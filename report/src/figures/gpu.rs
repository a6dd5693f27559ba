//! GPU throughput: bandwidth against bytes moved (log2 x) per pattern for `replay --cuda
//! --sweep` results, with the device's STREAM and each sweep's plateau point marked.

use std::collections::BTreeMap;

use mgbench_replay::gpu::GpuStreamRecord;
use mgbench_replay::record::ReplayRecord;

use super::{gbs, num, opt, Figure, Ids, Section, Table};
use crate::svg::{color, fmt_bytes, Axis, Dash, Plot, Scale};

/// The GPU section, when there are sweep records.
pub fn section(
    records: &[ReplayRecord],
    streams: &[GpuStreamRecord],
    ids: &mut Ids,
) -> Option<Section> {
    // (device, pattern) -> sweep steps
    let mut sweeps: BTreeMap<(String, String), Vec<&ReplayRecord>> = BTreeMap::new();
    for r in records {
        let (Some(d), Some(g)) = (&r.device, &r.gpu) else {
            continue;
        };
        if g.sweep.is_some() {
            sweeps
                .entry((d.name.clone(), r.name.clone()))
                .or_default()
                .push(r);
        }
    }
    if sweeps.is_empty() {
        return None;
    }
    let mut devices: Vec<String> = sweeps.keys().map(|k| k.0.clone()).collect();
    devices.dedup();
    let figures = devices
        .iter()
        .map(|dev| {
            let sel: Vec<(&String, &Vec<&ReplayRecord>)> = sweeps
                .iter()
                .filter(|(k, _)| &k.0 == dev)
                .map(|(k, v)| (&k.1, v))
                .collect();
            let stream = streams
                .iter()
                .find(|s| &s.device.name == dev)
                .map(|s| s.copy_mbs)
                .or_else(|| {
                    sel.iter()
                        .flat_map(|(_, v)| v.iter())
                        .find_map(|r| r.stream_copy_mbs)
                });
            figure(dev, &sel, stream, ids)
        })
        .collect();
    Some(Section {
        id: ids.make("gpu"),
        title: "GPU throughput".into(),
        intro: "Each pattern was truncated and run with its count multiplied by 1, 2, 4, ... 512; the plateau is the first step from which every step reaches 90% of the sweep's best bandwidth.".into(),
        figures,
        tables: Vec::new(),
    })
}

fn figure(
    dev: &str,
    sel: &[(&String, &Vec<&ReplayRecord>)],
    stream: Option<f64>,
    ids: &mut Ids,
) -> Figure {
    let xs = sel
        .iter()
        .flat_map(|(_, v)| v.iter().map(|r| r.bytes as f64));
    let ys = sel
        .iter()
        .flat_map(|(_, v)| v.iter().map(|r| r.bandwidth_mbs))
        .chain(stream);
    let id = ids.make(&format!("gpu-sweep-{dev}"));
    let mut p = Plot::new(
        &id,
        640.0,
        380.0,
        64.0,
        Axis::new(Scale::log2_over(xs), "bytes moved per run (log2 scale)").with_format(fmt_bytes),
        Axis::new(Scale::log_over(ys), "bandwidth (GB/s, log)").with_format(gbs),
    );
    let mut table = Table::new(&[
        "pattern",
        "kernel",
        "function",
        "count",
        "factor",
        "bytes",
        "bandwidth_mbs",
        "plateau_count",
        "device_stream_copy_mbs",
    ]);
    for (j, (name, steps)) in sel.iter().enumerate() {
        let mut steps = (*steps).clone();
        steps.sort_by_key(|r| r.bytes);
        let c = color(j);
        let pts: Vec<(f64, f64)> = steps
            .iter()
            .map(|r| (r.bytes as f64, r.bandwidth_mbs))
            .collect();
        p.line(
            &pts,
            c,
            Dash::Solid,
            &format!("{name}: bandwidth against bytes moved"),
        );
        let plateau = steps
            .iter()
            .find_map(|r| r.gpu.as_ref()?.sweep.as_ref()?.plateau_count);
        for r in &steps {
            let sw = r.gpu.as_ref().and_then(|g| g.sweep.as_ref());
            let at_plateau = plateau == Some(r.count);
            p.point(
                r.bytes as f64,
                r.bandwidth_mbs,
                if at_plateau { 6.0 } else { 2.5 },
                c,
                &format!(
                    "{name}: count {} ({} bytes): {:.1} MB/s{}",
                    r.count,
                    r.bytes,
                    r.bandwidth_mbs,
                    if at_plateau {
                        " — plateau reached here"
                    } else {
                        ""
                    }
                ),
            );
            table.push(vec![
                (*name).clone(),
                r.kernel.as_str().into(),
                r.gpu
                    .as_ref()
                    .map(|g| g.function.clone())
                    .unwrap_or_default(),
                r.count.to_string(),
                sw.map(|s| s.factor.to_string()).unwrap_or_default(),
                r.bytes.to_string(),
                num(r.bandwidth_mbs),
                plateau.map(|c| c.to_string()).unwrap_or_default(),
                opt(stream),
            ]);
        }
        if sel.len() <= 8 {
            p.legend(name, c, Dash::Solid, false);
        }
    }
    if let Some(s) = stream {
        p.hreference(
            s,
            color(7),
            Dash::Dashed,
            &format!("device STREAM copy: {s:.1} MB/s"),
            Some("device STREAM"),
        );
    }
    Figure {
        id,
        title: format!("GPU throughput sweep on {dev}"),
        caption: "Bandwidth of each sweep step against the bytes it moved; the larger point of each line is where it plateaus. Dashed: the device's STREAM copy (BabelStream).".into(),
        svg: p.finish(),
        table,
        notes: Vec::new(),
    }
}
