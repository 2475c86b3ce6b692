//! A unified diff read once, with git's semantics (`apply.c` in git): quoted paths, the `a/`
//! and `b/` prefixes stripped as `-p1` strips them, renames, copies, modes, binary markers and
//! `/dev/null`; hunk bodies consumed by their line counts, so a removed line that reads
//! `-- x` is content, not a header.
//!
//! Reading never fails: what does not parse is a [`Problem`] with its line, and the caller
//! decides (replaying a gold patch refuses any; a guard reads on). Besides the paths git
//! writes, every file records in [`FileDiff::named`] each path any tool of the harness's apply
//! chain (`git apply`, then `patch --fuzz`) might read from its headers, so that checks
//! can look at everything that could be written, not only what git would write.

use crate::quote::{lossy, unquote_c};

/// What one file's part of a patch does to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Modify,
    Create,
    Delete,
    Rename,
    Copy,
}

/// What a hunk line does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    Context,
    Added,
    Removed,
}

impl LineKind {
    /// The line's marker in the diff (`' '`, `'+'`, `'-'`).
    pub fn marker(self) -> char {
        match self {
            LineKind::Context => ' ',
            LineKind::Added => '+',
            LineKind::Removed => '-',
        }
    }
}

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub kind: LineKind,
    /// The text without its marker and without the newline.
    pub text: String,
    /// Followed by `\ No newline at end of file`.
    pub no_newline: bool,
}

/// One hunk: `@@ -old_start,old_len +new_start,new_len @@ heading`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// 1-based line of the `@@` header in the patch.
    pub line: usize,
    /// First line on the old side (1-based; 0 when the old side is empty).
    pub old_start: usize,
    pub old_len: usize,
    pub new_start: usize,
    pub new_len: usize,
    /// The section heading after the second `@@` (`def foo(x):`), trimmed.
    pub heading: String,
    pub lines: Vec<Line>,
}

impl Hunk {
    /// The old side's text (context and removed lines, joined by `\n`).
    pub fn old_text(&self) -> String {
        self.side(LineKind::Removed)
    }

    /// The new side's text (context and added lines, joined by `\n`).
    pub fn new_text(&self) -> String {
        self.side(LineKind::Added)
    }

    fn side(&self, keep: LineKind) -> String {
        let texts: Vec<&str> = self
            .lines
            .iter()
            .filter(|l| l.kind == LineKind::Context || l.kind == keep)
            .map(|l| l.text.as_str())
            .collect();
        texts.join("\n")
    }
}

/// One file's part of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    /// 1-based line of the file's first header line.
    pub line: usize,
    /// Whether it came with a `diff --git` header.
    pub git: bool,
    pub change: Change,
    /// The path before the change, repository-relative (`None`: the file is created).
    pub old_path: Option<String>,
    /// The path after it (`None`: the file is deleted).
    pub new_path: Option<String>,
    pub old_mode: Option<u32>,
    pub new_mode: Option<u32>,
    /// A `GIT binary patch` or `Binary files … differ`: the content change is not in hunks.
    pub binary: bool,
    pub hunks: Vec<Hunk>,
    /// Every path the file's headers name, in every reading a tool of the apply chain may
    /// give them, repository-relative, each once: for checks that must see whatever could be
    /// written.
    pub named: Vec<String>,
}

impl FileDiff {
    fn new(line: usize, git: bool) -> FileDiff {
        FileDiff {
            line,
            git,
            change: Change::Modify,
            old_path: None,
            new_path: None,
            old_mode: None,
            new_mode: None,
            binary: false,
            hunks: Vec::new(),
            named: Vec::new(),
        }
    }

    /// The file as the patch leaves it: the new path, or the old one for a deletion.
    pub fn path(&self) -> &str {
        self.new_path
            .as_deref()
            .or(self.old_path.as_deref())
            .unwrap_or("")
    }

    /// Lines added and removed (git's `--numstat`).
    pub fn counts(&self) -> (usize, usize) {
        let mut n = (0, 0);
        for l in self.hunks.iter().flat_map(|h| &h.lines) {
            match l.kind {
                LineKind::Added => n.0 += 1,
                LineKind::Removed => n.1 += 1,
                LineKind::Context => {}
            }
        }
        n
    }

    /// Whether the file ends as a symbolic link (mode 120000).
    pub fn is_symlink(&self) -> bool {
        self.new_mode == Some(0o120000)
    }

    /// `old` (the file before the patch) with this file's hunks applied at the lines they
    /// state, every context and removed line checked; `None` where one does not match (no
    /// fuzz: for readers that must know the exact result, such as a configuration check).
    pub fn apply(&self, old: &str) -> Option<String> {
        let lines: Vec<&str> = old.split_inclusive('\n').collect();
        let mut out = String::with_capacity(old.len());
        let mut at = 0usize;
        for h in &self.hunks {
            let start = if h.old_len == 0 {
                h.old_start
            } else {
                h.old_start.checked_sub(1)?
            };
            if start < at || start > lines.len() {
                return None;
            }
            lines[at..start].iter().for_each(|l| out.push_str(l));
            at = start;
            for l in &h.lines {
                if l.kind == LineKind::Added {
                    out.push_str(&l.text);
                    if !l.no_newline {
                        out.push('\n');
                    }
                    continue;
                }
                let have = lines.get(at)?;
                if have.strip_suffix('\n').unwrap_or(have) != l.text {
                    return None;
                }
                if l.kind == LineKind::Context {
                    out.push_str(have);
                }
                at += 1;
            }
        }
        lines[at..].iter().for_each(|l| out.push_str(l));
        Some(out)
    }

    fn name(&mut self, p: impl Into<String>) {
        let p = p.into();
        if !p.is_empty() && !self.named.contains(&p) {
            self.named.push(p);
        }
    }
}

/// Something in the patch that did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line in the patch.
    pub line: usize,
    pub message: String,
}

/// A patch, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patch {
    pub files: Vec<FileDiff>,
    /// What did not parse; empty for a patch that `git diff` wrote.
    pub problems: Vec<Problem>,
}

impl Patch {
    /// Read a patch (see the module docs); never fails.
    pub fn parse(text: &str) -> Patch {
        Parser::new(text).run()
    }

    /// Whether any file's change is binary.
    pub fn is_binary(&self) -> bool {
        self.files.iter().any(|f| f.binary)
    }

    /// Every path any file names ([`FileDiff::named`]), each once, in order.
    pub fn named_paths(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for p in self.files.iter().flat_map(|f| &f.named) {
            if !out.contains(&p.as_str()) {
                out.push(p);
            }
        }
        out
    }

    /// The files the patch leaves changed ([`FileDiff::path`]), each once, in order.
    pub fn paths(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for f in &self.files {
            let p = f.path();
            if !p.is_empty() && !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// Lines added plus lines removed over all files.
    pub fn changed_lines(&self) -> usize {
        self.files
            .iter()
            .map(|f| {
                let (a, r) = f.counts();
                a + r
            })
            .sum()
    }
}

/// Strip `-p1`'s one leading component (`a/x/y` → `x/y`); `None` when there is no `/`.
fn strip_component(p: &str) -> Option<&str> {
    p.split_once('/')
        .map(|(_, rest)| rest.trim_start_matches('/'))
}

/// A name at the start of `s`: git's quoted form, else the text up to a tab. Returns the name
/// and the rest after it.
fn read_name(s: &str) -> (String, &str) {
    if let Some((bytes, rest)) = unquote_c(s) {
        return (lossy(bytes), rest);
    }
    match s.split_once('\t') {
        Some((name, rest)) => (name.to_string(), rest),
        None => (s.to_string(), ""),
    }
}

/// The repository-relative path of a `---` / `+++` name (`None`: `/dev/null`), and the other
/// readings a lenient tool could give it (trailing blanks trimmed; the unstripped name when it
/// has no component to strip or is absolute).
fn side_name(raw: &str) -> (Option<String>, Vec<String>) {
    let (name, _) = read_name(raw);
    if name == "/dev/null" {
        return (None, Vec::new());
    }
    let mut readings = Vec::new();
    let trimmed = name.trim_end();
    let stripped = strip_component(&name).map(str::to_string);
    if let Some(s) = &stripped {
        readings.push(s.clone());
        if let Some(t) = strip_component(trimmed)
            && t != s
        {
            readings.push(t.to_string());
        }
    } else {
        readings.push(trimmed.to_string());
    }
    // An absolute name: `-p1` makes it relative, but no honest patch has one, and a checker
    // must see it as written.
    if name.starts_with('/') {
        readings.push(name.clone());
    }
    (stripped, readings)
}

/// The two names of a `diff --git` line as git reads them (`git_header_name`): quoted names
/// unquoted; two unquoted names split where both sides, stripped, are the same path. Returns
/// the path when git finds one, and every reading for [`FileDiff::named`] (the SWE-bench
/// harness's split at the last ` b/` among them).
fn git_header(rest: &str) -> (Option<String>, Vec<String>) {
    let mut readings = Vec::new();
    if let Some((a, after)) = unquote_c(rest) {
        let a = lossy(a);
        let after = after.trim_start();
        let b = match unquote_c(after) {
            Some((b, _)) => lossy(b),
            None => after.to_string(),
        };
        let (sa, sb) = (strip_component(&a), strip_component(&b));
        readings.extend(sa.map(str::to_string));
        readings.extend(sb.map(str::to_string));
        let def = (sa.is_some() && sa == sb).then(|| sa.unwrap_or_default().to_string());
        return (def, readings);
    }
    // `a/x "b/y"`: the second quoted.
    if let Some(q) = rest.find(" \"")
        && let Some((b, tail)) = unquote_c(&rest[q + 1..])
        && tail.trim().is_empty()
    {
        let a = &rest[..q];
        let b = lossy(b);
        let (sa, sb) = (strip_component(a), strip_component(&b));
        readings.extend(sa.map(str::to_string));
        readings.extend(sb.map(str::to_string));
        let def = (sa.is_some() && sa == sb).then(|| sa.unwrap_or_default().to_string());
        return (def, readings);
    }
    let mut def = None;
    for (i, _) in rest.match_indices(' ') {
        let (a, b) = (&rest[..i], &rest[i + 1..]);
        if let (Some(sa), Some(sb)) = (strip_component(a), strip_component(b))
            && sa == sb
            && !sa.is_empty()
        {
            def = Some(sa.to_string());
            break;
        }
    }
    readings.extend(def.clone());
    if let Some((a, b)) = rest.rsplit_once(" b/") {
        readings.extend(strip_component(a).map(str::to_string));
        readings.push(b.to_string());
    }
    (def, readings)
}

/// `@@ -a[,b] +c[,d] @@ heading` → (a, b, c, d, heading).
fn hunk_header(line: &str) -> Option<(usize, usize, usize, usize, String)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, heading) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let range = |s: &str| -> Option<(usize, usize)> {
        let (start, len) = s.split_once(',').unwrap_or((s, "1"));
        Some((start.parse().ok()?, len.parse().ok()?))
    };
    let (a, b) = range(old)?;
    let (c, d) = range(new.trim_end())?;
    Some((a, b, c, d, heading.trim().to_string()))
}

fn mode(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim(), 8).ok()
}

struct Parser<'a> {
    lines: Vec<&'a str>,
    i: usize,
    files: Vec<FileDiff>,
    problems: Vec<Problem>,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Parser<'a> {
        let mut lines: Vec<&str> = text.split('\n').collect();
        if lines.last() == Some(&"") {
            lines.pop();
        }
        Parser {
            lines,
            i: 0,
            files: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// Line `i` without a trailing `\r` (headers only: hunk text keeps it).
    fn header(&self, i: usize) -> Option<&'a str> {
        self.lines.get(i).map(|l| l.strip_suffix('\r').unwrap_or(l))
    }

    fn problem(&mut self, line: usize, message: impl Into<String>) {
        self.problems.push(Problem {
            line,
            message: message.into(),
        });
    }

    fn run(mut self) -> Patch {
        while let Some(line) = self.header(self.i) {
            if let Some(rest) = line.strip_prefix("diff --git ") {
                self.git_file(rest);
            } else if line.starts_with("--- ")
                && self
                    .header(self.i + 1)
                    .is_some_and(|n| n.starts_with("+++ "))
            {
                let mut f = FileDiff::new(self.i + 1, false);
                self.side_pair(&mut f);
                self.files.push(f);
            } else if line.starts_with("@@ ") {
                self.hunk();
            } else if let Some(rest) = line.strip_prefix("Binary files ") {
                // A plain diff's binary marker: `Binary files a/x and b/y differ`.
                let mut f = FileDiff::new(self.i + 1, false);
                f.binary = true;
                if let Some((a, b)) = rest
                    .strip_suffix(" differ")
                    .and_then(|r| r.split_once(" and "))
                {
                    let (old, ra) = side_name(a);
                    let (new, rb) = side_name(b);
                    ra.into_iter().chain(rb).for_each(|p| f.name(p));
                    f.old_path = old;
                    f.new_path = new;
                }
                self.finish_file(&mut f);
                self.files.push(f);
                self.i += 1;
            } else if line.starts_with("*** ")
                && self
                    .header(self.i + 1)
                    .is_some_and(|n| n.starts_with("--- "))
            {
                // A context diff: `git apply` refuses it, `patch` applies it. Its paths are
                // recorded for the checks; its hunks are not read.
                let mut f = FileDiff::new(self.i + 1, false);
                for raw in [&line[4..], &self.header(self.i + 1).unwrap_or("")[4..]] {
                    let (_, readings) = side_name(raw);
                    readings.into_iter().for_each(|p| f.name(p));
                }
                self.problem(self.i + 1, "context-format diff (hunks not read)");
                self.files.push(f);
                self.i += 2;
            } else if let Some(name) = line.strip_prefix("Index: ") {
                // `patch` falls back to this name when the headers name no existing file.
                let mut f = FileDiff::new(self.i + 1, false);
                f.name(name.trim());
                self.files.push(f);
                self.i += 1;
            } else {
                // Text between files (a commit message, `index` lines of a plain diff).
                self.i += 1;
            }
        }
        self.files.retain(|f| {
            f.git || f.binary || !f.hunks.is_empty() || f.old_path.is_some() || !f.named.is_empty()
        });
        Patch {
            files: self.files,
            problems: self.problems,
        }
    }

    /// A `diff --git` file: its extended headers, up to its first hunk or the next file.
    fn git_file(&mut self, rest: &str) {
        let mut f = FileDiff::new(self.i + 1, true);
        let (def, readings) = git_header(rest);
        readings.into_iter().for_each(|p| f.name(p));
        let (mut old, mut new) = (def.clone(), def);
        let (mut created, mut deleted) = (false, false);
        self.i += 1;
        while let Some(line) = self.header(self.i) {
            let name_after = |key: &str| line.strip_prefix(key).map(|r| read_name(r).0);
            if line.starts_with("--- ")
                && self
                    .header(self.i + 1)
                    .is_some_and(|n| n.starts_with("+++ "))
            {
                let (o, ro) = side_name(&line[4..]);
                let (n, rn) = side_name(&self.header(self.i + 1).unwrap_or("+++ ")[4..]);
                ro.into_iter().chain(rn).for_each(|p| f.name(p));
                created |= o.is_none();
                deleted |= n.is_none();
                old = o.or(old);
                new = n.or(new);
                self.i += 2;
                break;
            } else if let Some(p) = name_after("rename from ").or(name_after("rename old ")) {
                f.change = Change::Rename;
                f.name(p.clone());
                old = Some(p);
            } else if let Some(p) = name_after("rename to ").or(name_after("rename new ")) {
                f.change = Change::Rename;
                f.name(p.clone());
                new = Some(p);
            } else if let Some(p) = name_after("copy from ") {
                f.change = Change::Copy;
                f.name(p.clone());
                old = Some(p);
            } else if let Some(p) = name_after("copy to ") {
                f.change = Change::Copy;
                f.name(p.clone());
                new = Some(p);
            } else if let Some(m) = line.strip_prefix("new file mode ") {
                created = true;
                f.new_mode = mode(m);
            } else if let Some(m) = line.strip_prefix("deleted file mode ") {
                deleted = true;
                f.old_mode = mode(m);
            } else if let Some(m) = line.strip_prefix("old mode ") {
                f.old_mode = mode(m);
            } else if let Some(m) = line.strip_prefix("new mode ") {
                f.new_mode = mode(m);
            } else if let Some(idx) = line.strip_prefix("index ") {
                // `index abc..def 100644`: the mode of an unchanged-mode file.
                if let Some(m) = idx.split(' ').nth(1).and_then(mode) {
                    f.old_mode = f.old_mode.or(Some(m));
                    f.new_mode = f.new_mode.or(Some(m));
                }
            } else if line.starts_with("similarity index ")
                || line.starts_with("dissimilarity index ")
            {
            } else if line.starts_with("Binary files ") {
                f.binary = true;
            } else if line == "GIT binary patch" {
                f.binary = true;
                // Base85 data and `literal` / `delta` lines, up to the next file (a base85
                // line never holds a space, so it never reads `diff --git `).
                self.i += 1;
                while self
                    .header(self.i)
                    .is_some_and(|l| !l.starts_with("diff --git "))
                {
                    self.i += 1;
                }
                break;
            } else {
                break;
            }
            self.i += 1;
        }
        if created {
            old = None;
        }
        if deleted {
            new = None;
        }
        f.old_path = old;
        f.new_path = new;
        if f.old_path.is_none() && f.new_path.is_none() && !(created && deleted) {
            self.problem(f.line, "git diff header names no file");
        }
        self.finish_file(&mut f);
        self.files.push(f);
    }

    /// A `---` / `+++` pair that starts a plain (non-git) file.
    fn side_pair(&mut self, f: &mut FileDiff) {
        let (old, ro) = side_name(&self.header(self.i).unwrap_or("--- ")[4..]);
        let (new, rn) = side_name(&self.header(self.i + 1).unwrap_or("+++ ")[4..]);
        ro.into_iter().chain(rn).for_each(|p| f.name(p));
        f.old_path = old;
        f.new_path = new;
        self.finish_file(f);
        self.i += 2;
    }

    fn finish_file(&mut self, f: &mut FileDiff) {
        if f.change == Change::Modify {
            f.change = match (&f.old_path, &f.new_path) {
                (None, Some(_)) => Change::Create,
                (Some(_), None) => Change::Delete,
                _ => Change::Modify,
            };
        }
    }

    /// A hunk at line `i`, its body consumed by its counts.
    fn hunk(&mut self) {
        let at = self.i + 1;
        let header = self.header(self.i).unwrap_or("");
        let Some((old_start, old_len, new_start, new_len, heading)) = hunk_header(header) else {
            self.problem(at, "malformed hunk header");
            self.i += 1;
            return;
        };
        self.i += 1;
        let mut hunk = Hunk {
            line: at,
            old_start,
            old_len,
            new_start,
            new_len,
            heading,
            lines: Vec::new(),
        };
        let (mut old_left, mut new_left) = (old_len, new_len);
        while old_left > 0 || new_left > 0 {
            let Some(&raw) = self.lines.get(self.i) else {
                self.problem(at, "hunk ends early (truncated patch)");
                break;
            };
            // A `--- X` / `+++ Y` pair inside a hunk is content for git, but a file header to
            // a reader that trusts headers over counts (`patch --fuzz`): its paths are named.
            if raw.starts_with("--- ")
                && self
                    .lines
                    .get(self.i + 1)
                    .is_some_and(|n| n.starts_with("+++ "))
                && let Some(f) = self.files.last_mut()
            {
                for side in [raw, self.lines[self.i + 1]] {
                    let side = side.strip_suffix('\r').unwrap_or(side);
                    side_name(&side[4..]).1.into_iter().for_each(|p| f.name(p));
                }
            }
            let (kind, text) = match raw.as_bytes().first() {
                Some(b' ') => (LineKind::Context, &raw[1..]),
                Some(b'+') => (LineKind::Added, &raw[1..]),
                Some(b'-') => (LineKind::Removed, &raw[1..]),
                // An empty context line whose space was stripped (git accepts it).
                None => (LineKind::Context, ""),
                Some(b'\\') => {
                    if let Some(l) = hunk.lines.last_mut() {
                        l.no_newline = true;
                    }
                    self.i += 1;
                    continue;
                }
                Some(_) => {
                    self.problem(self.i + 1, "hunk ends early (line counts do not match)");
                    break;
                }
            };
            match kind {
                LineKind::Added => new_left = new_left.saturating_sub(1),
                LineKind::Removed => old_left = old_left.saturating_sub(1),
                LineKind::Context => {
                    old_left = old_left.saturating_sub(1);
                    new_left = new_left.saturating_sub(1);
                }
            }
            hunk.lines.push(Line {
                kind,
                text: text.to_string(),
                no_newline: false,
            });
            self.i += 1;
        }
        while let Some(l) = self.lines.get(self.i)
            && l.starts_with('\\')
        {
            if let Some(last) = hunk.lines.last_mut() {
                last.no_newline = true;
            }
            self.i += 1;
        }
        match self.files.last_mut() {
            Some(f) => f.hunks.push(hunk),
            None => self.problem(at, "hunk before any file header"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_modification() {
        let p = Patch::parse(
            "diff --git a/src/m.py b/src/m.py\nindex 1..2 100644\n--- a/src/m.py\n+++ b/src/m.py\n@@ -1,3 +1,3 @@ def f():\n x\n-y\n+z\n \n\\ No newline at end of file\n",
        );
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let f = &p.files[0];
        assert_eq!(f.change, Change::Modify);
        assert_eq!(f.path(), "src/m.py");
        assert_eq!(f.old_mode, Some(0o100644));
        assert_eq!(f.counts(), (1, 1));
        let h = &f.hunks[0];
        assert_eq!(
            (h.old_start, h.old_len, h.heading.as_str()),
            (1, 3, "def f():")
        );
        assert_eq!(h.old_text(), "x\ny\n");
        assert_eq!(h.new_text(), "x\nz\n");
        assert!(h.lines[3].no_newline);
    }

    #[test]
    fn quoted_paths_are_the_paths_git_writes() {
        let p = Patch::parse(
            "diff --git \"a/conf\\164est.py\" \"b/conf\\164est.py\"\nnew file mode 100644\n--- /dev/null\n+++ \"b/conf\\164est.py\"\n@@ -0,0 +1 @@\n+import os\n",
        );
        let f = &p.files[0];
        assert_eq!(f.change, Change::Create);
        assert_eq!(f.new_path.as_deref(), Some("conftest.py"));
        assert_eq!(f.named, ["conftest.py"]);
    }

    #[test]
    fn renames_copies_modes_deletes() {
        let p = Patch::parse(
            "diff --git a/x y.py b/z.py\nsimilarity index 90%\nrename from x y.py\nrename to z.py\n\
             diff --git a/s.sh b/s.sh\nold mode 100644\nnew mode 100755\n\
             diff --git a/a.py b/c.py\ncopy from a.py\ncopy to c.py\n\
             diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n\
             diff --git a/img.png b/img.png\nindex 1..2 100644\nGIT binary patch\nliteral 5\nMcmZ?wbYNm&\n\nliteral 0\nKcmV+b0RR6000031\n\n",
        );
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let got: Vec<_> = p
            .files
            .iter()
            .map(|f| (f.change, f.old_path.as_deref(), f.new_path.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (Change::Rename, Some("x y.py"), Some("z.py")),
                (Change::Modify, Some("s.sh"), Some("s.sh")),
                (Change::Copy, Some("a.py"), Some("c.py")),
                (Change::Delete, Some("gone.py"), None),
                (Change::Modify, Some("img.png"), Some("img.png")),
            ]
        );
        assert_eq!(p.files[1].new_mode, Some(0o100755));
        assert!(p.files[4].binary && p.is_binary());
        assert!(p.files[0].named.contains(&"x y.py".to_string()));
    }

    #[test]
    fn hunk_bodies_are_not_headers_but_header_pairs_are_named() {
        // `-- x` removed (a `--- x` line) inside a hunk is content.
        let p = Patch::parse(
            "diff --git a/q.sql b/q.sql\n--- a/q.sql\n+++ b/q.sql\n@@ -1,2 +1,1 @@\n--- conftest.py\n x\n",
        );
        assert_eq!(p.files.len(), 1);
        assert_eq!(p.files[0].counts(), (0, 1));
        assert_eq!(p.named_paths(), ["q.sql"]);
        // Inflated counts: git reads the next file's header as content; `patch` may not, so
        // its paths are named.
        let p = Patch::parse(
            "--- a/src/a.py\n+++ b/src/a.py\n@@ -1,9 +1,9 @@\n-x\n+y\n--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import os\n",
        );
        assert!(p.named_paths().contains(&"conftest.py"));
        assert!(!p.problems.is_empty());
    }

    #[test]
    fn plain_diffs_and_prefixes() {
        // Any first component is stripped, as `-p1` does; timestamps after a tab dropped.
        let p = Patch::parse(
            "--- orig/tests/test_a.py\t2024-01-01\n+++ new/tests/test_a.py\t2024-01-02\n@@ -1 +1 @@\n-a\n+b\n",
        );
        assert_eq!(p.paths(), ["tests/test_a.py"]);
        // No component to strip: named as it is.
        let p = Patch::parse("--- conftest.py\n+++ conftest.py\n@@ -1 +1 @@\n-a\n+b\n");
        assert_eq!(p.named_paths(), ["conftest.py"]);
        // A context diff and an Index line: named, and a problem.
        let p = Patch::parse(
            "Index: pytest.py\n*** a/conftest.py\n--- b/conftest.py\n***************\n",
        );
        assert_eq!(p.named_paths(), ["pytest.py", "conftest.py"]);
        assert_eq!(p.problems.len(), 1);
    }

    #[test]
    fn hunks_apply_at_their_lines() {
        let p = Patch::parse(
            "--- a/m\n+++ b/m\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n@@ -5 +5,2 @@\n e\n+f\n\\ No newline at end of file\n",
        );
        let f = &p.files[0];
        assert_eq!(
            f.apply("a\nb\nc\nd\ne\n").as_deref(),
            Some("a\nB\nc\nd\ne\nf")
        );
        assert_eq!(f.apply("a\nX\nc\nd\ne\n"), None);
        let new = Patch::parse("--- /dev/null\n+++ b/n\n@@ -0,0 +1,2 @@\n+x\n+y\n");
        assert_eq!(new.files[0].apply("").as_deref(), Some("x\ny\n"));
    }

    #[test]
    fn truncated_and_malformed() {
        let p = Patch::parse("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n");
        assert_eq!(p.problems[0].message, "hunk ends early (truncated patch)");
        let p = Patch::parse("@@ -1 +1 @@\n-a\n+b\n");
        assert_eq!(p.problems[0].message, "hunk before any file header");
        let p = Patch::parse("--- a/x\n+++ b/x\n@@ -x +1 @@\n");
        assert_eq!(p.problems[0].message, "malformed hunk header");
    }

    proptest::proptest! {
        /// Never panics on arbitrary text shaped like a patch.
        #[test]
        fn arbitrary_text(body in "[-+ @a-z0-9,\"\\\\/\\n\\[\\]\t]{0,400}") {
            let _ = Patch::parse(&body);
            let _ = Patch::parse(&format!("diff --git a/m b/m\n--- a/m\n+++ b/m\n{body}"));
        }
    }
}
