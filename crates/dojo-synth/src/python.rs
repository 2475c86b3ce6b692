//! Python source through tree-sitter: a concrete syntax tree with a byte span for every token,
//! operators included, so a mutation is one span replaced and every other byte of the file (its
//! formatting, comments, quoting) stays as it was.
//!
//! Why tree-sitter rather than Python's own `ast`: `ast` gives no positions for operator tokens
//! (`ast.Compare.ops`, `ast.BinOp.op` carry none), so flipping `<` to `<=` would need a second
//! pass over `tokenize`; it also needs an interpreter per parse. tree-sitter-python is a full
//! Python 3 grammar, runs in-process and deterministically, and marks syntax errors as `ERROR` /
//! missing nodes, which is the re-parse check every mutant goes through.

use tree_sitter::{Parser, Tree};

/// A parsed file: its text and tree.
pub struct Parsed {
    pub src: String,
    pub tree: Tree,
}

fn parser() -> Parser {
    let mut p = Parser::new();
    // The grammar is compiled into this crate, against the tree-sitter ABI it was generated
    // for; a mismatch is a build problem, caught by every test that parses.
    p.set_language(&tree_sitter_python::LANGUAGE.into())
        .expect("tree-sitter-python grammar matches the tree-sitter ABI");
    p
}

/// Parse `src`; `None` only when tree-sitter gives up (it does not on any input it is given
/// without a timeout, but the API says it may).
pub fn parse(src: &str) -> Option<Parsed> {
    let tree = parser().parse(src, None)?;
    Some(Parsed {
        src: src.to_string(),
        tree,
    })
}

/// True when `src` parses without any error or missing node.
pub fn parses_cleanly(src: &str) -> bool {
    parser()
        .parse(src, None)
        .is_some_and(|t| !t.root_node().has_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_and_invalid_python() {
        assert!(parses_cleanly("def f(x):\n    return x < 1\n"));
        assert!(parses_cleanly("match x:\n    case 1:\n        pass\n"));
        assert!(!parses_cleanly("def f(x):\n    return x <\n"));
        assert!(!parses_cleanly("def f(x:\n    pass\n"));
        // tree-sitter is lenient about some indentation errors (`if x:\npass`); the operators
        // never change indentation, so the check they need is the one above.
    }
}
