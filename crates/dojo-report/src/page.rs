//! The page skeleton: one HTML document with the shared stylesheet, built section by section.
//! Every method escapes the text it is given; only [`Page::raw`] takes markup as is.

use std::fmt::Write as _;

use crate::chart::{CHART_CSS, Svg};
use crate::escape;

/// The stylesheet every report shares: readable tables, number columns aligned, badges, summary
/// cards, and the classes the charts draw with.
const CSS: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1000px;color:#1a202c;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #e2e8f0;padding-bottom:.3rem}
.sub{color:#4a5568;margin-top:0}
table{border-collapse:collapse;width:100%;font-size:.9rem;margin:.6rem 0}
th,td{border-bottom:1px solid #e2e8f0;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#f7fafc;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.b{display:inline-block;padding:.05rem .45rem;border-radius:.6rem;font-size:.8rem;font-weight:600;color:#fff}
.ok{background:#38a169}.no{background:#a0aec0}.inf{background:#e53e3e}
.plot{display:block;margin:1rem 0;max-width:100%;height:auto}
.note{color:#4a5568;font-size:.85rem}code{background:#f7fafc;padding:0 .2rem}
pre{background:#f7fafc;padding:.6rem;overflow-x:auto;font-size:.8rem}
.cards{display:flex;gap:1rem;flex-wrap:wrap}.card{border:1px solid #e2e8f0;border-radius:.5rem;padding:.7rem 1rem;min-width:200px}
.card .big{font-size:1.8rem;font-weight:700}
"#;

/// A link; `href` is escaped like any attribute value (relative paths are best: a report is
/// moved with its files).
pub fn link(href: &str, text: &str) -> String {
    format!("<a href=\"{}\">{}</a>", escape(href), escape(text))
}

/// A self-contained HTML page under construction.
#[derive(Debug, Clone)]
pub struct Page {
    title: String,
    body: String,
}

impl Page {
    /// A page whose `<title>` and top heading are `title`.
    pub fn new(title: &str) -> Page {
        Page {
            title: title.to_string(),
            body: String::new(),
        }
    }

    /// A paragraph under the title (what was run, on what).
    pub fn subtitle(&mut self, text: &str) -> &mut Self {
        let _ = write!(self.body, "<p class=\"sub\">{}</p>", escape(text));
        self
    }

    /// A section heading.
    pub fn heading(&mut self, text: &str) -> &mut Self {
        let _ = write!(self.body, "<h2>{}</h2>", escape(text));
        self
    }

    /// A small explanatory paragraph (how a figure is counted).
    pub fn note(&mut self, text: &str) -> &mut Self {
        let _ = write!(self.body, "<p class=\"note\">{}</p>", escape(text));
        self
    }

    /// Summary cards: (label, big figure, detail line).
    pub fn cards<'a>(
        &mut self,
        cards: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> &mut Self {
        self.body.push_str("<div class=\"cards\">");
        for (label, big, detail) in cards {
            let _ = write!(
                self.body,
                "<div class=\"card\"><div>{}</div><div class=\"big\">{}</div><div class=\"note\">{}</div></div>",
                escape(label),
                escape(big),
                escape(detail)
            );
        }
        self.body.push_str("</div>");
        self
    }

    pub fn table(&mut self, table: &Table) -> &mut Self {
        self.body.push_str(&table.html());
        self
    }

    pub fn chart(&mut self, svg: &Svg) -> &mut Self {
        self.body.push_str(svg.inline());
        self
    }

    /// A bulleted list of items that are already HTML (e.g. built with [`link`] and [`escape`]).
    pub fn list_html<S: AsRef<str>>(&mut self, items: impl IntoIterator<Item = S>) -> &mut Self {
        self.body.push_str("<ul>");
        for i in items {
            let _ = write!(self.body, "<li>{}</li>", i.as_ref());
        }
        self.body.push_str("</ul>");
        self
    }

    /// Lines of preformatted text (problems, logs).
    pub fn preformatted<S: AsRef<str>>(&mut self, lines: impl IntoIterator<Item = S>) -> &mut Self {
        self.body.push_str("<pre>");
        for l in lines {
            let _ = writeln!(self.body, "{}", escape(l.as_ref()));
        }
        self.body.push_str("</pre>");
        self
    }

    /// Markup as is, for what the helpers above do not cover. The caller escapes its text.
    pub fn raw(&mut self, html: &str) -> &mut Self {
        self.body.push_str(html);
        self
    }

    /// The whole document.
    pub fn finish(&self) -> String {
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{t}</title><style>{CSS}{CHART_CSS}</style></head><body><h1>{t}</h1>{}</body></html>\n",
            self.body,
            t = escape(&self.title)
        )
    }
}

/// How a column's cells are aligned: numbers to the right, so digits line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table with a header row. Cells are text (escaped) unless added with [`Table::row_html`].
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names, every column left-aligned.
    pub fn new<S: AsRef<str>>(header: impl IntoIterator<Item = S>) -> Table {
        let header: Vec<String> = header.into_iter().map(|h| escape(h.as_ref())).collect();
        Table {
            align: vec![Align::Left; header.len()],
            header,
            rows: Vec::new(),
        }
    }

    /// Right-aligns the given columns (0-based).
    pub fn numeric(mut self, columns: impl IntoIterator<Item = usize>) -> Table {
        for c in columns {
            if let Some(a) = self.align.get_mut(c) {
                *a = Align::Right;
            }
        }
        self
    }

    /// A row of text cells.
    pub fn row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows
            .push(cells.into_iter().map(|c| escape(c.as_ref())).collect());
        self
    }

    /// A row of cells that are already HTML (badges, links, `<code>`); the caller escapes text.
    pub fn row_html<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn html(&self) -> String {
        let mut s = String::from("<table><tr>");
        for h in &self.header {
            let _ = write!(s, "<th>{h}</th>");
        }
        s.push_str("</tr>");
        for row in &self.rows {
            s.push_str("<tr>");
            for (i, cell) in row.iter().enumerate() {
                match self.align.get(i) {
                    Some(Align::Right) => {
                        let _ = write!(s, "<td class=\"n\">{cell}</td>");
                    }
                    _ => {
                        let _ = write!(s, "<td>{cell}</td>");
                    }
                }
            }
            s.push_str("</tr>");
        }
        s.push_str("</table>");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BarChart;

    #[test]
    fn a_page_is_self_contained_and_escapes_its_text() {
        let mut t = Table::new(["name", "count"]).numeric([1]);
        t.row(["a<b>", "3"]);
        t.row_html(["<code>x</code>", "4"]);
        let mut p = Page::new("run & report");
        p.subtitle("it's here")
            .heading("Table")
            .table(&t)
            .chart(&BarChart::new("c", "x", vec![("1".into(), 2.0)]).svg())
            .list_html([link("trajectories.jsonl", "trajectories")])
            .preformatted(["f:1: bad <line>"]);
        let html = p.finish();
        assert!(html.starts_with("<!doctype html>") && html.ends_with("</html>\n"));
        assert!(html.contains("<title>run &amp; report</title>"));
        assert!(html.contains("it&#39;s here"));
        assert!(html.contains("<td>a&lt;b&gt;</td><td class=\"n\">3</td>"));
        assert!(html.contains("<td><code>x</code></td>"));
        assert!(html.contains("<a href=\"trajectories.jsonl\">trajectories</a>"));
        assert!(html.contains("bad &lt;line&gt;"));
        assert!(!html.contains("<script") && !html.contains("http"));
    }
}
