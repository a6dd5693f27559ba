//! The page: one self-contained HTML file (inline CSS and SVG, no script, no external URL):
//! a header (mgbench version, command line, inputs with their sha256, date, hosts), a table of
//! contents, then each section's figures, each followed by a `<details>` table of its numbers.

use std::fmt::Write;

use crate::figures::{Section, Table};
use crate::inputs::InputFile;
use crate::svg::esc;

const CSS: &str = "
body{font-family:'DejaVu Sans',Verdana,sans-serif;margin:0 auto;max-width:1100px;padding:0 16px 40px;color:#222;line-height:1.4}
h1{font-size:1.6em;margin:18px 0 6px}h2{font-size:1.3em;border-bottom:1px solid #ccc;padding-bottom:3px;margin-top:36px}
h3{font-size:1.05em;margin:18px 0 4px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:'DejaVu Sans Mono',monospace;font-size:12px;word-break:break-all}
figure{margin:14px 0 24px}figcaption{font-size:13px;color:#444;max-width:760px}
svg.figure{max-width:100%;height:auto;display:block;background:#fff}
details{margin-top:6px;font-size:13px}summary{cursor:pointer;color:#0058a0}
.note{font-size:12px;color:#8a5a00}nav ol{font-size:14px}nav li li{font-size:13px}
.scroll{max-height:420px;overflow:auto;display:inline-block;max-width:100%}
";

/// What the header says about the run that made the report.
pub struct Header<'a> {
    pub version: &'a str,
    pub command_line: &'a str,
    pub date: &'a str,
    pub hosts: Vec<String>,
    pub inputs: &'a [InputFile],
    pub notes: &'a [String],
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.parse::<f64>().is_ok()
}

/// A table; long tables scroll inside their box.
pub fn table(t: &Table, out: &mut String) {
    out.push_str("<div class=\"scroll\"><table><thead><tr>");
    for h in &t.headers {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for r in &t.rows {
        out.push_str("<tr>");
        for c in r {
            if is_number(c) {
                let _ = write!(out, "<td class=\"num\">{}</td>", esc(c));
            } else {
                let _ = write!(out, "<td>{}</td>", esc(c));
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
}

/// The whole page.
pub fn page(h: &Header<'_>, sections: &[Section]) -> String {
    let size: usize = sections
        .iter()
        .flat_map(|s| s.figures.iter())
        .map(|f| f.svg.text.len() + 64 * f.table.rows.len())
        .sum();
    let mut o = String::with_capacity(size + 16 * 1024);
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    o.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    o.push_str("<title>mgbench report</title><style>");
    o.push_str(CSS);
    o.push_str("</style></head><body>\n<header><h1>mgbench report</h1><table>");
    let _ = write!(
        o,
        "<tr><th>mgbench</th><td>{}</td></tr><tr><th>command</th><td><code>{}</code></td></tr><tr><th>made</th><td>{}</td></tr><tr><th>hosts</th><td>{}</td></tr></table>",
        esc(h.version),
        esc(h.command_line),
        esc(h.date),
        if h.hosts.is_empty() {
            "none named in the inputs".to_string()
        } else {
            h.hosts.iter().map(|x| esc(x)).collect::<Vec<_>>().join("<br>")
        }
    );
    o.push_str("<h3>Inputs</h3><table><thead><tr><th>file</th><th>holds</th><th>bytes</th><th>sha256</th></tr></thead><tbody>");
    for f in h.inputs {
        let _ = write!(
            o,
            "<tr><td class=\"mono\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"mono\">{}</td></tr>",
            esc(&f.path.display().to_string()),
            esc(&f.what),
            f.bytes,
            f.sha256
        );
    }
    o.push_str("</tbody></table>");
    for n in h.notes {
        let _ = write!(o, "<p class=\"note\">{}</p>", esc(n));
    }
    o.push_str("</header>\n<nav><h2>Contents</h2><ol>");
    for s in sections {
        let _ = write!(o, "<li><a href=\"#{}\">{}</a>", s.id, esc(&s.title));
        if !s.figures.is_empty() {
            o.push_str("<ol>");
            for f in &s.figures {
                let _ = write!(
                    o,
                    "<li><a href=\"#fig-{}\">{}</a></li>",
                    f.id,
                    esc(&f.title)
                );
            }
            o.push_str("</ol>");
        }
        o.push_str("</li>");
    }
    o.push_str("</ol></nav>\n<main>");
    for s in sections {
        let _ = write!(
            o,
            "<section id=\"{}\"><h2>{}</h2><p>{}</p>",
            s.id,
            esc(&s.title),
            esc(&s.intro)
        );
        for f in &s.figures {
            let _ = write!(o, "<figure id=\"fig-{}\"><h3>{}</h3>", f.id, esc(&f.title));
            o.push_str(&f.svg.text);
            let _ = write!(o, "<figcaption>{}</figcaption>", esc(&f.caption));
            let mut notes = f.notes.clone();
            if f.svg.skipped > 0 {
                notes.push(format!(
                    "{} value(s) could not be drawn (not finite, or not positive on a log axis); the table has them",
                    f.svg.skipped
                ));
            }
            for n in &notes {
                let _ = write!(o, "<p class=\"note\">{}</p>", esc(n));
            }
            let _ = write!(
                o,
                "<details><summary>Numbers ({} row(s))</summary>",
                f.table.rows.len()
            );
            table(&f.table, &mut o);
            o.push_str("</details></figure>\n");
        }
        for (title, t) in &s.tables {
            let _ = write!(o, "<h3>{}</h3>", esc(title));
            table(t, &mut o);
        }
        o.push_str("</section>\n");
    }
    o.push_str("</main><footer><p class=\"note\">Made by mgbench report: one file, no script, no external resource. Hover a mark for its value; open \"Numbers\" under a figure for the data.</p></footer></body></html>\n");
    o
}
