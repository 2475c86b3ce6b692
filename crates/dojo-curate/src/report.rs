//! The human-readable side of a curation run: a stage table and an HTML report with SVG charts
//! (difficulty histogram, token lengths, turns per trajectory). SVG is written by hand: three bar
//! charts do not justify a plotting stack and its font dependencies. The charts are inlined in
//! `report.html` (also written as `*.svg` beside it), so the report opens standalone, offline, with
//! no external asset; that is why there is no PNG: any browser renders the inline SVG.

use std::fmt::Write as _;

use crate::filters::StageReport;

/// A histogram with labelled bins.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    pub title: String,
    pub x_label: String,
    pub bins: Vec<(String, usize)>,
}

impl Histogram {
    /// Equal-width bins over `[0, max]` (at least 1 wide, integer edges).
    pub fn of(title: &str, x_label: &str, values: &[usize], n_bins: usize) -> Histogram {
        let max = values.iter().copied().max().unwrap_or(0);
        let width = (max / n_bins.max(1) + 1).max(1);
        let n = max / width + 1;
        let mut counts = vec![0usize; n];
        for &v in values {
            counts[v / width] += 1;
        }
        Histogram {
            title: title.into(),
            x_label: x_label.into(),
            bins: counts
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    let label = if width == 1 {
                        format!("{}", i * width)
                    } else {
                        format!("{}–{}", i * width, (i + 1) * width - 1)
                    };
                    (label, c)
                })
                .collect(),
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A bar chart as a standalone SVG document.
pub fn bar_svg(h: &Histogram) -> String {
    let (w, ht, left, bottom, top) = (640.0f64, 320.0f64, 50.0, 70.0, 30.0);
    let plot_w = w - left - 10.0;
    let plot_h = ht - bottom - top;
    let max = h.bins.iter().map(|b| b.1).max().unwrap_or(0).max(1) as f64;
    let n = h.bins.len().max(1) as f64;
    let bw = plot_w / n;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{ht}" viewBox="0 0 {w} {ht}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="18" text-anchor="middle" font-size="14">{}</text>"#,
        w / 2.0,
        esc(&h.title)
    );
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#333"/>"##,
        top + plot_h,
        left + plot_w,
        top + plot_h
    );
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="#333"/>"##,
        top + plot_h
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
        left - 4.0,
        top + 4.0,
        max as usize
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">0</text>"#,
        left - 4.0,
        top + plot_h
    );
    for (i, (label, c)) in h.bins.iter().enumerate() {
        let bh = plot_h * (*c as f64) / max;
        let x = left + i as f64 * bw;
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#4a7ab5"><title>{}: {}</title></rect>"##,
            x + 1.0,
            top + plot_h - bh,
            (bw - 2.0).max(1.0),
            bh,
            esc(label),
            c
        );
        if *c > 0 {
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="9">{}</text>"#,
                x + bw / 2.0,
                top + plot_h - bh - 2.0,
                c
            );
        }
        let lx = x + bw / 2.0;
        let ly = top + plot_h + 12.0;
        let _ = write!(
            s,
            r#"<text x="{lx:.1}" y="{ly:.1}" text-anchor="end" transform="rotate(-40 {lx:.1} {ly:.1})" font-size="9">{}</text>"#,
            esc(label)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text></svg>"#,
        left + plot_w / 2.0,
        ht - 4.0,
        esc(&h.x_label)
    );
    s
}

/// The stage table as fixed-width text (for the terminal).
pub fn stage_table(stages: &[StageReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>8} {:>8} {:>8}  dropped because",
        "stage", "in", "kept", "dropped"
    );
    for st in stages {
        let reasons: Vec<String> = st.dropped.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>8} {:>8}  {}",
            st.stage,
            st.input,
            st.kept,
            st.dropped_total(),
            reasons.join(", ")
        );
    }
    s
}

/// The HTML report: stage table, difficulty split, problems and the charts inline.
pub fn html(
    title: &str,
    stages: &[StageReport],
    summary: &[(String, String)],
    problems: &[String],
    charts: &[Histogram],
) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{0}</title><style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child,th:first-child,td.l{{text-align:left}}</style></head><body><h1>{0}</h1>",
        esc(title)
    );
    s.push_str("<h2>Stages</h2><table><tr><th>stage</th><th>in</th><th>kept</th><th>dropped</th><th>why</th></tr>");
    for st in stages {
        let reasons: Vec<String> = st
            .dropped
            .iter()
            .map(|(k, v)| format!("{}: {v}", esc(k)))
            .collect();
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            esc(&st.stage),
            st.input,
            st.kept,
            st.dropped_total(),
            reasons.join("<br>")
        );
    }
    s.push_str("</table><h2>Summary</h2><table>");
    for (k, v) in summary {
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=\"l\">{}</td></tr>",
            esc(k),
            esc(v)
        );
    }
    s.push_str("</table>");
    for c in charts {
        let _ = write!(s, "<h2>{}</h2>{}", esc(&c.title), bar_svg(c));
    }
    let _ = write!(s, "<h2>Input problems ({})</h2>", problems.len());
    if !problems.is_empty() {
        s.push_str("<pre>");
        for p in problems.iter().take(500) {
            let _ = writeln!(s, "{}", esc(p));
        }
        if problems.len() > 500 {
            let _ = writeln!(s, "… {} more in manifest.json", problems.len() - 500);
        }
        s.push_str("</pre>");
    }
    s.push_str("</body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_bins_cover_all_values() {
        let h = Histogram::of("t", "x", &[0, 1, 5, 9, 10, 25], 5);
        assert_eq!(h.bins.iter().map(|b| b.1).sum::<usize>(), 6);
        assert_eq!(h.bins[0].0, "0–5");
        let one = Histogram::of("t", "x", &[], 5);
        assert_eq!(one.bins, vec![("0".to_string(), 0)]);
    }

    #[test]
    fn svg_is_well_formed_enough() {
        let h = Histogram::of("Turns <per> trajectory", "turns", &[1, 2, 2, 3], 4);
        let svg = bar_svg(&h);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("Turns &lt;per&gt; trajectory"));
        assert_eq!(svg.matches("<rect").count(), h.bins.len());
    }
}
