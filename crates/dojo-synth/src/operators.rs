//! Bug injection by program transformation: the mutation operators.
//!
//! Each operator looks at the syntax tree of one file ([`crate::python`]) and proposes
//! [`Mutation`]s: one byte span of the original text and its replacement. Nothing else in the
//! file changes, so the diff is as small as the bug (usually one line) and the project's
//! formatting is kept. Only code inside function bodies (and the defaults of their parameters)
//! is mutated: module- and class-level statements mostly run at import time, where a bug breaks
//! every test at once and makes a useless task.
//!
//! The operators follow the procedural modifications SWE-smith reports (operator flips and
//! swaps, off-by-one constants and bounds, removed/negated conditions, removed statements and
//! early returns, swapped arguments, changed defaults, a wrong variable of the same scope).
//! Every mutant is parsed again ([`FileMutations::unparseable`] counts those that do not
//! parse; they are never proposed).
//! Enumeration is deterministic: the same source gives the same mutations in the same order.

use std::collections::BTreeSet;

use tree_sitter::{InputEdit, Node, Point, Tree};

use crate::python;

mod collect;
use collect::Collector;

/// A kind of injected bug. The names are stable: they appear in task ids, provenance and
/// summaries.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    /// A comparison operator flipped: `<`↔`<=`, `>`↔`>=`, `==`↔`!=`, `in`↔`not in`, `is`↔`is not`.
    CompareFlip,
    /// `and`↔`or`.
    BoolFlip,
    /// An arithmetic or bitwise operator swapped (`+`↔`-`, `*`→`/`, `<<`↔`>>`, `+=`↔`-=`, ...).
    ArithFlip,
    /// An integer constant off by one.
    ConstOffByOne,
    /// A slice bound, index or `range` stop off by one.
    BoundOffByOne,
    /// An `if`/`elif`/`while`/conditional-expression condition negated.
    NegateCond,
    /// One operand of `and`/`or` dropped (a condition removed).
    DropOperand,
    /// An `if` block without `else` removed (a dropped branch).
    RemoveIf,
    /// A statement removed (call, assignment, `raise`, `break`, `continue`, `del`).
    RemoveStmt,
    /// An early `return` removed.
    RemoveReturn,
    /// Two adjacent positional arguments of a call swapped.
    SwapArgs,
    /// A parameter default changed (`True`↔`False`, an integer off by one).
    ChangeDefault,
    /// A `not` removed.
    RemoveNot,
    /// A variable reference replaced by another variable of the same function (a parameter or a
    /// local assigned before that point), chosen by the seed.
    WrongVariable,
    /// One function rewritten by a language model with a subtle bug (not enumerated here: the
    /// run asks the model, see `crate::llm`).
    LlmRewrite,
}

impl Operator {
    /// Every operator, in the order ties are broken (and summaries list them).
    pub const ALL: &[Operator] = &[
        Operator::CompareFlip,
        Operator::BoolFlip,
        Operator::ArithFlip,
        Operator::ConstOffByOne,
        Operator::BoundOffByOne,
        Operator::NegateCond,
        Operator::DropOperand,
        Operator::RemoveIf,
        Operator::RemoveStmt,
        Operator::RemoveReturn,
        Operator::SwapArgs,
        Operator::ChangeDefault,
        Operator::RemoveNot,
        Operator::WrongVariable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Operator::CompareFlip => "compare_flip",
            Operator::BoolFlip => "bool_flip",
            Operator::ArithFlip => "arith_flip",
            Operator::ConstOffByOne => "const_off_by_one",
            Operator::BoundOffByOne => "bound_off_by_one",
            Operator::NegateCond => "negate_cond",
            Operator::DropOperand => "drop_operand",
            Operator::RemoveIf => "remove_if",
            Operator::RemoveStmt => "remove_stmt",
            Operator::RemoveReturn => "remove_return",
            Operator::SwapArgs => "swap_args",
            Operator::ChangeDefault => "change_default",
            Operator::RemoveNot => "remove_not",
            Operator::WrongVariable => "wrong_variable",
            Operator::LlmRewrite => "llm_rewrite",
        }
    }

    /// A comma-separated list of operator names (`--operators`); an unknown name is an error
    /// listing the known ones.
    pub fn parse_list(list: &str) -> Result<Vec<Operator>, crate::SynthError> {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                Operator::by_name(s).ok_or_else(|| {
                    let known: Vec<&str> = Operator::ALL.iter().map(|o| o.name()).collect();
                    crate::SynthError::Input(format!(
                        "--operators: unknown operator {s:?} (known: {})",
                        known.join(", ")
                    ))
                })
            })
            .collect()
    }

    /// The procedural operator, or `llm_rewrite`, of this name.
    pub fn by_name(name: &str) -> Option<Operator> {
        Operator::ALL
            .iter()
            .copied()
            .chain([Operator::LlmRewrite])
            .find(|o| o.name() == name)
    }
}

impl std::fmt::Display for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One injected bug: `original` at bytes `start..end` of `file` becomes `replacement`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mutation {
    pub operator: Operator,
    /// Path relative to the project root, `/`-separated.
    pub file: String,
    pub start: usize,
    pub end: usize,
    pub original: String,
    pub replacement: String,
    /// 1-based line of `start`.
    pub line: usize,
    /// The enclosing function, qualified with its classes and outer functions (`Cache.get`).
    pub function: String,
    /// 1-based first line of that function (with `file`, the region duplicates are judged by).
    pub function_line: usize,
    /// The model that wrote the replacement (`llm_rewrite` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl Mutation {
    /// Stable id: the same edit of the same file always has the same id, whatever the seed.
    pub fn id(&self) -> String {
        let h = dojo_cache::sha256_hex(format!(
            "mutation-v1\0{}\0{}\0{}\0{}",
            self.file, self.start, self.end, self.replacement
        ));
        h[..12].to_string()
    }

    /// The file's text with this mutation applied. `src` must be the text it was found in.
    pub fn apply(&self, src: &str) -> String {
        let mut s = String::with_capacity(src.len() + self.replacement.len());
        s.push_str(&src[..self.start]);
        s.push_str(&self.replacement);
        s.push_str(&src[self.end..]);
        s
    }
}

/// The mutations of one file.
#[derive(Debug, Clone, Default)]
pub struct FileMutations {
    /// Every proposal, including those whose mutant does not parse.
    pub candidates: usize,
    /// Mutants that did not parse again (dropped here).
    pub unparseable: usize,
    /// Candidates per operator (before the re-parse check), for the summary.
    pub candidates_by_op: std::collections::BTreeMap<Operator, usize>,
    /// The mutations whose mutant parses, in file order.
    pub mutations: Vec<Mutation>,
}

/// Why a file yields no mutations at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("{file}: does not parse as Python (line {line})")]
    Unparseable { file: String, line: usize },
}

/// Every mutation of `src` (the text of `file`) by the given operators, with seed 0 for the
/// operators that choose (see [`mutations_seeded`]).
pub fn mutations_in(
    file: &str,
    src: &str,
    operators: &[Operator],
) -> Result<FileMutations, SourceError> {
    mutations_seeded(file, src, operators, 0)
}

/// Every mutation of `src` by the given operators. `seed` drives the choices an operator makes
/// among equally good replacements (which other variable `wrong_variable` puts in), by a keyed
/// hash of the seed and the site, so each site still yields one mutation and the same seed the
/// same one.
pub fn mutations_seeded(
    file: &str,
    src: &str,
    operators: &[Operator],
    seed: u64,
) -> Result<FileMutations, SourceError> {
    let parsed = python::parse(src).ok_or_else(|| SourceError::Unparseable {
        file: file.to_string(),
        line: 1,
    })?;
    let root = parsed.tree.root_node();
    if root.has_error() {
        return Err(SourceError::Unparseable {
            file: file.to_string(),
            line: first_error_line(root),
        });
    }
    let mut c = Collector {
        file,
        src,
        ops: operators.iter().copied().collect(),
        scope: Vec::new(),
        funcs: Vec::new(),
        seen: BTreeSet::new(),
        out: Vec::new(),
        seed,
    };
    c.visit(root);
    let mut fm = FileMutations::default();
    for m in c.out {
        fm.candidates += 1;
        *fm.candidates_by_op.entry(m.operator).or_default() += 1;
        if reparses(&parsed.tree, src, &m) {
            fm.mutations.push(m);
        } else {
            fm.unparseable += 1;
        }
    }
    Ok(fm)
}

fn first_error_line(root: Node) -> usize {
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if n.is_error() || n.is_missing() {
            return n.start_position().row + 1;
        }
        let mut cur = n.walk();
        let kids: Vec<Node> = n.children(&mut cur).filter(|k| k.has_error()).collect();
        stack.extend(kids.into_iter().rev());
    }
    root.start_position().row + 1
}

/// The (row, byte column) of byte offset `at` in `text`.
fn point_at(text: &str, at: usize) -> Point {
    let before = &text.as_bytes()[..at];
    let row = before.iter().filter(|&&b| b == b'\n').count();
    let col = at
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
    Point { row, column: col }
}

/// Re-parse check: the mutant parses without errors. Incremental (the old tree, edited), which
/// costs a fraction of a full parse on large files.
fn reparses(tree: &Tree, src: &str, m: &Mutation) -> bool {
    let new = m.apply(src);
    let mut edited = tree.clone();
    edited.edit(&InputEdit {
        start_byte: m.start,
        old_end_byte: m.end,
        new_end_byte: m.start + m.replacement.len(),
        start_position: point_at(src, m.start),
        old_end_position: point_at(src, m.end),
        new_end_position: point_at(&new, m.start + m.replacement.len()),
    });
    let mut p = tree_sitter::Parser::new();
    if p.set_language(&tree_sitter_python::LANGUAGE.into())
        .is_err()
    {
        return false;
    }
    p.parse(&new, Some(&edited))
        .is_some_and(|t| !t.root_node().has_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"import os

LIMIT = 10


class Box:
    """A box."""

    def fits(self, items, strict=False, slack=2):
        """Docstring."""
        if not items:
            return True
        total = 0
        for i in range(len(items)):
            total += items[i]
        if strict and total >= LIMIT:
            raise ValueError("too big")
        ok = total < LIMIT + slack or items[-1] == 0
        return ok if items[:3] else total


def pair(a, b):
    return divmod(a, b)
"#;

    fn muts(ops: &[Operator]) -> Vec<Mutation> {
        mutations_in("box.py", SRC, ops).unwrap().mutations
    }

    fn edits(ops: &[Operator]) -> Vec<String> {
        muts(ops)
            .iter()
            .map(|m| format!("{}:{}->{}", m.line, m.original, m.replacement))
            .collect()
    }

    #[test]
    fn every_mutant_parses_and_changes_one_span() {
        let fm = mutations_in("box.py", SRC, Operator::ALL).unwrap();
        assert!(fm.mutations.len() > 30, "{}", fm.mutations.len());
        for m in &fm.mutations {
            let new = m.apply(SRC);
            assert!(python::parses_cleanly(&new), "{m:?}\n{new}");
            assert_ne!(new, SRC);
            assert_eq!(&SRC[m.start..m.end], m.original);
        }
        // Module-level code (`LIMIT = 10`, the import) is never mutated.
        assert!(
            fm.mutations.iter().all(|m| m.line >= 9),
            "{:?}",
            fm.mutations
        );
        let ids: BTreeSet<String> = fm.mutations.iter().map(Mutation::id).collect();
        assert_eq!(ids.len(), fm.mutations.len(), "ids are unique");
    }

    #[test]
    fn compare_flip() {
        assert_eq!(
            edits(&[Operator::CompareFlip]),
            ["16:>=->>", "18:<-><=", "18:==->!="]
        );
    }

    #[test]
    fn bool_flip_and_drop_operand() {
        assert_eq!(edits(&[Operator::BoolFlip]), ["16:and->or", "18:or->and"]);
        let d = edits(&[Operator::DropOperand]);
        assert!(
            d.contains(&"16:strict and total >= LIMIT->total >= LIMIT".to_string()),
            "{d:?}"
        );
        assert!(
            d.contains(&"16:strict and total >= LIMIT->strict".to_string()),
            "{d:?}"
        );
    }

    #[test]
    fn arith_flip_includes_augmented_assignment() {
        assert_eq!(edits(&[Operator::ArithFlip]), ["15:+=->-=", "18:+->-"]);
    }

    #[test]
    fn constants_bounds_and_defaults() {
        assert_eq!(edits(&[Operator::ConstOffByOne]), ["13:0->1", "18:0->1"]);
        let b = edits(&[Operator::BoundOffByOne]);
        for want in [
            "14:len(items)->len(items) + 1",
            "14:len(items)->len(items) - 1",
            "15:i->i + 1",
            "18:1->2",
            "18:1->0",
            "19:3->4",
            "19:3->2",
        ] {
            assert!(b.contains(&want.to_string()), "{want} not in {b:?}");
        }
        assert_eq!(
            edits(&[Operator::ChangeDefault]),
            ["9:False->True", "9:2->3", "9:2->1"]
        );
        let src = "def f(x):\n    return x * 3 + 0\n";
        let e: Vec<String> = mutations_in("f.py", src, &[Operator::ConstOffByOne])
            .unwrap()
            .mutations
            .iter()
            .map(|m| m.replacement.clone())
            .collect();
        assert_eq!(e, ["4", "2", "1"]);
    }

    #[test]
    fn negate_and_remove_not() {
        let n = edits(&[Operator::NegateCond]);
        assert!(
            n.contains(
                &"16:strict and total >= LIMIT->not (strict and total >= LIMIT)".to_string()
            ),
            "{n:?}"
        );
        assert!(
            n.contains(&"19:items[:3]->not items[:3]".to_string()),
            "{n:?}"
        );
        // `if not items` is not negated again: removing the `not` does that.
        assert_eq!(edits(&[Operator::RemoveNot]), ["11:not items->items"]);
    }

    #[test]
    fn removals_take_whole_lines_or_become_pass() {
        let m = muts(&[Operator::RemoveIf]);
        assert_eq!(m.len(), 2, "{m:?}");
        let new = m[1].apply(SRC);
        assert!(
            !new.contains("raise ValueError") && !new.contains("if strict"),
            "{new}"
        );
        assert!(
            new.contains("            total += items[i]\n        ok = "),
            "{new}"
        );
        let r = muts(&[Operator::RemoveReturn]);
        // `return True` is early (only statement of its block: becomes `pass`); the last
        // `return` of `fits` and `pair` are not early.
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].replacement, "pass");
        let s = edits(&[Operator::RemoveStmt]);
        assert!(
            s.iter().any(|e| e.starts_with("13:        total = 0")),
            "{s:?}"
        );
        // The loop body's only statement becomes `pass`, the docstring is never removed.
        assert!(
            s.contains(&"15:total += items[i]->pass".to_string()),
            "{s:?}"
        );
        assert!(!s.iter().any(|e| e.contains("Docstring")), "{s:?}");
    }

    #[test]
    fn swap_args_keeps_the_separator() {
        assert_eq!(edits(&[Operator::SwapArgs]), ["23:a, b->b, a"]);
        let src = "def f(a, b):\n    return g(a,\n             b, key=1)\n";
        let m = &mutations_in("f.py", src, &[Operator::SwapArgs])
            .unwrap()
            .mutations[0];
        assert_eq!(
            m.apply(src),
            "def f(a, b):\n    return g(b,\n             a, key=1)\n"
        );
    }

    #[test]
    fn not_in_and_is_not_are_single_operators() {
        let src = "def f(a, b):\n    return a not in b or a is not None\n";
        let e: Vec<String> = mutations_in("f.py", src, &[Operator::CompareFlip])
            .unwrap()
            .mutations
            .iter()
            .map(|m| m.apply(src))
            .collect();
        assert_eq!(
            e,
            [
                "def f(a, b):\n    return a in b or a is not None\n",
                "def f(a, b):\n    return a not in b or a is None\n"
            ]
        );
    }

    const SCOPES: &str = r#"import os


def f(a, b, *rest, key=None):
    total = a + b
    for i in range(b):
        total += i * a
    squares = [x * x for x in rest]
    label = os.path.join(key, "x")
    return total if key else squares


class C:
    def g(self, n, m=1):
        return self.h(n) - m
"#;

    fn wrong_vars(seed: u64) -> Vec<String> {
        mutations_seeded("s.py", SCOPES, &[Operator::WrongVariable], seed)
            .unwrap()
            .mutations
            .iter()
            .map(|m| format!("{}:{}->{}", m.line, m.original, m.replacement))
            .collect()
    }

    #[test]
    fn wrong_variable_takes_a_name_bound_before_the_site() {
        let e = wrong_vars(0);
        insta::assert_snapshot!(e.join("\n"));
        // Every site is a read of a parameter or local; the name put in is one bound before it
        // (parameters everywhere, `total` only after its assignment, `i` only inside the loop).
        let fm = mutations_seeded("s.py", SCOPES, &[Operator::WrongVariable], 0).unwrap();
        for m in &fm.mutations {
            let new = m.apply(SCOPES);
            assert!(python::parses_cleanly(&new), "{new}");
            let before = &SCOPES[..m.start];
            let bound_before = match m.function.as_str() {
                "f" => {
                    ["a", "b", "rest", "key"].contains(&m.replacement.as_str())
                        || before.contains(&format!("{} = ", m.replacement))
                        || before.contains(&format!("for {} in", m.replacement))
                }
                _ => ["n", "m"].contains(&m.replacement.as_str()),
            };
            assert!(bound_before, "{m:?}");
        }
        // Never: the comprehension's own `x`, the module `os`, the attribute `path`, `self`,
        // the assignment targets, the augmented target `total` of `total += ...`.
        for e in &e {
            let (_, edit) = e.split_once(':').unwrap();
            let (orig, new) = edit.split_once("->").unwrap();
            for never in ["x", "os", "path", "join", "self", "h"] {
                assert!(orig != never && new != never, "{e}");
            }
        }
        assert!(!e.iter().any(|e| e.starts_with("7:total")), "{e:?}");
    }

    #[test]
    fn wrong_variable_choice_follows_the_seed() {
        let a = wrong_vars(0);
        assert_eq!(a, wrong_vars(0), "same seed, same mutants");
        // Same sites for every seed; with several names to choose from, some seed picks
        // another one.
        let sites = |v: &[String]| -> Vec<String> {
            v.iter()
                .map(|e| e.split("->").next().unwrap().to_string())
                .collect()
        };
        let others: Vec<Vec<String>> = (1..8).map(wrong_vars).collect();
        assert!(others.iter().all(|o| sites(o) == sites(&a)));
        assert!(others.iter().any(|o| *o != a), "{others:?}");
    }

    proptest::proptest! {
        /// Random functions built from statement templates: every mutant parses, touches only
        /// its span, and enumeration is deterministic.
        #[test]
        fn mutants_of_generated_functions_parse(
            stmts in proptest::collection::vec((0usize..8, 0u8..50, "[a-c]"), 1..8),
        ) {
            let mut src = String::from("def f(a, b=1, c=True):\n");
            for (kind, n, v) in &stmts {
                let line = match kind {
                    0 => format!("    if {v} < {n} and not c:\n        return {v}\n"),
                    1 => format!("    {v} = a[{n}:b] + g({v}, {n})\n"),
                    2 => format!("    while {v} >= {n}:\n        {v} -= 1\n"),
                    3 => format!("    for i in range({v}):\n        a = a * {n} if i else a\n"),
                    4 => format!("    x = [{v} for {v} in a if {v} is not None or {v} in b]\n"),
                    5 => format!("    h(a, {v}, key={n})\n"),
                    6 => format!("    if {v}:\n        raise ValueError({n})\n    elif b:\n        pass\n"),
                    _ => format!("    {v} <<= {n} % 3  # comment\n"),
                };
                src.push_str(&line);
            }
            src.push_str("    return a\n");
            proptest::prop_assume!(python::parses_cleanly(&src));
            let fm = mutations_in("g.py", &src, Operator::ALL).unwrap();
            proptest::prop_assert_eq!(fm.unparseable, 0);
            for m in &fm.mutations {
                let new = m.apply(&src);
                proptest::prop_assert!(python::parses_cleanly(&new), "{:?}", m);
                proptest::prop_assert_eq!(&new[..m.start], &src[..m.start]);
                proptest::prop_assert_eq!(
                    &new[m.start + m.replacement.len()..],
                    &src[m.end..]
                );
            }
            let again = mutations_in("g.py", &src, Operator::ALL).unwrap();
            proptest::prop_assert_eq!(again.mutations, fm.mutations);
        }
    }

    #[test]
    fn functions_are_qualified_and_unparseable_files_are_errors() {
        let m = muts(&[Operator::CompareFlip]);
        assert_eq!(m[0].function, "Box.fits");
        assert_eq!(m[0].function_line, 9);
        let e = mutations_in("bad.py", "def f(:\n    pass\n", Operator::ALL).unwrap_err();
        assert!(e.to_string().contains("bad.py"), "{e}");
    }

    #[test]
    fn operator_lists_parse_and_name_the_unknown() {
        assert_eq!(
            Operator::parse_list(" swap_args,llm_rewrite,").unwrap(),
            [Operator::SwapArgs, Operator::LlmRewrite]
        );
        let e = Operator::parse_list("swap_args,nope")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--operators: unknown operator \"nope\" (known: compare_flip, "),
            "{e}"
        );
    }
}
