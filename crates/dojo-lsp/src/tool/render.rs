//! Text helpers the observations are written with: numbered source lines, symbol outlines, call
//! lists, hover text, and the caps that keep an observation within the model's context.

use lsp_types::{
    CallHierarchyItem, DocumentSymbol, HoverContents, MarkedString, Range, SymbolKind,
};

/// Output caps: observations go into the model's context.
pub(super) const MAX_DEF_LOCATIONS: usize = 5;
pub(super) const MAX_SOURCE_LINES: usize = 80;
pub(super) const MAX_REFERENCES: usize = 200;
pub(super) const MAX_SYMBOL_LINES: usize = 300;
pub(super) const MAX_WORKSPACE_FILES: usize = 100;
pub(super) const MAX_WORKSPACE_SYMBOLS: usize = 300;
pub(super) const MAX_CALLS: usize = 100;
pub(super) const MAX_HOVER_CHARS: usize = 4000;

pub(super) fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Lines `first..=last` (0-based) with 1-based numbers.
pub(super) fn numbered(lines: &[&str], first: usize, last: usize) -> String {
    let width = (last + 1).to_string().len().max(4);
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate().take(last + 1).skip(first) {
        out.push_str(&format!("{:>width$} | {}\n", i + 1, l.trim_end()));
    }
    out
}

pub(super) fn outline(syms: &[DocumentSymbol], depth: usize, out: &mut Vec<String>) {
    let mut sorted: Vec<&DocumentSymbol> = syms.iter().collect();
    sorted.sort_by_key(|s| {
        (
            s.selection_range.start.line,
            s.selection_range.start.character,
        )
    });
    for s in sorted {
        out.push(format!(
            "{}{}: {} ({})",
            "  ".repeat(depth),
            s.selection_range.start.line + 1,
            s.name,
            kind_name(s.kind)
        ));
        if let Some(children) = &s.children {
            outline(children, depth + 1, out);
        }
    }
}

/// One side of a call hierarchy, sorted and capped.
pub(super) fn calls_section(
    out: &mut String,
    title: &str,
    noun: &str,
    mut calls: Vec<(String, String)>,
) {
    calls.sort();
    out.push_str(&format!("{title} ({}):\n", calls.len()));
    if calls.is_empty() {
        out.push_str("  (none found)\n");
    }
    for (path, l) in calls.iter().take(MAX_CALLS) {
        out.push_str(&format!("  - {path}: {l}\n"));
    }
    if calls.len() > MAX_CALLS {
        out.push_str(&format!(
            "  [... {} more {noun} not shown]\n",
            calls.len() - MAX_CALLS
        ));
    }
}

pub(super) fn call_line(item: &CallHierarchyItem, ranges: &[Range]) -> String {
    let mut lines: Vec<String> = ranges
        .iter()
        .map(|r| format!("{}:{}", r.start.line + 1, r.start.character + 1))
        .collect();
    lines.dedup();
    format!(
        "{} `{}` (line {}), call sites at {}",
        kind_name(item.kind).to_lowercase(),
        item.name,
        item.selection_range.start.line + 1,
        if lines.is_empty() {
            "-".to_string()
        } else {
            lines.join(", ")
        }
    )
}

pub(super) fn hover_text(c: HoverContents) -> String {
    fn marked(m: MarkedString) -> String {
        match m {
            MarkedString::String(s) => s,
            MarkedString::LanguageString(ls) => format!("```{}\n{}\n```", ls.language, ls.value),
        }
    }
    match c {
        HoverContents::Scalar(m) => marked(m),
        HoverContents::Array(ms) => ms.into_iter().map(marked).collect::<Vec<_>>().join("\n\n"),
        HoverContents::Markup(m) => m.value,
    }
}

/// Readable names of LSP symbol kinds.
pub fn kind_name(k: SymbolKind) -> &'static str {
    const NAMES: [&str; 26] = [
        "File",
        "Module",
        "Namespace",
        "Package",
        "Class",
        "Method",
        "Property",
        "Field",
        "Constructor",
        "Enum",
        "Interface",
        "Function",
        "Variable",
        "Constant",
        "String",
        "Number",
        "Boolean",
        "Array",
        "Object",
        "Key",
        "Null",
        "EnumMember",
        "Struct",
        "Event",
        "Operator",
        "TypeParameter",
    ];
    let n = serde_json::to_value(k)
        .ok()
        .and_then(|v| v.as_u64())
        .unwrap_or(0) as usize;
    NAMES.get(n.wrapping_sub(1)).copied().unwrap_or("Symbol")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names() {
        assert_eq!(kind_name(SymbolKind::FUNCTION), "Function");
        assert_eq!(kind_name(SymbolKind::TYPE_PARAMETER), "TypeParameter");
        assert_eq!(kind_name(SymbolKind::FILE), "File");
    }

    #[test]
    fn numbered_lines_are_one_based() {
        let lines = ["a", "b", "c"];
        assert_eq!(numbered(&lines, 1, 2), "   2 | b\n   3 | c\n");
    }
}
