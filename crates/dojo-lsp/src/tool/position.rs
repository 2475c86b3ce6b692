//! Where the agent points: the agent names a symbol and a 1-based line, never a column, so the
//! column is found here (whole words first, the last part of a dotted name), and answers are
//! placed in the symbol that encloses them.

use lsp_types::{DocumentSymbol, DocumentSymbolResponse, Position, Range, SymbolKind};

/// Strip what models add around identifiers: backticks, call parentheses, whitespace.
pub(super) fn clean_symbol(s: &str) -> String {
    let s = s.trim().trim_matches('`').trim();
    let s = s.strip_suffix("()").unwrap_or(s);
    s.to_string()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Byte column of `symbol` on `line`: the first whole-word occurrence, else the first substring
/// occurrence. For dotted names (`self.parse`) the column of the last part, which is what the
/// agent is asking about.
pub(super) fn find_symbol(line: &str, symbol: &str) -> Option<usize> {
    let whole = line.match_indices(symbol).map(|(i, _)| i).find(|&i| {
        let before = line[..i].chars().next_back();
        let after = line[i + symbol.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    });
    let start = whole.or_else(|| line.find(symbol))?;
    // Point at the last dotted part that names something (`self.parse` → `parse`); a symbol
    // with no name in it at all (`.`, `..`) points nowhere.
    let mut offset = 0;
    let mut last = None;
    for part in symbol.split('.') {
        if !part.is_empty() {
            last = Some(offset);
        }
        offset += part.len() + 1;
    }
    Some(start + last?)
}

pub(super) fn contains(r: &Range, p: &Position) -> bool {
    (r.start.line, r.start.character) <= (p.line, p.character)
        && (p.line, p.character) <= (r.end.line, r.end.character)
}

pub(super) struct Sym {
    pub(super) name: String,
    pub(super) kind: SymbolKind,
    pub(super) range: Range,
}

pub(super) fn flatten_symbols(resp: Option<DocumentSymbolResponse>) -> Vec<Sym> {
    fn walk(syms: Vec<DocumentSymbol>, out: &mut Vec<Sym>) {
        for s in syms {
            out.push(Sym {
                name: s.name,
                kind: s.kind,
                range: s.range,
            });
            walk(s.children.unwrap_or_default(), out);
        }
    }
    let mut out = Vec::new();
    match resp {
        None => {}
        Some(DocumentSymbolResponse::Nested(syms)) => walk(syms, &mut out),
        Some(DocumentSymbolResponse::Flat(syms)) => out.extend(syms.into_iter().map(|s| Sym {
            name: s.name,
            kind: s.kind,
            range: s.location.range,
        })),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn finds_whole_words_first() {
        assert_eq!(
            find_symbol("    x = _sympify(a_sympify)", "_sympify"),
            Some(8)
        );
        assert_eq!(find_symbol("sympify(_sympify)", "sympify"), Some(0));
        assert_eq!(find_symbol("ab = b", "b"), Some(5));
        assert_eq!(find_symbol("ab", "b"), Some(1), "substring fallback");
        assert_eq!(find_symbol("x = 1", "y"), None);
    }

    #[test]
    fn dotted_symbols_point_at_the_last_part() {
        assert_eq!(
            find_symbol("        return self.parse(x)", "self.parse"),
            Some(20)
        );
        assert_eq!(clean_symbol(" `foo()` "), "foo");
        // Found by proptest: a symbol without a name must not point past the line.
        assert_eq!(find_symbol(".", "."), None);
        assert_eq!(find_symbol("x = a.", "a."), Some(4));
    }

    proptest! {
        #[test]
        fn found_column_is_a_char_boundary(line in ".{0,40}", sym in "[a-zé_.]{1,5}") {
            if let Some(c) = find_symbol(&line, &sym) {
                prop_assert!(line.is_char_boundary(c));
                prop_assert!(c < line.len());
            }
        }
    }
}
