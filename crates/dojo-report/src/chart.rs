//! Charts as inline SVG: bar charts (histograms), horizontal stacked bars, grouped bars and line
//! charts. Each returns an [`Svg`] that goes inline in a [`crate::Page`] (styled by the page's
//! stylesheet) or, through [`Svg::standalone`], into its own `.svg` file. Every label is escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use dojo_rundir::clip::{self, Keep, Unit};

use crate::{escape, number};

/// Series colours, in order.
pub const PALETTE: [&str; 6] = [
    "#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#718096",
];

/// The chart classes: title, label, value drawn on a bar. The page stylesheet includes them; a
/// standalone SVG carries them itself.
pub(crate) const CHART_CSS: &str = ".plot text{font-family:system-ui,-apple-system,\"Segoe UI\",Roboto,sans-serif}.pt{font-weight:600;font-size:14px}.pl{font-size:12px;fill:#2d3748}.pv{font-size:11px;fill:#fff;font-weight:600}.ps{font-size:9px;fill:#2d3748}";

const GRID: &str = "#e2e8f0";
const AXIS: &str = "#4a5568";

/// One chart as an SVG element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Svg(String);

impl Svg {
    /// The `<svg>` element, for inlining in an HTML page.
    pub fn inline(&self) -> &str {
        &self.0
    }

    /// A standalone SVG document (namespace and styles included), for a `.svg` file.
    pub fn standalone(&self) -> String {
        let body = self.0.strip_prefix("<svg").unwrap_or(&self.0);
        let (open, rest) = body.split_once('>').unwrap_or((body, ""));
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\"{open}><style>{CHART_CSS}</style>{rest}\n"
        )
    }
}

fn open(w: f64, h: f64, title: &str) -> String {
    format!(
        r#"<svg class="plot" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{t}"><text x="0" y="18" class="pt">{t}</text>"#,
        t = escape(title)
    )
}

/// Shortens a label to `max` characters, `…` included where it was cut.
fn shorten(t: &str, max: usize) -> String {
    if t.chars().count() > max {
        clip::cut(t, max - 1, Unit::Chars, Keep::Head).ellipsis()
    } else {
        t.to_string()
    }
}

/// Vertical bars with labelled categories, e.g. a histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub x_label: String,
    /// (category, value), left to right.
    pub bars: Vec<(String, f64)>,
}

impl BarChart {
    pub fn new(title: &str, x_label: &str, bars: Vec<(String, f64)>) -> BarChart {
        BarChart {
            title: title.into(),
            x_label: x_label.into(),
            bars,
        }
    }

    /// A histogram of `values` in equal-width bins over `[0, max]` (at least 1 wide, integer
    /// edges, at most about `n_bins` bins).
    pub fn histogram(title: &str, x_label: &str, values: &[usize], n_bins: usize) -> BarChart {
        let max = values.iter().copied().max().unwrap_or(0);
        let width = (max / n_bins.max(1) + 1).max(1);
        let n = max / width + 1;
        let mut counts = vec![0usize; n];
        for &v in values {
            counts[v / width] += 1;
        }
        let bars = counts
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let label = if width == 1 {
                    format!("{}", i * width)
                } else {
                    format!("{}–{}", i * width, (i + 1) * width - 1)
                };
                (label, c as f64)
            })
            .collect();
        BarChart::new(title, x_label, bars)
    }

    pub fn svg(&self) -> Svg {
        let (w, ht, left, bottom, top) = (640.0f64, 320.0f64, 50.0, 70.0, 30.0);
        let plot_w = w - left - 10.0;
        let plot_h = ht - bottom - top;
        let max = self.bars.iter().map(|b| b.1).fold(0.0, f64::max);
        let max = if max > 0.0 { max } else { 1.0 };
        let bw = plot_w / self.bars.len().max(1) as f64;
        let base = top + plot_h;
        let mut s = open(w, ht, &self.title);
        let _ = write!(
            s,
            r#"<line x1="{left}" y1="{base}" x2="{}" y2="{base}" stroke="{AXIS}"/><line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="{AXIS}"/>"#,
            left + plot_w
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end" class="pl">{}</text><text x="{}" y="{base}" text-anchor="end" class="pl">0</text>"#,
            left - 4.0,
            top + 4.0,
            number(max, 2),
            left - 4.0,
        );
        for (i, (label, v)) in self.bars.iter().enumerate() {
            let bh = plot_h * v.max(0.0) / max;
            let x = left + i as f64 * bw;
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                x + 1.0,
                base - bh,
                (bw - 2.0).max(1.0),
                PALETTE[0],
                escape(label),
                number(*v, 2)
            );
            if *v > 0.0 {
                let _ = write!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="ps">{}</text>"#,
                    x + bw / 2.0,
                    base - bh - 2.0,
                    number(*v, 2)
                );
            }
            let (lx, ly) = (x + bw / 2.0, base + 12.0);
            let _ = write!(
                s,
                r#"<text x="{lx:.1}" y="{ly:.1}" text-anchor="end" transform="rotate(-40 {lx:.1} {ly:.1})" class="ps">{}</text>"#,
                escape(label)
            );
        }
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle" class="pl">{}</text></svg>"#,
            left + plot_w / 2.0,
            ht - 4.0,
            escape(&self.x_label)
        );
        Svg(s)
    }
}

/// One part of a stacked bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub name: String,
    pub value: f64,
    /// CSS colour.
    pub color: String,
}

/// One horizontal stacked bar: its label and its parts, left to right.
#[derive(Debug, Clone, PartialEq)]
pub struct StackedRow {
    pub label: String,
    pub segments: Vec<Segment>,
}

impl StackedRow {
    pub fn new(label: &str) -> StackedRow {
        StackedRow {
            label: label.into(),
            segments: Vec::new(),
        }
    }

    pub fn segment(mut self, name: &str, value: f64, color: &str) -> StackedRow {
        self.segments.push(Segment {
            name: name.into(),
            value,
            color: color.into(),
        });
        self
    }
}

/// Horizontal stacked bars, one per row, with a legend of the segment names.
pub fn stacked_bars(title: &str, rows: &[StackedRow]) -> Svg {
    let (w, row_h, left, top) = (720.0, 26.0, 190.0, 30.0);
    let legend: BTreeMap<&str, &str> = rows
        .iter()
        .flat_map(|r| {
            r.segments
                .iter()
                .map(|s| (s.name.as_str(), s.color.as_str()))
        })
        .collect();
    let h = top + rows.len() as f64 * (row_h + 8.0) + 40.0;
    let max = rows
        .iter()
        .map(|r| r.segments.iter().map(|x| x.value).sum::<f64>())
        .fold(0.0, f64::max)
        .max(1.0);
    let scale = (w - left - 60.0) / max;
    let mut s = open(w, h, title);
    for (i, row) in rows.iter().enumerate() {
        let y = top + i as f64 * (row_h + 8.0);
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end" class="pl">{}</text>"#,
            left - 8.0,
            y + row_h * 0.68,
            escape(&shorten(&row.label, 28))
        );
        let mut x = left;
        for seg in &row.segments {
            if seg.value <= 0.0 {
                continue;
            }
            let bw = seg.value * scale;
            let v = number(seg.value, 2);
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{bw:.1}" height="{row_h}" fill="{}"><title>{}: {v}</title></rect>"#,
                escape(&seg.color),
                escape(&seg.name)
            );
            if bw > 18.0 {
                let _ = write!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="pv">{v}</text>"#,
                    x + bw / 2.0,
                    y + row_h * 0.68
                );
            }
            x += bw;
        }
    }
    let mut lx = left;
    let ly = h - 14.0;
    for (name, color) in legend {
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{ly:.1}" class="pl">{}</text>"#,
            ly - 10.0,
            escape(color),
            lx + 16.0,
            escape(name)
        );
        lx += 24.0 + 7.5 * name.chars().count() as f64;
    }
    s.push_str("</svg>");
    Svg(s)
}

/// Grouped vertical bars: one group per category, one bar per series in each group.
pub fn grouped_bars(
    title: &str,
    unit: &str,
    groups: &[String],
    series: &[(String, Vec<f64>)],
) -> Svg {
    // Group labels are drawn rotated by 40° and end under their bar, so a long first label
    // reaches left of the plot: widen the left margin to fit it (≈6 px a character at this size).
    let first_label = groups.first().map_or(0, |t| shorten(t, 28).chars().count()) as f64;
    let (w, h, bottom, top) = (900.0, 345.0, 135.0, 30.0);
    let group_w0 = (w - 70.0) / groups.len().max(1) as f64;
    let left = f64::max(60.0, 6.0 * first_label * 0.77 - group_w0 * 0.5 + 8.0);
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0, f64::max)
        .max(1.0);
    let plot_h = h - bottom - top;
    let group_w = (w - left - 10.0) / groups.len().max(1) as f64;
    let bar_w = (group_w * 0.8) / series.len().max(1) as f64;
    let mut s = open(w, h, title);
    y_grid(&mut s, left, w - 10.0, top, plot_h, 0.0, max);
    let _ = write!(
        s,
        r#"<text x="12" y="{:.1}" class="pl" transform="rotate(-90 12 {:.1})">{}</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        escape(unit)
    );
    for (gi, group) in groups.iter().enumerate() {
        let gx = left + gi as f64 * group_w + group_w * 0.1;
        for (si, (name, vals)) in series.iter().enumerate() {
            let v = vals.get(gi).copied().unwrap_or(0.0);
            let bh = plot_h * v / max;
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{}"><title>{} · {}: {}</title></rect>"#,
                gx + si as f64 * bar_w,
                top + plot_h - bh,
                bar_w.max(1.0),
                PALETTE[si % PALETTE.len()],
                escape(group),
                escape(name),
                number(v, 2)
            );
        }
        let cx = gx + group_w * 0.4;
        let _ = write!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" class="pl" transform="rotate(-40 {cx:.1} {:.1})" text-anchor="end">{}</text>"#,
            top + plot_h + 14.0,
            top + plot_h + 14.0,
            escape(&shorten(group, 28))
        );
    }
    legend(&mut s, left, h, series.iter().map(|(n, _)| n.as_str()));
    s.push_str("</svg>");
    Svg(s)
}

/// Five horizontal grid lines from `lo` to `hi`, labelled on the left.
fn y_grid(s: &mut String, left: f64, right: f64, top: f64, plot_h: f64, lo: f64, hi: f64) {
    for k in 0..=4 {
        let v = lo + (hi - lo) * k as f64 / 4.0;
        let y = top + plot_h - plot_h * k as f64 / 4.0;
        let label = if (hi - lo).abs() >= 100.0 {
            format!("{v:.0}")
        } else if (hi - lo).abs() >= 1.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.3}")
        };
        let _ = write!(
            s,
            r#"<line x1="{left}" x2="{right}" y1="{y:.1}" y2="{y:.1}" stroke="{GRID}"/><text x="{}" y="{:.1}" text-anchor="end" class="pl">{label}</text>"#,
            left - 6.0,
            y + 4.0,
        );
    }
}

/// A legend along the bottom edge, one swatch per series in palette order.
fn legend<'a>(s: &mut String, left: f64, h: f64, names: impl Iterator<Item = &'a str>) {
    let mut lx = left;
    for (si, name) in names.enumerate() {
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}" class="pl">{}</text>"#,
            h - 16.0,
            PALETTE[si % PALETTE.len()],
            lx + 16.0,
            h - 6.0,
            escape(name)
        );
        lx += 30.0 + 7.5 * name.chars().count() as f64;
    }
}

/// One line of a [`LineChart`]: (x, y) points in x order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Lines over a numeric x axis: a loss curve over steps, a reward curve over iterations.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

impl LineChart {
    pub fn new(title: &str, x_label: &str, y_label: &str) -> LineChart {
        LineChart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
        }
    }

    /// Adds a series; points that are not finite numbers are left out.
    pub fn series(mut self, name: &str, points: Vec<(f64, f64)>) -> LineChart {
        self.series.push(Series {
            name: name.into(),
            points: points
                .into_iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect(),
        });
        self
    }

    pub fn svg(&self) -> Svg {
        let (w, h, left, bottom, top, right) = (720.0, 320.0, 70.0, 60.0, 30.0, 16.0);
        let plot_w = w - left - right;
        let plot_h = h - bottom - top;
        let points = || self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1) = range(points().map(|p| p.0));
        let (mut y0, mut y1) = range(points().map(|p| p.1));
        if x1 <= x0 {
            (x0, x1) = (x0 - 0.5, x0 + 0.5);
        }
        if y1 <= y0 {
            (y0, y1) = (y0 - 0.5, y0 + 0.5);
        }
        let px = |x: f64| left + plot_w * (x - x0) / (x1 - x0);
        let py = |y: f64| top + plot_h - plot_h * (y - y0) / (y1 - y0);
        let mut s = open(w, h, &self.title);
        y_grid(&mut s, left, w - right, top, plot_h, y0, y1);
        let base = top + plot_h;
        let _ = write!(
            s,
            r#"<line x1="{left}" y1="{base}" x2="{}" y2="{base}" stroke="{AXIS}"/>"#,
            w - right
        );
        for k in 0..=4 {
            let v = x0 + (x1 - x0) * k as f64 / 4.0;
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="pl">{}</text>"#,
                px(v),
                base + 16.0,
                number((v * 100.0).round() / 100.0, 2)
            );
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="pl">{}</text><text x="12" y="{:.1}" class="pl" transform="rotate(-90 12 {:.1})" text-anchor="middle">{}</text>"#,
            left + plot_w / 2.0,
            base + 34.0,
            escape(&self.x_label),
            top + plot_h / 2.0,
            top + plot_h / 2.0,
            escape(&self.y_label)
        );
        for (si, series) in self.series.iter().enumerate() {
            let color = PALETTE[si % PALETTE.len()];
            let pts: Vec<String> = series
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            match pts.len() {
                0 => {}
                1 => {
                    let _ = write!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                        px(series.points[0].0),
                        py(series.points[0].1)
                    );
                }
                _ => {
                    let _ = write!(
                        s,
                        r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"><title>{}</title></polyline>"#,
                        pts.join(" "),
                        escape(&series.name)
                    );
                }
            }
        }
        legend(&mut s, left, h, self.series.iter().map(|s| s.name.as_str()));
        s.push_str("</svg>");
        Svg(s)
    }
}

/// Smallest and largest of the values; (0, 1) when there are none.
fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
        })
        .unwrap_or((0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_bins_cover_all_values() {
        let h = BarChart::histogram("t", "x", &[0, 1, 5, 9, 10, 25], 5);
        assert_eq!(h.bars.iter().map(|b| b.1).sum::<f64>(), 6.0);
        assert_eq!(h.bars[0].0, "0–5");
        let one = BarChart::histogram("t", "x", &[], 5);
        assert_eq!(one.bars, vec![("0".to_string(), 0.0)]);
    }

    #[test]
    fn a_bar_chart_has_one_bar_per_category_and_escapes_its_labels() {
        let h = BarChart::histogram("Turns <per> trajectory", "turns", &[1, 2, 2, 3], 4);
        let svg = h.svg();
        assert!(svg.inline().starts_with("<svg") && svg.inline().ends_with("</svg>"));
        assert!(svg.inline().contains("Turns &lt;per&gt; trajectory"));
        assert_eq!(svg.inline().matches("<rect").count(), h.bars.len());
        let file = svg.standalone();
        assert!(file.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\""));
        assert!(file.contains("<style>") && file.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn stacked_and_grouped_bars_draw_every_positive_value() {
        let rows = [
            StackedRow::new("gold")
                .segment("resolved", 2.0, "#38a169")
                .segment("unresolved", 0.0, "#a0aec0"),
            StackedRow::new("model's").segment("unresolved", 3.0, "#a0aec0"),
        ];
        let svg = stacked_bars("Outcomes", &rows);
        // Two bars drawn, two legend swatches.
        assert_eq!(svg.inline().matches("<rect").count(), 4);
        assert!(svg.inline().contains("model&#39;s"));
        let svg = grouped_bars(
            "Steps",
            "steps",
            &["a".into(), "b".into()],
            &[("p".into(), vec![1.0, 2.0]), ("q".into(), vec![3.0])],
        );
        assert_eq!(svg.inline().matches("<rect").count(), 4 + 2);
    }

    #[test]
    fn a_line_chart_draws_one_line_per_series_and_skips_non_finite_points() {
        let c = LineChart::new("Training loss", "step", "loss")
            .series("train", vec![(0.0, 2.5), (1.0, f64::NAN), (2.0, 1.0)])
            .series("eval", vec![(2.0, 1.5)])
            .series("empty", vec![]);
        assert_eq!(c.series[0].points.len(), 2);
        let svg = c.svg();
        assert_eq!(svg.inline().matches("<polyline").count(), 1);
        assert_eq!(svg.inline().matches("<circle").count(), 1);
        assert!(!svg.inline().contains("NaN"));
        // A flat or empty chart still has a valid scale.
        let flat = LineChart::new("r", "x", "y").series("s", vec![(1.0, 1.0), (1.0, 1.0)]);
        assert!(!flat.svg().inline().contains("NaN"));
        assert!(!LineChart::new("r", "x", "y").svg().inline().contains("NaN"));
    }
}
