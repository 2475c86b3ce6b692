//! The operators' walk over a file's syntax tree: [`Collector`] visits function bodies (and
//! their parameters' defaults) and proposes each operator's mutations at the nodes it applies
//! to, in tree order, deduplicated by span and replacement.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::{Mutation, Operator};

pub(super) struct Collector<'a> {
    pub(super) file: &'a str,
    pub(super) src: &'a str,
    pub(super) ops: BTreeSet<Operator>,
    /// Names of the enclosing classes and functions.
    pub(super) scope: Vec<String>,
    /// Enclosing functions: (qualified name, first line).
    pub(super) funcs: Vec<(String, usize)>,
    pub(super) seen: BTreeSet<(usize, usize, String)>,
    pub(super) out: Vec<Mutation>,
    pub(super) seed: u64,
}

fn is_comment(n: &Node) -> bool {
    n.kind() == "comment"
}

fn named_children<'t>(n: Node<'t>) -> Vec<Node<'t>> {
    let mut cur = n.walk();
    n.named_children(&mut cur)
        .filter(|k| !is_comment(k))
        .collect()
}

fn children<'t>(n: Node<'t>) -> Vec<Node<'t>> {
    let mut cur = n.walk();
    n.children(&mut cur).collect()
}

fn is_string(n: &Node) -> bool {
    matches!(n.kind(), "string" | "concatenated_string")
}

/// Expressions that can take `+ 1` or a `not ` prefix without parentheses.
fn binds_tightly(n: &Node) -> bool {
    matches!(
        n.kind(),
        "identifier"
            | "attribute"
            | "call"
            | "subscript"
            | "integer"
            | "float"
            | "parenthesized_expression"
            | "true"
            | "false"
            | "none"
            | "list"
            | "tuple"
            | "dictionary"
            | "set"
            | "unary_operator"
    ) || (n.kind() == "binary_operator"
        && n.child_by_field_name("operator")
            .is_some_and(|o| matches!(o.kind(), "+" | "-" | "*" | "/" | "//" | "%" | "**" | "@")))
}

fn flip_compare(op: &str) -> Option<&'static str> {
    // "not in" / "is not" are single tokens whose text may hold more than one space.
    let norm: String = op.split_whitespace().collect::<Vec<_>>().join(" ");
    Some(match norm.as_str() {
        "<" => "<=",
        "<=" => "<",
        ">" => ">=",
        ">=" => ">",
        "==" => "!=",
        "!=" => "==",
        "in" => "not in",
        "not in" => "in",
        "is" => "is not",
        "is not" => "is",
        _ => return None,
    })
}

fn flip_arith(op: &str) -> Option<&'static str> {
    Some(match op {
        "+" => "-",
        "-" => "+",
        "*" => "/",
        "/" => "*",
        "//" => "/",
        "%" => "//",
        "**" => "*",
        "<<" => ">>",
        ">>" => "<<",
        "&" => "|",
        "|" => "&",
        "^" => "&",
        "+=" => "-=",
        "-=" => "+=",
        "*=" => "/=",
        "/=" => "*=",
        "//=" => "/=",
        "|=" => "&=",
        "&=" => "|=",
        "<<=" => ">>=",
        ">>=" => "<<=",
        _ => return None,
    })
}

/// A plain decimal literal's value (no underscores, no leading zeros, no suffix).
fn decimal(text: &str) -> Option<u64> {
    if text.is_empty()
        || !text.bytes().all(|b| b.is_ascii_digit())
        || (text.len() > 1 && text.starts_with('0'))
    {
        return None;
    }
    text.parse().ok()
}

impl<'a> Collector<'a> {
    fn text(&self, n: &Node) -> &'a str {
        &self.src[n.start_byte()..n.end_byte()]
    }

    fn push(&mut self, op: Operator, start: usize, end: usize, replacement: String) {
        if !self.ops.contains(&op) || self.src[start..end] == replacement {
            return;
        }
        let Some((function, function_line)) = self.funcs.last().cloned() else {
            return;
        };
        if !self.seen.insert((start, end, replacement.clone())) {
            return;
        }
        self.out.push(Mutation {
            operator: op,
            file: self.file.to_string(),
            start,
            end,
            original: self.src[start..end].to_string(),
            replacement,
            line: self.src[..start].matches('\n').count() + 1,
            function,
            function_line,
            model: None,
        });
    }

    pub(super) fn visit(&mut self, n: Node<'a>) {
        match n.kind() {
            "class_definition" => {
                let name = n
                    .child_by_field_name("name")
                    .map_or("?", |x| self.text(&x))
                    .to_string();
                self.scope.push(name);
                self.visit_children(n);
                self.scope.pop();
                return;
            }
            "function_definition" => {
                let name = n
                    .child_by_field_name("name")
                    .map_or("?", |x| self.text(&x))
                    .to_string();
                self.scope.push(name);
                self.funcs
                    .push((self.scope.join("."), n.start_position().row + 1));
                if self.ops.contains(&Operator::WrongVariable) {
                    self.wrong_variable(n);
                }
                self.visit_children(n);
                self.funcs.pop();
                self.scope.pop();
                return;
            }
            "string" | "concatenated_string" | "comment" => return,
            _ => {}
        }
        if !self.funcs.is_empty() {
            self.mutate(n);
        }
        self.visit_children(n);
    }

    fn visit_children(&mut self, n: Node<'a>) {
        for k in children(n) {
            self.visit(k);
        }
    }

    fn mutate(&mut self, n: Node<'a>) {
        match n.kind() {
            "comparison_operator" => self.comparison(n),
            "boolean_operator" => self.boolean(n),
            "binary_operator" | "augmented_assignment" => self.arithmetic(n),
            "integer" => self.integer(n),
            "slice" => {
                for k in named_children(n) {
                    if k.kind() != "integer" && !is_negative_int(&k) {
                        self.bump(k, Operator::BoundOffByOne);
                    }
                }
            }
            "subscript" => {
                let idx: Vec<Node> = {
                    let mut cur = n.walk();
                    n.children_by_field_name("subscript", &mut cur).collect()
                };
                if let [one] = idx.as_slice()
                    && one.kind() == "identifier"
                {
                    self.bump(*one, Operator::BoundOffByOne);
                }
            }
            "call" => self.call(n),
            "if_statement" | "elif_clause" | "while_statement" => {
                if let Some(c) = n.child_by_field_name("condition") {
                    self.negate(c);
                }
                if n.kind() == "if_statement" && n.child_by_field_name("alternative").is_none() {
                    self.remove_statement(n, Operator::RemoveIf);
                }
            }
            "conditional_expression" => {
                if let Some(c) = named_children(n).get(1) {
                    self.negate(*c);
                }
            }
            "not_operator" => {
                if let Some(a) = n.child_by_field_name("argument") {
                    self.push(
                        Operator::RemoveNot,
                        n.start_byte(),
                        n.end_byte(),
                        self.text(&a).into(),
                    );
                }
            }
            "return_statement" if !self.is_last_in_function(n) => {
                self.remove_statement(n, Operator::RemoveReturn);
            }
            "expression_statement" => {
                let kids = named_children(n);
                let trivial =
                    matches!(kids.as_slice(), [k] if is_string(k) || k.kind() == "ellipsis");
                if !trivial {
                    self.remove_statement(n, Operator::RemoveStmt);
                }
            }
            "raise_statement" | "break_statement" | "continue_statement" | "delete_statement" => {
                self.remove_statement(n, Operator::RemoveStmt)
            }
            "default_parameter" | "typed_default_parameter" => self.default_value(n),
            _ => {}
        }
    }

    /// `compare_flip`: each comparison operator of `n` replaced by its flip.
    fn comparison(&mut self, n: Node<'a>) {
        for k in children(n).into_iter().filter(|k| !k.is_named()) {
            if let Some(r) = flip_compare(self.text(&k)) {
                self.push(
                    Operator::CompareFlip,
                    k.start_byte(),
                    k.end_byte(),
                    r.into(),
                );
            }
        }
    }

    /// `bool_flip` (`and` ↔ `or`) and `drop_operand` (the expression becomes one side).
    fn boolean(&mut self, n: Node<'a>) {
        let (Some(op), Some(l), Some(r)) = (
            n.child_by_field_name("operator"),
            n.child_by_field_name("left"),
            n.child_by_field_name("right"),
        ) else {
            return;
        };
        let flipped = if op.kind() == "and" { "or" } else { "and" };
        self.push(
            Operator::BoolFlip,
            op.start_byte(),
            op.end_byte(),
            flipped.into(),
        );
        let (s, e) = (n.start_byte(), n.end_byte());
        self.push(Operator::DropOperand, s, e, self.text(&l).into());
        self.push(Operator::DropOperand, s, e, self.text(&r).into());
    }

    /// `arith_flip` on an arithmetic operator (binary or augmented assignment).
    fn arithmetic(&mut self, n: Node<'a>) {
        let Some(op) = n.child_by_field_name("operator") else {
            return;
        };
        let operands = [
            n.child_by_field_name("left"),
            n.child_by_field_name("right"),
        ];
        // `"a" + b`, `"%s" % x`, `[0] * n`: string/sequence operations, not arithmetic.
        if operands
            .iter()
            .flatten()
            .any(|o| is_string(o) || matches!(o.kind(), "list" | "tuple"))
        {
            return;
        }
        if let Some(r) = flip_arith(op.kind()) {
            self.push(
                Operator::ArithFlip,
                op.start_byte(),
                op.end_byte(),
                r.into(),
            );
        }
    }

    /// `change_default` on a boolean default value (integers: by the integer rule).
    fn default_value(&mut self, n: Node<'a>) {
        let Some(v) = n.child_by_field_name("value") else {
            return;
        };
        let (s, e) = (v.start_byte(), v.end_byte());
        match v.kind() {
            "true" => self.push(Operator::ChangeDefault, s, e, "False".into()),
            "false" => self.push(Operator::ChangeDefault, s, e, "True".into()),
            _ => {}
        }
    }

    /// `wrong_variable` for function `f`: each read of a parameter or local becomes another
    /// parameter or local of the same function that is bound before that point (one per site,
    /// chosen by the seed). Nested functions, classes, lambdas and comprehensions are scopes of
    /// their own and left to their own visit.
    fn wrong_variable(&mut self, f: Node<'a>) {
        let (Some(params), Some(body)) = (
            f.child_by_field_name("parameters"),
            f.child_by_field_name("body"),
        ) else {
            return;
        };
        let mut bound: Vec<(&'a str, usize)> = Vec::new();
        for p in named_children(params) {
            let id = match p.kind() {
                "identifier" => Some(p),
                "default_parameter" | "typed_default_parameter" => p.child_by_field_name("name"),
                "typed_parameter" | "list_splat_pattern" | "dictionary_splat_pattern" => {
                    named_children(p)
                        .into_iter()
                        .find(|k| k.kind() == "identifier")
                }
                _ => None,
            };
            if let Some(id) = id {
                bound.push((self.text(&id), body.start_byte()));
            }
        }
        let mut reads = Vec::new();
        let mut stack = vec![body];
        while let Some(n) = stack.pop() {
            for k in children(n).into_iter().rev() {
                if opens_scope(k.kind()) || is_comment(&k) || is_string(&k) {
                    continue;
                }
                if k.kind() != "identifier" {
                    stack.push(k);
                    continue;
                }
                match identifier_use(&k) {
                    Use::Load => reads.push(k),
                    Use::Store(at) => bound.push((self.text(&k), at)),
                    Use::Other => {}
                }
            }
        }
        reads.sort_by_key(|r| r.start_byte());
        for r in reads {
            let name = self.text(&r);
            if RECEIVERS.contains(&name) || !bound.iter().any(|(b, _)| *b == name) {
                continue; // a global, builtin or import: not a variable of this scope
            }
            let mut others: Vec<&str> = bound
                .iter()
                .filter(|(b, at)| *at <= r.start_byte() && *b != name && !RECEIVERS.contains(b))
                .map(|(b, _)| *b)
                .collect();
            others.sort_unstable();
            others.dedup();
            if others.is_empty() {
                continue;
            }
            let h = dojo_cache::sha256_hex(format!(
                "wrong-variable-v1\0{}\0{}\0{}",
                self.seed,
                self.file,
                r.start_byte()
            ));
            let pick = u64::from_str_radix(&h[..12], 16).unwrap_or(0) as usize % others.len();
            self.push(
                Operator::WrongVariable,
                r.start_byte(),
                r.end_byte(),
                others[pick].to_string(),
            );
        }
    }

    /// `x` → `x + 1` and `x - 1` (parenthesised when needed).
    fn bump(&mut self, k: Node, op: Operator) {
        let t = self.text(&k);
        let t = if binds_tightly(&k) {
            t.to_string()
        } else {
            format!("({t})")
        };
        for d in [" + 1", " - 1"] {
            self.push(op, k.start_byte(), k.end_byte(), format!("{t}{d}"));
        }
    }

    fn integer(&mut self, n: Node) {
        let Some(v) = decimal(self.text(&n)) else {
            return;
        };
        // Climb over a unary minus: `x[-1]` is a bound too.
        let mut at = n;
        if let Some(p) = n.parent()
            && p.kind() == "unary_operator"
        {
            at = p;
        }
        let parent = at.parent();
        let op = match parent {
            Some(p) if p.kind() == "slice" => Operator::BoundOffByOne,
            Some(p)
                if p.kind() == "subscript"
                    && p.child_by_field_name("value")
                        .is_none_or(|v| v.id() != at.id()) =>
            {
                Operator::BoundOffByOne
            }
            Some(p)
                if p.kind() == "argument_list"
                    && p.parent().is_some_and(|c| {
                        c.kind() == "call"
                            && c.child_by_field_name("function")
                                .is_some_and(|f| self.text(&f) == "range")
                    }) =>
            {
                Operator::BoundOffByOne
            }
            Some(p) if matches!(p.kind(), "default_parameter" | "typed_default_parameter") => {
                Operator::ChangeDefault
            }
            _ => Operator::ConstOffByOne,
        };
        let (s, e) = (n.start_byte(), n.end_byte());
        self.push(op, s, e, (v + 1).to_string());
        if v > 0 {
            self.push(op, s, e, (v - 1).to_string());
        }
    }

    fn call(&mut self, n: Node) {
        let Some(args) = n.child_by_field_name("arguments") else {
            return;
        };
        if args.kind() != "argument_list" {
            return;
        }
        let kids = named_children(args);
        let positional = |k: &Node| {
            !matches!(
                k.kind(),
                "keyword_argument" | "list_splat" | "dictionary_splat"
            )
        };
        for w in kids.windows(2) {
            let (a, b) = (w[0], w[1]);
            if positional(&a) && positional(&b) && self.text(&a) != self.text(&b) {
                let sep = &self.src[a.end_byte()..b.start_byte()];
                let r = format!("{}{sep}{}", self.text(&b), self.text(&a));
                self.push(Operator::SwapArgs, a.start_byte(), b.end_byte(), r);
            }
        }
        // `range(stop)` / `range(start, stop[, step])`: the stop bound, when not a literal (the
        // integer rule handles literals).
        let is_range = n
            .child_by_field_name("function")
            .is_some_and(|f| self.text(&f) == "range");
        if is_range && kids.iter().all(positional) {
            let stop = match kids.len() {
                1 => kids.first(),
                2 | 3 => kids.get(1),
                _ => None,
            };
            if let Some(s) = stop
                && s.kind() != "integer"
                && !is_negative_int(s)
            {
                self.bump(*s, Operator::BoundOffByOne);
            }
        }
    }

    fn negate(&mut self, c: Node) {
        if c.kind() == "not_operator" {
            return; // RemoveNot covers it
        }
        let t = self.text(&c);
        let r = if binds_tightly(&c) || c.kind() == "comparison_operator" {
            format!("not {t}")
        } else {
            format!("not ({t})")
        };
        self.push(Operator::NegateCond, c.start_byte(), c.end_byte(), r);
    }

    /// The last statement of its function's own body (a final `return` is not an early one).
    fn is_last_in_function(&self, n: Node) -> bool {
        let Some(block) = n.parent() else {
            return false;
        };
        let in_body = block.kind() == "block"
            && block
                .parent()
                .is_some_and(|f| f.kind() == "function_definition");
        in_body
            && named_children(block)
                .last()
                .is_some_and(|l| l.id() == n.id())
    }

    /// Remove statement `n`: its whole lines when it has them to itself, else nothing; the only
    /// statement of a block becomes `pass` instead.
    fn remove_statement(&mut self, n: Node, op: Operator) {
        let Some(block) = n.parent() else {
            return;
        };
        if block.kind() != "block" {
            return;
        }
        let (s, e) = (n.start_byte(), n.end_byte());
        let bytes = self.src.as_bytes();
        let line_start = bytes[..s]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let line_end = bytes[e..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| e + i + 1);
        let prefix_blank = self.src[line_start..s].trim().is_empty();
        let rest = self.src[e..line_end].trim();
        let suffix_blank = rest.is_empty() || rest.starts_with('#');
        let siblings = named_children(block);
        if siblings.len() == 1 {
            // The block's only statement: `pass` keeps it a block.
            self.push(op, s, e, "pass".into());
        } else if prefix_blank && suffix_blank {
            self.push(op, line_start, line_end, String::new());
        }
    }
}

/// Nodes with a scope of their own: their names are not the enclosing function's, so
/// `wrong_variable` neither takes names from them nor puts names into them.
fn opens_scope(kind: &str) -> bool {
    matches!(
        kind,
        "function_definition"
            | "class_definition"
            | "lambda"
            | "list_comprehension"
            | "set_comprehension"
            | "dictionary_comprehension"
            | "generator_expression"
    )
}

/// Method receivers are never swapped in or out: `other.attr` for `self.attr` is an
/// `AttributeError` on the first line, not a subtle bug.
const RECEIVERS: &[&str] = &["self", "cls"];

fn is_field(parent: &Node, field: &str, n: &Node) -> bool {
    parent
        .child_by_field_name(field)
        .is_some_and(|f| f.id() == n.id())
}

/// How an identifier inside a function body is used.
enum Use {
    /// Read: a candidate site for `wrong_variable`.
    Load,
    /// Bound (assigned, a loop target, ...) from this byte on.
    Store(usize),
    /// Neither a plain read nor a binding we track (attribute names, keywords, imports,
    /// annotations, `global`, augmented-assignment targets, patterns).
    Other,
}

fn identifier_use(n: &Node) -> Use {
    let Some(p) = n.parent() else {
        return Use::Other;
    };
    match p.kind() {
        "assignment" if is_field(&p, "left", n) => Use::Store(p.end_byte()),
        "assignment" if is_field(&p, "type", n) => Use::Other,
        "augmented_assignment" if is_field(&p, "left", n) => Use::Other,
        "for_statement" if is_field(&p, "left", n) => Use::Store(
            p.child_by_field_name("right")
                .map_or(p.end_byte(), |r| r.end_byte()),
        ),
        "named_expression" if is_field(&p, "name", n) => Use::Store(p.end_byte()),
        "as_pattern_target" => Use::Store(p.end_byte()),
        "pattern_list" | "tuple_pattern" | "list_pattern" => {
            // Unpacking: `a, b = ...` / `for a, b in ...`.
            let mut top = p;
            while let Some(up) = top.parent()
                && matches!(up.kind(), "pattern_list" | "tuple_pattern" | "list_pattern")
            {
                top = up;
            }
            match top.parent() {
                Some(a) if a.kind() == "assignment" && is_field(&a, "left", &top) => {
                    Use::Store(a.end_byte())
                }
                Some(f) if f.kind() == "for_statement" && is_field(&f, "left", &top) => Use::Store(
                    f.child_by_field_name("right")
                        .map_or(f.end_byte(), |r| r.end_byte()),
                ),
                _ => Use::Other,
            }
        }
        "attribute" if is_field(&p, "attribute", n) => Use::Other,
        "keyword_argument" if is_field(&p, "name", n) => Use::Other,
        "type"
        | "global_statement"
        | "nonlocal_statement"
        | "import_statement"
        | "import_from_statement"
        | "aliased_import"
        | "dotted_name"
        | "delete_statement" => Use::Other,
        k if k.ends_with("_pattern") || k == "case_clause" => Use::Other,
        _ => Use::Load,
    }
}

fn is_negative_int(n: &Node) -> bool {
    n.kind() == "unary_operator" && n.named_child(0).is_some_and(|k| k.kind() == "integer")
}
