//! Clipping text to a limit: the one implementation every crate calls.
//!
//! - **Units.** A limit counts [`Unit::Chars`] (Unicode scalar values, what `str::chars`
//!   yields) or [`Unit::Bytes`] (UTF-8 bytes). Either way the cut falls on a char boundary: with
//!   bytes, a multibyte char that straddles the limit is left out whole, so the kept text may
//!   be up to three bytes under the limit. Text within the limit is never cut.
//! - **What is kept.** [`Keep::Head`] the beginning, [`Keep::Tail`] the end, [`Keep::Ends`] both
//!   ends around the cut, `⌊max / 2⌋` units each (so at most `max` in all).
//! - **The marker.** One, counted in the limit's unit: `[… N characters cut]` or
//!   `[… N bytes cut]` (`[… 1 character cut]`, `[… 1 byte cut]` for one), on its own line where
//!   the cut is: after the head, before the tail, between the two ends ([`Cut::marked`],
//!   [`clip`]). A one-line label or quote, where a count would not fit, ends its head with the
//!   marker's `…` alone ([`Cut::ellipsis`]). The kept text alone, for callers that record the
//!   cut elsewhere, is [`Cut::kept`].
//!
//! ```
//! use dojo_rundir::clip::{clip, Keep, Unit};
//! assert_eq!(clip("héllo wörld", 5, Unit::Chars, Keep::Tail), ("[… 6 characters cut]\nwörld".to_string(), true));
//! assert_eq!(clip("ééé", 3, Unit::Bytes, Keep::Head), ("é\n[… 4 bytes cut]".to_string(), true));
//! assert_eq!(clip("short", 10, Unit::Chars, Keep::Head), ("short".to_string(), false));
//! ```

use std::borrow::Cow;

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Unicode scalar values (`str::chars`).
    Chars,
    /// UTF-8 bytes; cuts still fall on char boundaries.
    Bytes,
}

impl Unit {
    /// How long `text` is in this unit.
    pub fn len(self, text: &str) -> usize {
        match self {
            Unit::Chars => text.chars().count(),
            Unit::Bytes => text.len(),
        }
    }

    fn name(self, n: usize) -> &'static str {
        match (self, n) {
            (Unit::Chars, 1) => "character",
            (Unit::Chars, _) => "characters",
            (Unit::Bytes, 1) => "byte",
            (Unit::Bytes, _) => "bytes",
        }
    }
}

/// Which part of a long text survives the cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The first `max` units.
    Head,
    /// The last `max` units.
    Tail,
    /// The first and the last `⌊max / 2⌋` units.
    Ends,
}

/// Where a limit cut a text: the kept parts (slices of it) and how much went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut<'a> {
    /// The kept beginning: the whole text when nothing was cut, empty for [`Keep::Tail`].
    pub head: &'a str,
    /// The kept end: empty when nothing was cut and for [`Keep::Head`].
    pub tail: &'a str,
    /// Units cut out (0: the text was within the limit).
    pub cut: usize,
    pub unit: Unit,
    pub keep: Keep,
}

/// Where `max` units of `text` cut it, keeping `keep`; see the [module docs](self).
pub fn cut(text: &str, max: usize, unit: Unit, keep: Keep) -> Cut<'_> {
    let whole = Cut {
        head: text,
        tail: "",
        cut: 0,
        unit,
        keep,
    };
    let (head, tail) = match unit {
        Unit::Bytes => {
            if text.len() <= max {
                return whole;
            }
            match keep {
                Keep::Head => (&text[..floor(text, max)], ""),
                Keep::Tail => ("", &text[ceil(text, text.len() - max)..]),
                Keep::Ends => {
                    let half = max / 2;
                    (
                        &text[..floor(text, half)],
                        &text[ceil(text, text.len() - half)..],
                    )
                }
            }
        }
        Unit::Chars => {
            // Walks the text once when it is within the limit or the head alone is kept.
            let Some((end, _)) = text.char_indices().nth(max) else {
                return whole;
            };
            let total = || max + text[end..].chars().count();
            match keep {
                Keep::Head => (&text[..end], ""),
                Keep::Tail => ("", &text[nth_boundary(text, total() - max)..]),
                Keep::Ends => {
                    let half = max / 2;
                    (
                        &text[..nth_boundary(text, half)],
                        &text[nth_boundary(text, total() - half)..],
                    )
                }
            }
        }
    };
    Cut {
        head,
        tail,
        cut: unit.len(text) - unit.len(head) - unit.len(tail),
        unit,
        keep,
    }
}

/// `text` within `max` units, the cut marked by the one marker on its own line, and whether
/// anything was cut: [`cut`] then [`Cut::marked`].
pub fn clip(text: &str, max: usize, unit: Unit, keep: Keep) -> (String, bool) {
    let c = cut(text, max, unit, keep);
    (c.marked(), c.is_cut())
}

/// The one marker for `n` units cut, alone: `[… N characters cut]` or `[… N bytes cut]`. For
/// a cut made elsewhere (a byte stream kept head and tail as it arrived, without a `str`).
pub fn marker(n: usize, unit: Unit) -> String {
    format!("[… {n} {} cut]", unit.name(n))
}

/// The first `max` units of `text`, unmarked (callers that say elsewhere that it was cut).
pub fn head(text: &str, max: usize, unit: Unit) -> &str {
    cut(text, max, unit, Keep::Head).head
}

impl<'a> Cut<'a> {
    pub fn is_cut(&self) -> bool {
        self.cut > 0
    }

    /// The marker alone: `[… N characters cut]` or `[… N bytes cut]`.
    pub fn marker(&self) -> String {
        marker(self.cut, self.unit)
    }

    /// The kept text, unmarked: the head and the tail joined (only [`Keep::Ends`] allocates).
    pub fn kept(&self) -> Cow<'a, str> {
        if self.tail.is_empty() {
            Cow::Borrowed(self.head)
        } else if self.head.is_empty() {
            Cow::Borrowed(self.tail)
        } else {
            Cow::Owned(format!("{}{}", self.head, self.tail))
        }
    }

    /// The kept text with [`Cut::marker`] on its own line where the cut is; the text itself
    /// when nothing was cut.
    pub fn marked(&self) -> String {
        self.marked_with(&self.marker())
    }

    /// The kept text with `mark` placed as [`Cut::marked`] places the marker. Only for a
    /// marker a format outside this project fixes (R2E's tool observations).
    pub fn marked_with(&self, mark: &str) -> String {
        if !self.is_cut() {
            return self.head.to_string();
        }
        match self.keep {
            Keep::Head => format!("{}\n{mark}", self.head),
            Keep::Tail => format!("{mark}\n{}", self.tail),
            Keep::Ends => format!("{}\n{mark}\n{}", self.head, self.tail),
        }
    }

    /// The short form for one-line labels and quotes: `…` where the cut is, no count and no
    /// line break; the text itself when nothing was cut.
    pub fn ellipsis(&self) -> String {
        if !self.is_cut() {
            return self.head.to_string();
        }
        format!("{}…{}", self.head, self.tail)
    }
}

/// The largest char boundary at or below `i` (`i < text.len()`).
fn floor(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest char boundary at or above `i` (`i <= text.len()`).
fn ceil(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The byte offset of char `n` (`text.len()` past the end).
fn nth_boundary(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(text: &str, max: usize, unit: Unit, keep: Keep) -> (String, bool) {
        clip(text, max, unit, keep)
    }

    #[test]
    fn nothing_is_cut_within_the_limit() {
        for unit in [Unit::Chars, Unit::Bytes] {
            for keep in [Keep::Head, Keep::Tail, Keep::Ends] {
                assert_eq!(c("héllo", 6, unit, keep), ("héllo".into(), false));
                assert_eq!(c("", 0, unit, keep), ("".into(), false));
            }
        }
        assert_eq!(
            c("héllo", 5, Unit::Chars, Keep::Head),
            ("héllo".into(), false)
        );
        assert_eq!(
            c("héllo", 5, Unit::Bytes, Keep::Head),
            ("héll\n[… 1 byte cut]".into(), true)
        );
    }

    #[test]
    fn chars_keep_the_head_the_tail_or_both_ends() {
        let t = "héllo wörld";
        assert_eq!(
            c(t, 5, Unit::Chars, Keep::Head),
            ("héllo\n[… 6 characters cut]".into(), true)
        );
        assert_eq!(
            c(t, 5, Unit::Chars, Keep::Tail),
            ("[… 6 characters cut]\nwörld".into(), true)
        );
        assert_eq!(
            c(t, 6, Unit::Chars, Keep::Ends),
            ("hél\n[… 5 characters cut]\nrld".into(), true)
        );
        assert_eq!(
            c(t, 10, Unit::Chars, Keep::Head),
            ("héllo wörl\n[… 1 character cut]".into(), true)
        );
        assert_eq!(
            c("ab", 0, Unit::Chars, Keep::Tail),
            ("[… 2 characters cut]\n".into(), true)
        );
    }

    #[test]
    fn bytes_never_split_a_char() {
        // "é" and "ö" are two bytes each, "😀" four.
        assert_eq!(
            c("ééé", 3, Unit::Bytes, Keep::Head),
            ("é\n[… 4 bytes cut]".into(), true)
        );
        assert_eq!(
            c("ééé", 3, Unit::Bytes, Keep::Tail),
            ("[… 4 bytes cut]\né".into(), true)
        );
        assert_eq!(
            c("a😀b😀c", 7, Unit::Bytes, Keep::Ends),
            ("a\n[… 9 bytes cut]\nc".into(), true)
        );
        let x = cut("😀", 3, Unit::Bytes, Keep::Head);
        assert_eq!((x.head, x.cut), ("", 4));
    }

    #[test]
    fn the_short_form_and_the_kept_text() {
        let x = cut("héllo wörld", 4, Unit::Chars, Keep::Ends);
        assert_eq!(x.ellipsis(), "hé…ld");
        assert_eq!(x.kept(), "héld");
        assert_eq!(x.marked_with("<cut>"), "hé\n<cut>\nld");
        let x = cut("héllo", 3, Unit::Chars, Keep::Head);
        assert_eq!(x.ellipsis(), "hél…");
        assert_eq!(cut("héllo", 9, Unit::Chars, Keep::Head).ellipsis(), "héllo");
        assert_eq!(head("héllo", 2, Unit::Chars), "hé");
        assert_eq!(head("héllo", 2, Unit::Bytes), "h");
        assert_eq!(marker(1, Unit::Bytes), "[… 1 byte cut]");
    }

    fn units() -> impl Strategy<Value = Unit> {
        prop_oneof![Just(Unit::Chars), Just(Unit::Bytes)]
    }

    fn keeps() -> impl Strategy<Value = Keep> {
        prop_oneof![Just(Keep::Head), Just(Keep::Tail), Just(Keep::Ends)]
    }

    proptest! {
        #[test]
        fn cuts_fall_on_chars_and_add_up(
            text in "[aé😀\n]{0,40}",
            max in 0usize..60,
            unit in units(),
            keep in keeps(),
        ) {
            let x = cut(&text, max, unit, keep);
            prop_assert!(text.is_char_boundary(x.head.len()));
            prop_assert!(text.is_char_boundary(text.len() - x.tail.len()));
            let len = unit.len(&text);
            prop_assert_eq!(x.is_cut(), len > max);
            if len <= max {
                prop_assert_eq!(x.head, text.as_str());
                prop_assert_eq!(x.tail, "");
                prop_assert_eq!(x.marked(), text.clone());
            } else {
                prop_assert!(text.starts_with(x.head) && text.ends_with(x.tail));
                prop_assert!(x.head.len() + x.tail.len() <= text.len());
                prop_assert_eq!(unit.len(x.head) + unit.len(x.tail) + x.cut, len);
                let (h, t) = (unit.len(x.head), unit.len(x.tail));
                match keep {
                    Keep::Head => prop_assert!(h <= max && max - h < 4 && t == 0),
                    Keep::Tail => prop_assert!(t <= max && max - t < 4 && h == 0),
                    Keep::Ends => prop_assert!(h <= max / 2 && t <= max / 2),
                }
                if unit == Unit::Chars {
                    // Chars are exact.
                    prop_assert_eq!(h + t, if keep == Keep::Ends { max / 2 * 2 } else { max });
                }
                prop_assert!(x.marked().contains(&x.marker()));
            }
        }
    }
}
