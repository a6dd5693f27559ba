//! The figure set of a report from three machines, two MPI sweeps, a GPU sweep, a real
//! pattern and an analysis; every SVG parsed and checked.

use crate::common::{full_report, svgs};

#[test]
fn every_figure_family_is_drawn() {
    let r = full_report();
    let ids: Vec<&str> = r.figures.iter().map(|f| f.id.as_str()).collect();
    let has = |prefix: &str, n: usize| {
        let got = ids.iter().filter(|i| i.starts_with(prefix)).count();
        assert_eq!(got, n, "{prefix}: {got} figures in {ids:?}");
    };
    // Several machines.
    has("bandwidth-bandwidth", 1);
    has("pairwise-", 2);
    // One machine, three times.
    for m in ["vm", "hbm-node", "ddr-node"] {
        assert!(ids.contains(&format!("bandwidth-{m}").as_str()), "{ids:?}");
        assert!(ids.contains(&format!("pct-stream-{m}").as_str()), "{ids:?}");
        assert!(
            ids.contains(&format!("stride-gather-{m}").as_str()),
            "{ids:?}"
        );
        assert!(
            ids.contains(&format!("stride-scatter-{m}").as_str()),
            "{ids:?}"
        );
    }
    // MPI: weak and strong, total and per rank.
    for f in [
        "mpi-weak-total",
        "mpi-weak-per-rank",
        "mpi-strong-total",
        "mpi-strong-per-rank",
    ] {
        assert!(ids.contains(&f), "{f} missing: {ids:?}");
    }
    has("gpu-sweep-", 1);
    // The mined pattern and the analysis.
    has("offsets-", 1);
    has("deltas-", 1);
    has("delta-histogram-", 1);
    has("reuse-histogram-", 1);
    has("reuse-cdf-words-", 1);
    has("reuse-cdf-lines-", 1);
    has("strides-", 1);
    has("footprint-", 1);
    has("apex-", 1);
    // RDX: time and stack histograms, in words and in lines, each against exact.
    has("rdx-time-words-", 1);
    has("rdx-time-lines-", 1);
    has("rdx-stack-words-", 1);
    has("rdx-stack-lines-", 1);
    assert!(r.figures.iter().all(|f| f.marks > 0), "{:?}", r.figures);
}

#[test]
fn every_svg_is_well_formed_and_counts_its_marks() {
    let r = full_report();
    let all = svgs(&r.html);
    assert_eq!(all.len(), r.figures.len());
    for text in all {
        for bad in ["NaN", "inf", "http", "<script"] {
            assert!(!text.contains(bad), "{bad} in {}", &text[..200]);
        }
        let doc =
            roxmltree::Document::parse(text).unwrap_or_else(|e| panic!("{e}: {}", &text[..300]));
        let svg = doc.root_element();
        let id = svg.attribute("data-fig").expect("data-fig");
        let n: usize = svg.attribute("data-n").expect("data-n").parse().unwrap();
        let marks: Vec<_> = svg
            .descendants()
            .filter(|d| d.attribute("class") == Some("mark"))
            .collect();
        assert_eq!(marks.len(), n, "{id}");
        assert!(n > 0, "{id} draws nothing");
        // Every mark has a tooltip.
        for m in &marks {
            assert!(
                m.children()
                    .any(|c| c.has_tag_name("title") && !c.text().unwrap_or("").trim().is_empty()),
                "{id}: a mark without a <title>"
            );
        }
        // Axis labels: at least one, none empty.
        let labels: Vec<&str> = svg
            .descendants()
            .filter(|d| d.attribute("class") == Some("axis-label"))
            .map(|d| d.text().unwrap_or(""))
            .collect();
        assert!(
            !labels.is_empty() && labels.iter().all(|l| !l.trim().is_empty()),
            "{id}: {labels:?}"
        );
        // Marks lie inside the frame (the first rect): values outside an axis' range, or not
        // positive on a log axis, would have been clamped or skipped.
        let frame = svg
            .children()
            .find(|c| c.has_tag_name("rect"))
            .expect("frame");
        let f = |k: &str| frame.attribute(k).unwrap().parse::<f64>().unwrap();
        let (x0, y0, x1, y1) = (f("x"), f("y"), f("x") + f("width"), f("y") + f("height"));
        for c in svg
            .descendants()
            .filter(|d| d.has_tag_name("circle") && d.attribute("class") == Some("mark"))
        {
            let cx: f64 = c.attribute("cx").unwrap().parse().unwrap();
            let cy: f64 = c.attribute("cy").unwrap().parse().unwrap();
            assert!(
                cx >= x0 - 0.5 && cx <= x1 + 0.5 && cy >= y0 - 0.5 && cy <= y1 + 0.5,
                "{id}: point {cx},{cy} outside the frame"
            );
        }
    }
}

#[test]
fn log_axes_draw_only_positive_values() {
    use mgbench_report::svg::{Axis, Plot, Scale};
    let mut p = Plot::new(
        "t",
        400.0,
        300.0,
        60.0,
        Axis::new(Scale::log_over([0.0, -3.0, 10.0, 1000.0]), "x"),
        Axis::new(Scale::log_over([1.0, 100.0]), "y"),
    );
    assert_eq!(p.x.scale.range(), (10.0, 1000.0));
    p.point(0.0, 10.0, 2.0, "#000", "zero");
    p.point(-3.0, 10.0, 2.0, "#000", "negative");
    p.point(100.0, 10.0, 2.0, "#000", "fine");
    let svg = p.finish();
    assert_eq!((svg.marks, svg.skipped), (1, 2));
}

#[test]
fn the_page_is_self_contained_and_has_its_header() {
    let r = full_report();
    let h = &r.html;
    assert!(h.starts_with("<!DOCTYPE html>"));
    for bad in [
        "http://", "https://", "<script", "<link", "<img", "src=", "@import", "url(",
    ] {
        assert!(!h.contains(bad), "{bad} in the page");
    }
    // Header: version, command line, inputs with their sha256, hosts, contents.
    assert!(h.contains(env!("CARGO_PKG_VERSION")));
    assert!(h.contains("mgbench report tests/data"));
    for f in [
        "machine-a-replay.json",
        "mpi-sweep-weak.csv",
        "spmv-analysis.json",
        "spmv-patterns.json",
    ] {
        let at = h.find(f).unwrap_or_else(|| panic!("{f} not listed"));
        // The sha256 of the file follows in its row.
        let bytes = std::fs::read(crate::common::fixture(f)).unwrap();
        use sha2::Digest;
        let want: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(h[at..].contains(&want), "{f}: sha256 {want} missing");
    }
    for host in ["vm", "hbm-node", "ddr-node"] {
        assert!(h.contains(&format!("{host} (")), "{host}");
    }
    assert!(h.contains("<nav><h2>Contents</h2>"));
    // Every figure is in the contents and followed by its numbers.
    for f in &r.figures {
        assert!(h.contains(&format!("href=\"#fig-{}\"", f.id)), "{}", f.id);
    }
    assert_eq!(
        h.matches("<details><summary>Numbers").count(),
        r.figures.len()
    );
}

#[test]
fn figure_tables_hold_the_csv_values() {
    // The per-machine table repeats bandwidth_mbs exactly as the results hold it.
    let recs: Vec<mgbench_replay::record::ReplayRecord> = serde_json::from_slice(
        &std::fs::read(crate::common::fixture("machine-a-replay.json")).unwrap(),
    )
    .unwrap();
    let h = full_report().html;
    for r in &recs {
        assert!(
            h.contains(&format!(">{}<", r.bandwidth_mbs)),
            "{} {}",
            r.name,
            r.bandwidth_mbs
        );
    }
}
