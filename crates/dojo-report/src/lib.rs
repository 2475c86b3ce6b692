//! # dojo-report: the HTML report every stage writes
//!
//! Pipeline position: beside every stage (rollout, curate, and the training, RL and selection
//! stages after them); each turns its counts into one self-contained `report.html`.
//!
//! A report must open anywhere, offline, years later: one HTML file, no JavaScript, nothing
//! fetched, charts as inline SVG written by hand (a handful of bar and line charts do not justify
//! a plotting stack and its font dependencies). This crate holds what every report shares, so
//! each stage writes only its own content:
//!
//! - [`escape`]: the one escaping function (`& < > " '`), used for every piece of text put into
//!   HTML or SVG, element content and attribute values alike.
//! - [`Page`]: the page skeleton with the shared stylesheet, headings, notes, [`Table`]s, lists,
//!   preformatted text and [`link`]s.
//! - [`chart`]: bar charts (histograms), horizontal stacked bars, grouped bars and line charts
//!   (a loss or reward curve), each an [`Svg`] that goes inline in a page or into its own
//!   `.svg` file.
//! - [`trajectory`]: one page per trajectory (conversation, final diff, grading), which every
//!   report's task rows link to.
//! - [`stats`]: rates with their 95% Wilson intervals, as every report states them.

pub mod chart;
mod page;
pub mod stats;
pub mod trajectory;

pub use chart::{
    BarChart, LineChart, PALETTE, Segment, Series, StackedRow, Svg, grouped_bars, stacked_bars,
};
pub use page::{Align, Page, Table, link};

/// Escapes text for HTML and SVG, in element content and in (double- or single-quoted)
/// attribute values: `&`, `<`, `>`, `"` and `'` become character references.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A number for a label: integers without a fractional part, others with `decimals` digits.
pub fn number(v: f64, decimals: usize) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.decimals$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escapes_every_special_character() {
        assert_eq!(
            escape(r#"<a href="x">Tom & Jerry's</a>"#),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;"
        );
        assert_eq!(escape("plain é 日本"), "plain é 日本");
        assert_eq!(escape("&amp;"), "&amp;amp;");
    }

    #[test]
    fn numbers_drop_a_zero_fraction() {
        assert_eq!(number(3.0, 1), "3");
        assert_eq!(number(2.25, 1), "2.2");
        assert_eq!(number(0.5, 2), "0.50");
    }

    /// Removes the references [`escape`] writes; what is left must hold no `&`.
    fn without_references(s: &str) -> String {
        s.replace("&amp;", "")
            .replace("&lt;", "")
            .replace("&gt;", "")
            .replace("&quot;", "")
            .replace("&#39;", "")
    }

    proptest! {
        #[test]
        fn escaped_text_holds_no_markup(s in any::<String>()) {
            let e = escape(&s);
            for c in ['<', '>', '"', '\''] {
                prop_assert!(!e.contains(c), "{c:?} in {e:?}");
            }
            prop_assert!(!without_references(&e).contains('&'), "raw & in {e:?}");
        }

        #[test]
        fn escaping_is_reversible(s in any::<String>()) {
            let back = escape(&s)
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&#39;", "'")
                .replace("&amp;", "&");
            prop_assert_eq!(back, s);
        }

        #[test]
        fn chart_and_table_text_is_escaped(s in "[<>&\"' a-z]{0,20}") {
            let svg = BarChart::new(&s, &s, vec![(s.clone(), 1.0)]).svg();
            let line = LineChart::new(&s, &s, &s)
                .series(&s, vec![(0.0, 1.0), (1.0, 0.5)])
                .svg();
            let mut t = Table::new([s.as_str()]);
            t.row([s.clone()]);
            for out in [svg.inline(), line.inline(), &t.html()] {
                let text = text_outside_tags(out);
                for c in ['<', '>', '"', '\''] {
                    prop_assert!(!text.contains(c), "{c:?} in {text:?}");
                }
                prop_assert!(!without_references(&text).contains('&'));
            }
        }
    }

    /// The text between tags (element content), for checking that labels were escaped.
    fn text_outside_tags(html: &str) -> String {
        let mut out = String::new();
        let mut in_tag = false;
        for c in html.chars() {
            match c {
                '<' => in_tag = true,
                '>' => in_tag = false,
                c if !in_tag => out.push(c),
                _ => {}
            }
        }
        out
    }
}
