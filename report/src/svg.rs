//! A small SVG plotting module: linear, log (base 10 and 2) and symmetric-log scales with nice
//! ticks, axes with labels, a legend, and data marks that each carry a `<title>` tooltip.
//!
//! Every figure is one `<svg>` with `data-fig` (its id) and `data-n` (the number of data
//! marks, elements of class `mark`), so tests can count what was drawn. Reference lines
//! (STREAM, diagonals, ideal scaling) are drawn with class `ref` and are not data marks.
//! Values that are not finite, or not positive on a log axis, are never drawn: the caller
//! gets them back as skipped and says so in the figure's notes.

use std::fmt::Write;

/// A categorical palette (Okabe and Ito's, readable by colour-blind viewers).
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
];

/// The palette colour for series `i`.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// How values map onto an axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    Linear {
        min: f64,
        max: f64,
    },
    /// Base-10 logarithm; min > 0.
    Log {
        min: f64,
        max: f64,
    },
    /// Base-2 logarithm (sizes, counts, ranks); min > 0.
    Log2 {
        min: f64,
        max: f64,
    },
    /// Linear within (-c, c), logarithmic beyond: deltas that may be negative or 0.
    SymLog {
        min: f64,
        max: f64,
        c: f64,
    },
}

fn symlog(v: f64, c: f64) -> f64 {
    v.signum() * (1.0 + v.abs() / c).log10()
}

impl Scale {
    /// A linear scale over the data with 5% padding (and 0 included when `with_zero`).
    pub fn linear_over(values: impl IntoIterator<Item = f64>, with_zero: bool) -> Scale {
        let (mut lo, mut hi) = bounds(values);
        if with_zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if !(lo.is_finite() && hi.is_finite()) {
            (lo, hi) = (0.0, 1.0);
        }
        if hi <= lo {
            hi = lo + 1.0;
        }
        let pad = (hi - lo) * 0.05;
        Scale::Linear {
            min: if with_zero && lo >= 0.0 { lo } else { lo - pad },
            max: hi + pad,
        }
    }

    /// A log scale over the positive data, from the decade below to the decade above.
    pub fn log_over(values: impl IntoIterator<Item = f64>) -> Scale {
        let (lo, hi) = bounds(values.into_iter().filter(|v| *v > 0.0));
        if !(lo.is_finite() && hi.is_finite()) {
            return Scale::Log {
                min: 1.0,
                max: 10.0,
            };
        }
        Scale::Log {
            min: 10f64.powf((lo.log10() + 1e-9).floor()),
            max: 10f64
                .powf((hi.log10() - 1e-9).ceil())
                .max(10f64.powf(lo.log10().floor() + 1.0)),
        }
    }

    /// A base-2 log scale over the positive data, from the power of two below to the one above.
    pub fn log2_over(values: impl IntoIterator<Item = f64>) -> Scale {
        let (lo, hi) = bounds(values.into_iter().filter(|v| *v > 0.0));
        if !(lo.is_finite() && hi.is_finite()) {
            return Scale::Log2 { min: 1.0, max: 2.0 };
        }
        let (a, b) = ((lo.log2() + 1e-9).floor(), (hi.log2() - 1e-9).ceil());
        Scale::Log2 {
            min: 2f64.powf(a),
            max: 2f64.powf(b.max(a + 1.0)),
        }
    }

    /// A symmetric log scale over the data (linear within +-1).
    pub fn symlog_over(values: impl IntoIterator<Item = f64>) -> Scale {
        let (lo, hi) = bounds(values);
        let (lo, hi) = if lo.is_finite() && hi.is_finite() {
            (lo.min(0.0), hi.max(0.0))
        } else {
            (-1.0, 1.0)
        };
        let ext = |v: f64| {
            if v == 0.0 {
                0.0
            } else {
                v.signum() * 10f64.powf(v.abs().log10().ceil().max(0.0))
            }
        };
        let (min, max) = (ext(lo), ext(hi));
        Scale::SymLog {
            min: if min == max { -1.0 } else { min },
            max: if min == max { 1.0 } else { max },
            c: 1.0,
        }
    }

    pub fn is_log(&self) -> bool {
        matches!(self, Scale::Log { .. } | Scale::Log2 { .. })
    }

    /// Whether `v` can be drawn on this scale.
    pub fn accepts(&self, v: f64) -> bool {
        v.is_finite() && (!self.is_log() || v > 0.0)
    }

    /// `v` mapped to [0, 1] over the scale's range (outside for values out of range).
    pub fn unit(&self, v: f64) -> f64 {
        match *self {
            Scale::Linear { min, max } => (v - min) / (max - min),
            Scale::Log { min, max } => (v.log10() - min.log10()) / (max.log10() - min.log10()),
            Scale::Log2 { min, max } => (v.log2() - min.log2()) / (max.log2() - min.log2()),
            Scale::SymLog { min, max, c } => {
                (symlog(v, c) - symlog(min, c)) / (symlog(max, c) - symlog(min, c))
            }
        }
    }

    pub fn range(&self) -> (f64, f64) {
        match *self {
            Scale::Linear { min, max }
            | Scale::Log { min, max }
            | Scale::Log2 { min, max }
            | Scale::SymLog { min, max, .. } => (min, max),
        }
    }

    /// Tick positions: 1-2-5 steps (linear), decades (log; with 2 and 5 between when the
    /// range spans at most two decades), powers of two (log2, every other one when crowded),
    /// 0 and signed decades (symlog).
    pub fn ticks(&self) -> Vec<f64> {
        match *self {
            Scale::Linear { min, max } => {
                let step = nice_step((max - min) / 6.0);
                // Ticks are k x step computed as (k x mantissa) scaled by a power of ten,
                // dividing for negative exponents, so 3 x 0.2 prints as 0.6.
                let e = step.log10().floor() as i32;
                let m = (step / 10f64.powi(e)).round();
                let at = |k: f64| {
                    if e < 0 {
                        k * m / 10f64.powi(-e)
                    } else {
                        k * m * 10f64.powi(e)
                    }
                };
                let k0 = (min / step).ceil();
                let mut out = Vec::new();
                let mut k = k0;
                while at(k) <= max + step * 1e-9 && out.len() < 50 {
                    let v = at(k);
                    out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
                    k += 1.0;
                }
                out
            }
            Scale::Log { min, max } => {
                let (a, b) = (min.log10().round() as i32, max.log10().round() as i32);
                let dense = b - a <= 2;
                let mut out = Vec::new();
                for e in a..=b {
                    let d = 10f64.powi(e);
                    out.push(d);
                    if dense && e < b {
                        out.push(2.0 * d);
                        out.push(5.0 * d);
                    }
                }
                out
            }
            Scale::Log2 { min, max } => {
                let (a, b) = (min.log2().round() as i32, max.log2().round() as i32);
                let every = ((b - a) / 10 + 1).max(1);
                (a..=b)
                    .filter(|e| (e - a) % every == 0)
                    .map(|e| 2f64.powi(e))
                    .collect()
            }
            Scale::SymLog { min, max, .. } => {
                let mut out = vec![0.0];
                let mut d = 1.0;
                while d <= max.abs().max(min.abs()) * 1.0001 {
                    if d <= max * 1.0001 {
                        out.push(d);
                    }
                    if -d >= min * 1.0001 {
                        out.push(-d);
                    }
                    d *= 10.0;
                }
                let n = out.len();
                if n > 12 {
                    // Keep 0 and every other decade.
                    let keep: Vec<f64> = out
                        .iter()
                        .copied()
                        .filter(|v| *v == 0.0 || (v.abs().log10().round() as i64) % 2 == 0)
                        .collect();
                    return keep;
                }
                out.sort_by(f64::total_cmp);
                out
            }
        }
    }
}

fn bounds(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        })
}

fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let f = raw / p;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * p
}

/// A number for a tick label: integers without decimals, large and small values compact.
pub fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if (1e-3..1e6).contains(&a) {
        let s = if a >= 100.0 || v.fract() == 0.0 {
            format!("{v:.0}")
        } else if a >= 1.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.3}")
        };
        trim_zeros(&s)
    } else {
        let e = a.log10().floor();
        let m = v / 10f64.powf(e);
        if (m.abs() - 1.0).abs() < 1e-9 {
            format!("{}1e{}", if v < 0.0 { "-" } else { "" }, e as i64)
        } else {
            format!("{}e{}", trim_zeros(&format!("{m:.1}")), e as i64)
        }
    }
}

fn trim_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

/// A count with a binary suffix when it is a multiple of 1024 (1K, 64K, 2M): compact labels
/// for log2 axes of distances and sizes in words or lines.
pub fn fmt_count(v: f64) -> String {
    let a = v.abs();
    if a >= 1024.0 * 1024.0 * 1024.0 && (a / 1073741824.0).fract() == 0.0 {
        format!("{}G", v / 1073741824.0)
    } else if a >= 1024.0 * 1024.0 && (a / 1048576.0).fract() == 0.0 {
        format!("{}M", v / 1048576.0)
    } else if a >= 1024.0 && (a / 1024.0).fract() == 0.0 {
        format!("{}K", v / 1024.0)
    } else {
        fmt_num(v)
    }
}

/// Bytes with a binary unit, for tick labels of size axes.
pub fn fmt_bytes(v: f64) -> String {
    const U: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = v;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < U.len() {
        x /= 1024.0;
        i += 1;
    }
    format!("{}{}", trim_zeros(&format!("{x:.1}")), U[i])
}

/// Escapes text for XML content and attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => o.push(c),
        }
    }
    o
}

/// One axis: its scale, label and tick formatter.
pub struct Axis {
    pub scale: Scale,
    pub label: String,
    pub format: fn(f64) -> String,
}

impl Axis {
    pub fn new(scale: Scale, label: &str) -> Axis {
        Axis {
            scale,
            label: label.to_string(),
            format: fmt_num,
        }
    }

    pub fn with_format(mut self, format: fn(f64) -> String) -> Axis {
        self.format = format;
        self
    }
}

/// Line style of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dash {
    Solid,
    Dashed,
    Dotted,
}

impl Dash {
    fn attr(self) -> &'static str {
        match self {
            Dash::Solid => "",
            Dash::Dashed => " stroke-dasharray=\"6 4\"",
            Dash::Dotted => " stroke-dasharray=\"2 3\"",
        }
    }
}

/// A plot being drawn: a frame with two axes; marks are added in data coordinates.
pub struct Plot {
    id: String,
    width: f64,
    height: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    pub x: Axis,
    pub y: Axis,
    body: String,
    refs: String,
    /// Reference lines' labels (x, y, anchor, color, text), placed when the legend's box is
    /// known (see `finish`).
    ref_labels: Vec<(f64, f64, &'static str, String, String)>,
    n: usize,
    skipped: usize,
    legend: Vec<(String, &'static str, Dash, bool)>,
    /// Where data marks were drawn, in pixels: the legend goes to the place that hides the
    /// fewest of them.
    ink: Vec<Ink>,
    /// Where labels on the data (rotated free text) were drawn: the legend hides none.
    label_ink: Vec<Ink>,
    /// Category labels drawn instead of y ticks (horizontal bar charts), with their y values.
    y_categories: Vec<(f64, String)>,
    /// Tick labels of their own at these x values (binned x axes), instead of the format's.
    x_labels: Vec<(f64, String)>,
    x_ticks_at: Option<Vec<f64>>,
}

/// A finished figure: its SVG and the number of data marks in it.
pub struct Svg {
    pub text: String,
    pub marks: usize,
    /// Values that could not be drawn (not finite, or not positive on a log axis).
    pub skipped: usize,
}

impl Plot {
    /// A plot of `width` x `height` pixels; `left` is the room for y labels.
    pub fn new(id: &str, width: f64, height: f64, left: f64, x: Axis, y: Axis) -> Plot {
        Plot {
            id: id.to_string(),
            width,
            height,
            left,
            right: 20.0,
            top: 16.0,
            bottom: 48.0,
            x,
            y,
            body: String::new(),
            refs: String::new(),
            ref_labels: Vec::new(),
            n: 0,
            skipped: 0,
            legend: Vec::new(),
            ink: Vec::new(),
            label_ink: Vec::new(),
            y_categories: Vec::new(),
            x_labels: Vec::new(),
            x_ticks_at: None,
        }
    }

    /// Room on the right (for labels drawn at the end of lines).
    pub fn right_margin(mut self, px: f64) -> Plot {
        self.right = px;
        self
    }

    /// Draws the x ticks at these values instead of the scale's.
    pub fn x_ticks(mut self, at: Vec<f64>) -> Plot {
        self.x_ticks_at = Some(at);
        self
    }

    fn plot_w(&self) -> f64 {
        self.width - self.left - self.right
    }

    fn plot_h(&self) -> f64 {
        self.height - self.top - self.bottom
    }

    /// Pixel x of a data value (clamped a little outside the frame).
    pub fn px(&self, v: f64) -> f64 {
        self.left + self.x.scale.unit(v).clamp(-0.02, 1.02) * self.plot_w()
    }

    /// Pixel y of a data value.
    pub fn py(&self, v: f64) -> f64 {
        self.top + (1.0 - self.y.scale.unit(v).clamp(-0.02, 1.02)) * self.plot_h()
    }

    fn ok(&mut self, x: f64, y: f64) -> bool {
        let ok = self.x.scale.accepts(x) && self.y.scale.accepts(y);
        if !ok {
            self.skipped += 1;
        }
        ok
    }

    /// A legend entry (a line or a filled box).
    pub fn legend(&mut self, label: &str, color: &'static str, dash: Dash, filled: bool) {
        self.legend.push((label.to_string(), color, dash, filled));
    }

    /// Category labels for a horizontal bar chart: drawn at these y values, left of the frame.
    pub fn categories(&mut self, cats: Vec<(f64, String)>) {
        self.y_categories = cats;
    }

    /// Labels of x ticks (bins): drawn at these x values, below the frame.
    pub fn x_labels(&mut self, labels: Vec<(f64, String)>) {
        self.x_ticks_at = Some(labels.iter().map(|l| l.0).collect());
        self.x_labels = labels;
    }

    /// A data point.
    pub fn point(&mut self, x: f64, y: f64, r: f64, color: &str, title: &str) {
        if !self.ok(x, y) {
            return;
        }
        let (cx, cy) = (self.px(x), self.py(y));
        self.ink.push(Ink::Box(cx - r, cy - r, cx + r, cy + r));
        let _ = write!(
            self.body,
            "<circle class=\"mark\" cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"{r}\" fill=\"{color}\"><title>{}</title></circle>",
            esc(title)
        );
        self.n += 1;
    }

    /// A polyline through points (one mark); points that cannot be drawn break nothing but
    /// are left out.
    pub fn line(&mut self, pts: &[(f64, f64)], color: &str, dash: Dash, title: &str) {
        let mut d = String::new();
        let mut last: Option<(f64, f64)> = None;
        for &(x, y) in pts {
            if !self.ok(x, y) {
                continue;
            }
            let (px, py) = (self.px(x), self.py(y));
            self.ink
                .push(Ink::Segment(last.unwrap_or((px, py)), (px, py)));
            last = Some((px, py));
            let _ = write!(d, "{px:.1},{py:.1} ");
        }
        if d.is_empty() {
            return;
        }
        let _ = write!(
            self.body,
            "<polyline class=\"mark\" points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.8\"{}><title>{}</title></polyline>",
            d.trim_end(),
            dash.attr(),
            esc(title)
        );
        self.n += 1;
    }

    /// A rectangle between data corners (a bar); one mark.
    pub fn rect(&mut self, x0: f64, y0: f64, x1: f64, y1: f64, color: &str, title: &str) {
        if !(self.ok(x0, y0) && self.ok(x1, y1)) {
            return;
        }
        let (a, b) = (self.px(x0), self.px(x1));
        let (c, d) = (self.py(y0), self.py(y1));
        self.ink
            .push(Ink::Box(a.min(b), c.min(d), a.max(b), c.max(d)));
        let _ = write!(
            self.body,
            "<rect class=\"mark\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\" fill-opacity=\"0.85\"><title>{}</title></rect>",
            a.min(b),
            c.min(d),
            (a - b).abs().max(0.5),
            (c - d).abs().max(0.5),
            esc(title)
        );
        self.n += 1;
    }

    /// A horizontal bar at category position `y` (height `h` in data units) from x0 to x1,
    /// with optional whiskers from lo to hi; one mark.
    #[allow(clippy::too_many_arguments)]
    pub fn hbar(
        &mut self,
        y: f64,
        h: f64,
        x0: f64,
        x1: f64,
        whiskers: Option<(f64, f64)>,
        color: &str,
        title: &str,
    ) {
        if !(self.ok(x0, y) && self.ok(x1, y)) {
            return;
        }
        let (a, b) = (self.px(x0), self.px(x1));
        let (c, d) = (self.py(y - h / 2.0), self.py(y + h / 2.0));
        self.ink
            .push(Ink::Box(a.min(b), c.min(d), a.max(b), c.max(d)));
        let mut g = format!(
            "<g class=\"mark\"><title>{}</title><rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\" fill-opacity=\"0.85\"/>",
            esc(title),
            a.min(b),
            c.min(d),
            (a - b).abs().max(0.5),
            (c - d).abs().max(0.5)
        );
        if let Some((lo, hi)) = whiskers {
            if self.x.scale.accepts(lo) && self.x.scale.accepts(hi) {
                let (l, r) = (self.px(lo), self.px(hi));
                let cy = self.py(y);
                let t = (c - d).abs() * 0.3;
                let _ = write!(
                    g,
                    "<path d=\"M{l:.1},{cy:.1}H{r:.1}M{l:.1},{:.1}V{:.1}M{r:.1},{:.1}V{:.1}\" stroke=\"#333\" stroke-width=\"1\" fill=\"none\"/>",
                    cy - t,
                    cy + t,
                    cy - t,
                    cy + t
                );
            }
        }
        g.push_str("</g>");
        self.body.push_str(&g);
        self.n += 1;
    }

    /// A vertical segment from (x, y0) to (x, y1) (a min-max column of a downsampled series);
    /// one mark.
    pub fn vsegment(&mut self, x: f64, y0: f64, y1: f64, color: &str, title: &str) {
        if !(self.ok(x, y0) && self.ok(x, y1)) {
            return;
        }
        let (px, a, b) = (self.px(x), self.py(y0), self.py(y1));
        let (a, b) = if (a - b).abs() < 1.0 {
            (a + 0.5, b - 0.5)
        } else {
            (a, b)
        };
        self.ink.push(Ink::Segment((px, a), (px, b)));
        let _ = write!(
            self.body,
            "<line class=\"mark\" x1=\"{px:.1}\" y1=\"{a:.1}\" x2=\"{px:.1}\" y2=\"{b:.1}\" stroke=\"{color}\" stroke-width=\"1.2\"><title>{}</title></line>",
            esc(title)
        );
        self.n += 1;
    }

    /// A horizontal reference line at `y` across the whole x range (see [`Plot::reference`]).
    pub fn hreference(
        &mut self,
        y: f64,
        color: &str,
        dash: Dash,
        title: &str,
        label: Option<&str>,
    ) {
        let (a, b) = self.x.scale.range();
        self.reference((a, y), (b, y), color, dash, title, label);
    }

    /// A reference line through two data points (not a data mark), with an optional label
    /// at its end.
    pub fn reference(
        &mut self,
        from: (f64, f64),
        to: (f64, f64),
        color: &str,
        dash: Dash,
        title: &str,
        label: Option<&str>,
    ) {
        let ok = |s: &Scale, v: f64| s.accepts(v);
        if !(ok(&self.x.scale, from.0)
            && ok(&self.x.scale, to.0)
            && ok(&self.y.scale, from.1)
            && ok(&self.y.scale, to.1))
        {
            return;
        }
        let (x1, y1, x2, y2) = (
            self.px(from.0),
            self.py(from.1),
            self.px(to.0),
            self.py(to.1),
        );
        let _ = write!(
            self.refs,
            "<line class=\"ref\" x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{color}\" stroke-width=\"1.2\"{}><title>{}</title></line>",
            dash.attr(),
            esc(title)
        );
        if let Some(l) = label {
            // Labels stay inside the frame: a horizontal line is labelled at its left end
            // (legends sit top-right), other lines at their end point, nudged in.
            let horizontal = (y1 - y2).abs() < 0.5;
            let (ax, ay) = if horizontal {
                (x1.min(x2), y1 - 3.0)
            } else {
                (x2, y2)
            };
            let (tx, anchor) = if horizontal {
                (ax + 4.0, "start")
            } else if ax > self.width - self.right - 40.0 {
                (ax - 2.0, "end")
            } else {
                (ax + 3.0, "start")
            };
            let ty = ay.clamp(self.top + 10.0, self.height - self.bottom - 3.0);
            self.ref_labels
                .push((tx, ty, anchor, color.to_string(), l.to_string()));
        }
    }

    /// A small reference dot (not a data mark): grid points behind a fitted value.
    pub fn ref_point(&mut self, x: f64, y: f64, color: &str, title: &str) {
        if !(self.x.scale.accepts(x) && self.y.scale.accepts(y)) {
            return;
        }
        let _ = write!(
            self.refs,
            "<circle class=\"ref\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"1.8\" fill=\"{color}\"><title>{}</title></circle>",
            self.px(x),
            self.py(y),
            esc(title)
        );
    }

    /// Free text at a data position (labels on a diagonal, plateau notes), kept in the frame.
    pub fn text(&mut self, x: f64, y: f64, s: &str, color: &str, rotate: f64) {
        if !(self.x.scale.accepts(x) && self.y.scale.accepts(y)) {
            return;
        }
        let tx = self
            .px(x)
            .clamp(self.left + 2.0, self.width - self.right - 2.0);
        let ty = self
            .py(y)
            .clamp(self.top + 10.0, self.height - self.bottom - 2.0);
        let anchor = if tx > self.width - self.right - 80.0 {
            "end"
        } else {
            "start"
        };
        if rotate == 0.0 {
            // Placed with the legend known, as reference labels are.
            self.ref_labels
                .push((tx, ty, anchor, color.to_string(), s.to_string()));
            return;
        }
        // Its baseline, from its anchor along the angle (the legend must not hide it).
        let len = s.chars().count() as f64 * CHAR_PX * if anchor == "end" { -1.0 } else { 1.0 };
        let (dx, dy) = (rotate.to_radians().cos(), rotate.to_radians().sin());
        // ...and the tops of its letters, a letter's height away across it.
        let (ux, uy) = (9.0 * dy, -9.0 * dx);
        for (ox, oy) in [(0.0, 0.0), (ux, uy)] {
            self.label_ink.push(Ink::Segment(
                (tx + ox, ty + oy),
                (tx + ox + len * dx, ty + oy + len * dy),
            ));
        }
        let rot = format!(" transform=\"rotate({rotate:.1} {tx:.1} {ty:.1})\"");
        let _ = write!(
            self.refs,
            "<text class=\"ref-label\" x=\"{tx:.1}\" y=\"{ty:.1}\" text-anchor=\"{anchor}\" font-size=\"10\" fill=\"{color}\"{rot}>{}</text>",
            esc(s)
        );
    }

    /// The angle in degrees (SVG, clockwise) of the line between two data points.
    pub fn angle(&self, a: (f64, f64), b: (f64, f64)) -> f64 {
        let (dx, dy) = (self.px(b.0) - self.px(a.0), self.py(b.1) - self.py(a.1));
        dy.atan2(dx).to_degrees()
    }

    /// The legend's box (x, y, width, height) and whether it is below the frame: inside the
    /// frame at the place that hides nothing (data marks, labels on the data, reference
    /// labels), top-right first, then the other corners, then the middles of the sides; where
    /// every place hides something, below the frame, under the x axis's label. (A profile's
    /// ten pattern names covered the machines' labels and sent three reference labels to one
    /// spot in the bandwidth-bandwidth figure.)
    fn legend_place(&self) -> (f64, f64, f64, f64, bool) {
        let (l, t) = (self.left, self.top);
        let (pw, ph) = (self.plot_w(), self.plot_h());
        let longest = self
            .legend
            .iter()
            .map(|e| e.0.chars().count())
            .max()
            .unwrap_or(0);
        let lw = (longest as f64 * 6.2 + 34.0).min(pw - 8.0);
        let lh = self.legend.len() as f64 * 15.0 + 6.0;
        let (right, left_x, mid_x) = (l + pw - lw - 4.0, l + 4.0, l + (pw - lw) / 2.0);
        let (top_y, bottom_y, mid_y) = (t + 4.0, t + ph - lh - 4.0, t + (ph - lh) / 2.0);
        let places = [
            (right, top_y),
            (left_x, top_y),
            (right, bottom_y),
            (left_x, bottom_y),
            (right, mid_y),
            (left_x, mid_y),
            (mid_x, top_y),
            (mid_x, bottom_y),
        ];
        if self.legend.is_empty() {
            return (places[0].0, places[0].1, lw, lh, false);
        }
        let refs: Vec<Ink> = self
            .ref_labels
            .iter()
            .map(|(tx, ty, anchor, _, label)| {
                let width = label.chars().count() as f64 * CHAR_PX;
                let x0 = if *anchor == "end" { tx - width } else { *tx };
                Ink::Box(x0, ty - 9.0, x0 + width, ty + 3.0)
            })
            .collect();
        let hidden = |&(x, y): &(f64, f64)| {
            let b = (x - 2.0, y - 2.0, x + lw + 2.0, y + lh + 2.0);
            let labels = self.label_ink.iter().chain(&refs).filter(|i| i.meets(b));
            // A label hidden costs more than a mark: marks are many, a label is read.
            self.ink.iter().filter(|i| i.meets(b)).count() + 8 * labels.count()
        };
        let best = places
            .iter()
            .copied()
            .min_by_key(|c| hidden(c))
            .unwrap_or(places[0]);
        // Small legends stay inside even where they hide a few marks (as they always have);
        // a tall one, or one that would hide a label, goes below.
        let cost = hidden(&best);
        if cost >= 8 || (cost > 0 && self.legend.len() > 4) {
            return (l, self.height + 2.0, lw.max(pw / 2.0).min(pw), lh, true);
        }
        (best.0, best.1, lw, lh, false)
    }

    /// The SVG: frame, grid, ticks, axis labels, reference lines, marks, legend.
    pub fn finish(self) -> Svg {
        let (l, t) = (self.left, self.top);
        let (pw, ph) = (self.plot_w(), self.plot_h());
        let (lx, ly, lw, lh, below) = self.legend_place();
        // A legend below the frame makes the figure that much taller.
        let (w, h) = (
            self.width,
            if below {
                self.height + lh + 6.0
            } else {
                self.height
            },
        );
        let mut s = String::with_capacity(self.body.len() + 4096);
        let _ = write!(
            s,
            "<svg class=\"figure\" data-fig=\"{}\" data-n=\"{}\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" font-family=\"DejaVu Sans, Verdana, sans-serif\">",
            esc(&self.id),
            self.n
        );
        let _ = write!(
            s,
            "<rect x=\"{l}\" y=\"{t}\" width=\"{pw:.1}\" height=\"{ph:.1}\" fill=\"#fff\" stroke=\"#888\"/>"
        );
        // x ticks and grid: every tick gets its grid line; labels too wide for the room
        // between ticks (many bins with long names) are drawn every `step` ticks.
        let xt = self
            .x_ticks_at
            .clone()
            .unwrap_or_else(|| self.x.scale.ticks());
        let (xmin, xmax) = self.x.scale.range();
        let xt: Vec<(f64, String)> = xt
            .into_iter()
            .filter(|&v| {
                v >= xmin.min(xmax) - 1e-12 * v.abs() && v <= xmax.max(xmin) * (1.0 + 1e-9) + 1e-12
            })
            .map(|v| {
                let label = self
                    .x_labels
                    .iter()
                    .find(|l| l.0 == v)
                    .map_or_else(|| (self.x.format)(v), |l| l.1.clone());
                (self.px(v), label)
            })
            .collect();
        let step = label_step(&xt);
        for (i, (x, label)) in xt.iter().enumerate() {
            let _ = write!(
                s,
                "<line class=\"grid\" x1=\"{x:.1}\" y1=\"{t}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#e4e4e4\"/>",
                t + ph,
            );
            if i % step == 0 {
                let _ = write!(
                    s,
                    "<text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
                    t + ph + 16.0,
                    esc(label)
                );
            }
        }
        // y ticks (or categories): a label closer than a line's height to one already drawn
        // is left out, the ticks nearest zero first (a symlog axis's -1, 0 and 1 crowd).
        if self.y_categories.is_empty() {
            let (ymin, ymax) = self.y.scale.range();
            let mut yt: Vec<f64> = self
                .y
                .scale
                .ticks()
                .into_iter()
                .filter(|&v| {
                    v >= ymin.min(ymax) - 1e-12 * v.abs()
                        && v <= ymax.max(ymin) * (1.0 + 1e-9) + 1e-12
                })
                .collect();
            yt.sort_by(|a, b| a.abs().total_cmp(&b.abs()));
            let mut drawn: Vec<f64> = Vec::new();
            for v in yt {
                let y = self.py(v);
                let _ = write!(
                    s,
                    "<line class=\"grid\" x1=\"{l}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>",
                    l + pw,
                );
                if drawn.iter().any(|&d| (d - y).abs() < LINE_PX) {
                    continue;
                }
                drawn.push(y);
                let _ = write!(
                    s,
                    "<text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"10\">{}</text>",
                    l - 4.0,
                    y + 3.5,
                    esc(&(self.y.format)(v))
                );
            }
        } else {
            let max_chars = ((l - 8.0) / 6.0).max(4.0) as usize;
            for (v, label) in &self.y_categories {
                let y = self.py(*v);
                let _ = write!(
                    s,
                    "<text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"10\">{}</text>",
                    l - 4.0,
                    y + 3.5,
                    esc(&shorten_middle(label, max_chars))
                );
            }
        }
        // axis labels, shortened to fit their side of the frame (about 7 px per character)
        let _ = write!(
            s,
            "<text class=\"axis-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12\">{}</text>",
            l + pw / 2.0,
            self.height - 10.0,
            esc(&shorten(&self.x.label, (pw / 7.2) as usize))
        );
        if self.y_categories.is_empty() {
            let _ = write!(
                s,
                "<text class=\"axis-label\" x=\"12\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 12 {:.1})\">{}</text>",
                t + ph / 2.0,
                t + ph / 2.0,
                esc(&shorten(&self.y.label, (ph / 7.2) as usize))
            );
        }
        s.push_str(&self.refs);
        s.push_str(&self.body);
        // Reference labels over the data marks, on a white halo (the legend's place hides none:
        // see `legend_place`).
        for (tx, ty, anchor, color, label) in &self.ref_labels {
            let _ = write!(
                s,
                "<text class=\"ref-label\" x=\"{tx:.1}\" y=\"{ty:.1}\" text-anchor=\"{anchor}\" font-size=\"10\" fill=\"{color}\" stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\">{}</text>",
                esc(label)
            );
        }
        // legend: on a white box
        if !self.legend.is_empty() {
            let _ = write!(
                s,
                "<g class=\"legend\"><rect x=\"{lx:.1}\" y=\"{ly:.1}\" width=\"{lw:.1}\" height=\"{lh:.1}\" fill=\"#fff\" fill-opacity=\"0.9\" stroke=\"#ccc\"/>"
            );
            let max_chars = ((lw - 30.0) / 6.2).max(4.0) as usize;
            for (i, (label, color, dash, filled)) in self.legend.iter().enumerate() {
                let y = ly + 12.0 + i as f64 * 15.0;
                if *filled {
                    let _ = write!(
                        s,
                        "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"14\" height=\"9\" fill=\"{color}\"/>",
                        lx + 6.0,
                        y - 8.0
                    );
                } else {
                    let _ = write!(
                        s,
                        "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"2\"{}/>",
                        lx + 5.0,
                        y - 4.0,
                        lx + 21.0,
                        y - 4.0,
                        dash.attr()
                    );
                }
                let _ = write!(
                    s,
                    "<text x=\"{:.1}\" y=\"{y:.1}\" font-size=\"10\">{}</text>",
                    lx + 25.0,
                    esc(&shorten_middle(label, max_chars))
                );
            }
            s.push_str("</g>");
        }
        s.push_str("</svg>");
        Svg {
            text: s,
            marks: self.n,
            skipped: self.skipped,
        }
    }
}

/// `s` cut to `max` characters with an ellipsis.
/// Height of a 10 px tick label with room around it.
const LINE_PX: f64 = 11.0;
/// Width of a character of a 10 px tick label (DejaVu Sans: digits 6.4 px, most letters less).
const CHAR_PX: f64 = 6.4;

/// Draw every `step`-th of these x tick labels (pixel x, text), so that neighbours drawn never
/// touch: 1 when they all fit.
fn label_step(ticks: &[(f64, String)]) -> usize {
    let widest = ticks
        .iter()
        .map(|(_, l)| l.chars().count() as f64 * CHAR_PX)
        .fold(0.0, f64::max);
    let closest = ticks
        .windows(2)
        .map(|w| (w[1].0 - w[0].0).abs())
        .fold(f64::INFINITY, f64::min);
    if !closest.is_finite() || closest <= 0.0 {
        return 1;
    }
    ((widest + 4.0) / closest).ceil().max(1.0) as usize
}

/// A name cut in its middle to `max` characters, its end kept: ten GROMACS patterns'
/// bars all read `nbnxm_kernel_ElecRF_VdwLJComb…`, where their ends (`-gather-2`,
/// `-scatter-3`) tell them apart.
pub fn shorten_middle(s: &str, max: usize) -> String {
    mgbench_replay::export::cut_middle(s, max, '…')
}

pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut o: String = s.chars().take(max.saturating_sub(1)).collect();
        o.push('…');
        o
    }
}

/// Where a data mark lies, in pixels.
#[derive(Debug, Clone, Copy)]
enum Ink {
    /// A box: x0, y0, x1, y1.
    Box(f64, f64, f64, f64),
    /// A straight piece of line between two points.
    Segment((f64, f64), (f64, f64)),
}

impl Ink {
    /// Whether the mark meets the box `(x0, y0, x1, y1)`.
    fn meets(&self, (x0, y0, x1, y1): (f64, f64, f64, f64)) -> bool {
        match *self {
            Ink::Box(a, b, c, d) => a <= x1 && c >= x0 && b <= y1 && d >= y0,
            Ink::Segment((ax, ay), (bx, by)) => {
                // Liang-Barsky: clip the segment's parameter range to the box.
                let (dx, dy) = (bx - ax, by - ay);
                let (mut lo, mut hi) = (0.0f64, 1.0f64);
                for (p, q) in [(-dx, ax - x0), (dx, x1 - ax), (-dy, ay - y0), (dy, y1 - ay)] {
                    if p == 0.0 {
                        if q < 0.0 {
                            return false;
                        }
                    } else {
                        let r = q / p;
                        if p < 0.0 {
                            lo = lo.max(r);
                        } else {
                            hi = hi.min(r);
                        }
                    }
                }
                lo <= hi
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_in_the_middle_and_keep_their_ends() {
        let names: Vec<String> = ["", "-2", "-3"]
            .iter()
            .map(|n| format!("nbnxm_kernel_ElecRF_VdwLJCombGeom_F_4xm-gather{n}"))
            .collect();
        let cut: Vec<String> = names.iter().map(|n| shorten_middle(n, 30)).collect();
        for c in &cut {
            assert_eq!(c.chars().count(), 30, "{c}");
            assert!(c.starts_with("nbnxm_kern") && c.contains('…'), "{c}");
        }
        assert!(cut[1].ends_with("_F_4xm-gather-2"), "{}", cut[1]);
        assert_ne!(cut[1], cut[2]);
        assert_eq!(shorten_middle("short", 30), "short");
        assert_eq!(shorten_middle("abc", 0), "");
    }

    #[test]
    fn linear_ticks_are_nice() {
        let s = Scale::Linear {
            min: 0.0,
            max: 97.0,
        };
        assert_eq!(s.ticks(), vec![0.0, 20.0, 40.0, 60.0, 80.0]);
        let s = Scale::Linear {
            min: -0.3,
            max: 0.9,
        };
        assert_eq!(s.ticks(), vec![-0.2, 0.0, 0.2, 0.4, 0.6, 0.8]);
    }

    #[test]
    fn log_ticks_are_decades_or_1_2_5() {
        let s = Scale::log_over([3.0, 4500.0]);
        assert_eq!(s.range(), (1.0, 10000.0));
        assert_eq!(s.ticks(), vec![1.0, 10.0, 100.0, 1000.0, 10000.0]);
        let s = Scale::log_over([30.0, 70.0]);
        assert_eq!(s.ticks(), vec![10.0, 20.0, 50.0, 100.0]);
        assert!((s.unit(100.0) - 1.0).abs() < 1e-12);
        assert!(!s.accepts(0.0) && !s.accepts(f64::NAN));
    }

    #[test]
    fn log2_and_symlog() {
        let s = Scale::log2_over([1.0, 6.0]);
        assert_eq!(s.ticks(), vec![1.0, 2.0, 4.0, 8.0]);
        let s = Scale::symlog_over([-250.0, 3.0, 0.0]);
        assert_eq!(s.range(), (-1000.0, 10.0));
        assert_eq!(
            s.ticks(),
            vec![-1000.0, -100.0, -10.0, -1.0, 0.0, 1.0, 10.0]
        );
        assert!((s.unit(0.0) - s.unit(-0.0)).abs() < 1e-12);
        assert!(s.unit(-1000.0).abs() < 1e-12 && (s.unit(10.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn number_labels() {
        assert_eq!(fmt_num(20.0), "20");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(1e7), "1e7");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_bytes(1536.0), "1.5KiB");
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }

    #[test]
    fn marks_are_counted_and_bad_values_skipped() {
        let mut p = Plot::new(
            "t",
            400.0,
            300.0,
            60.0,
            Axis::new(Scale::log_over([1.0, 100.0]), "x"),
            Axis::new(Scale::Linear { min: 0.0, max: 1.0 }, "y"),
        );
        p.point(10.0, 0.5, 3.0, color(0), "a");
        p.point(0.0, 0.5, 3.0, color(0), "zero on a log axis");
        p.point(f64::NAN, 0.5, 3.0, color(0), "nan");
        p.line(&[(1.0, 0.1), (100.0, 0.9)], color(1), Dash::Dashed, "l");
        let svg = p.finish();
        assert_eq!((svg.marks, svg.skipped), (2, 2));
        assert!(svg.text.contains("data-n=\"2\""));
        assert!(!svg.text.contains("NaN") && !svg.text.contains("inf"));
        assert_eq!(svg.text.matches("class=\"mark\"").count(), 2);
    }

    /// The texts of a figure's tick labels, in the order drawn.
    fn tick_texts(svg: &str) -> Vec<String> {
        svg.split("<text class=\"tick\"")
            .skip(1)
            .map(|t| t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()].to_string())
            .collect()
    }

    #[test]
    fn crowded_tick_labels_are_thinned() {
        // 16 bins named in 9 characters (58 px) 32.5 px apart: every other name is drawn, every
        // grid line is.
        let names: Vec<String> = (0..16).map(|i| format!("{i:03}K-{:03}K", i + 1)).collect();
        // The bins' plot, `width` pixels wide.
        let bins = |width: f64| {
            let mut p = Plot::new(
                "bins",
                width,
                200.0,
                60.0,
                Axis::new(
                    Scale::Linear {
                        min: -0.5,
                        max: 15.5,
                    },
                    "bin",
                ),
                Axis::new(Scale::Linear { min: 0.0, max: 1.0 }, "y"),
            );
            p.x_labels(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (i as f64, n.clone()))
                    .collect(),
            );
            p.finish().text
        };
        let text = bins(600.0);
        let drawn = tick_texts(&text);
        let kept: Vec<&String> = drawn.iter().filter(|t| t.contains('K')).collect();
        assert_eq!(kept, names.iter().step_by(2).collect::<Vec<_>>());
        assert_eq!(text.matches("class=\"grid\"").count(), 16 + 6);
        // A wide plot draws them all.
        assert_eq!(tick_texts(&bins(1600.0)).len(), 16 + 6);
        // A symlog y axis: 0 is labelled, and -1 and 1, a few pixels from it, are not.
        let p = Plot::new(
            "symlog",
            400.0,
            200.0,
            60.0,
            Axis::new(Scale::Linear { min: 0.0, max: 0.5 }, "x"),
            Axis::new(Scale::symlog_over([-1e6, 1e10]), "delta"),
        );
        let drawn = tick_texts(&p.finish().text);
        assert!(drawn.iter().any(|t| t == "0"), "{drawn:?}");
        assert!(!drawn.iter().any(|t| t == "1" || t == "-1"), "{drawn:?}");
    }

    /// An axis from 0 to 1, as the legend tests draw on.
    fn axis(label: &str) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Linear { min: 0.0, max: 1.0 },
            format: fmt_num,
        }
    }

    fn legend_at(svg: &str) -> (f64, f64) {
        let g = &svg[svg.find("<g class=\"legend\"><rect x=\"").unwrap() + 27..];
        let x: f64 = g[..g.find('"').unwrap()].parse().unwrap();
        let g = &g[g.find("y=\"").unwrap() + 3..];
        (x, g[..g.find('"').unwrap()].parse().unwrap())
    }

    #[test]
    fn the_legend_goes_where_it_hides_the_least() {
        let plot = |ys: &[f64]| {
            let mut p = Plot::new("l", 400.0, 200.0, 50.0, axis("x"), axis("y"));
            let pts: Vec<(f64, f64)> = ys
                .iter()
                .enumerate()
                .map(|(i, &y)| (i as f64 / (ys.len() - 1) as f64, y))
                .collect();
            p.line(&pts, "#000", Dash::Solid, "data");
            p.legend("a long enough legend entry", "#000", Dash::Solid, false);
            legend_at(&p.finish().text)
        };
        // Top-right (the default) where the data leave it free.
        let (x, y) = plot(&[0.1, 0.2, 0.3]);
        assert!(x > 150.0 && y < 50.0, "{x} {y}");
        // A line along the top (reuse near 1): the legend goes below it, on the right.
        let (x, y) = plot(&[0.98, 0.99, 0.97, 0.99, 0.98]);
        assert!(x > 150.0 && y > 100.0, "{x} {y}");
        // Rising to the top right: top-left.
        let (x, y) = plot(&[0.0, 0.5, 1.0]);
        assert!(x < 100.0 && y < 50.0, "{x} {y}");
        // A segment that crosses a box with both ends outside meets it; one beside it does not.
        let b = (10.0, 10.0, 20.0, 20.0);
        assert!(Ink::Segment((0.0, 15.0), (30.0, 15.0)).meets(b));
        assert!(Ink::Segment((0.0, 0.0), (30.0, 30.0)).meets(b));
        assert!(!Ink::Segment((0.0, 25.0), (30.0, 25.0)).meets(b));
        assert!(!Ink::Segment((0.0, 12.0), (5.0, 40.0)).meets(b));
        assert!(Ink::Segment((15.0, 15.0), (15.0, 15.0)).meets(b));
        assert!(Ink::Box(18.0, 18.0, 40.0, 40.0).meets(b));
        assert!(!Ink::Box(21.0, 0.0, 40.0, 40.0).meets(b));
    }

    /// A legend never hides a label on the data or a reference label: it goes where none is,
    /// or below the frame, and the figure grows to hold it (as the bandwidth-bandwidth figure
    /// of ten LAMMPS patterns needed).
    #[test]
    fn the_legend_hides_no_label() {
        let height = |svg: &str| -> f64 {
            let v = &svg[svg.find("height=\"").unwrap() + 8..];
            v[..v.find('"').unwrap()].parse().unwrap()
        };
        // A label along the top right: a one-entry legend goes top-left.
        let mut p = Plot::new("l", 400.0, 300.0, 50.0, axis("x"), axis("y"));
        p.line(&[(0.0, 0.0), (0.2, 0.1)], "#000", Dash::Solid, "data");
        p.text(0.55, 0.85, "a label on the data", "#444", -10.0);
        p.legend("entry", "#000", Dash::Solid, false);
        let svg = p.finish().text;
        let (x, y) = legend_at(&svg);
        assert!(x < 100.0 && y < 50.0, "{x} {y}");
        assert_eq!(height(&svg), 300.0);
        // Labels in every corner and side, and ten long entries: below the frame.
        let mut p = Plot::new("l", 400.0, 300.0, 50.0, axis("x"), axis("y"));
        for (x, y) in [
            (0.05, 0.95),
            (0.6, 0.95),
            (0.05, 0.1),
            (0.6, 0.1),
            (0.3, 0.5),
        ] {
            p.text(x, y, "a label on the data here", "#444", -5.0);
        }
        for i in 0..10 {
            p.legend(
                &format!("a long pattern name, number {i}"),
                "#000",
                Dash::Solid,
                false,
            );
        }
        let svg = p.finish().text;
        let (_, y) = legend_at(&svg);
        assert!(y >= 300.0, "{y}");
        assert_eq!(height(&svg), 300.0 + 10.0 * 15.0 + 6.0 + 6.0);
    }
}
