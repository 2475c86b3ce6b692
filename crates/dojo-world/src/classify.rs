//! Which shell commands a simulated environment answers, and how. The agent's tools reach the
//! sandbox as `bash -c SCRIPT`; this module reads the script (a small shell word splitter, not
//! a full shell parser) and sorts it into:
//!
//! - [`CommandClass::Python`]: runs Python code or a test runner (`python`, `pytest`,
//!   `python -m ...`, `tox`, `nosetests`, a script with a Python shebang...). In `sim` mode the
//!   transition model answers these, since the sandbox has no Python environment.
//! - [`CommandClass::Install`]: a package install (`pip`, `conda`, `apt`...). Answered with a
//!   canned success: the simulated environment has nothing to install into.
//! - [`CommandClass::Blocked`]: destructive or resource-abusing commands (wiping the checkout,
//!   fork bombs, killing processes, container tools). Refused with a message.
//! - [`CommandClass::Real`]: everything else (reads, edits, search, git): runs for real.
//!
//! A script with several commands takes the strongest class: blocked over Python over install
//! over real, so `pip install -e . && pytest` goes to the transition model as a whole.

use std::path::Path;

/// What a simulated environment does with one shell script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandClass {
    /// Runs Python or tests: the transition model answers.
    Python(PythonRun),
    /// Installs packages: a canned success reply.
    Install,
    /// Destructive or resource-abusing: refused with this reason.
    Blocked(String),
    /// Runs for real in the sandbox.
    Real,
}

/// How a script runs Python.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PythonRun {
    /// Files (or directories) the command names as what it executes or tests, as written
    /// (relative to the working directory or absolute; pytest node ids cut at `::`). Modules
    /// run with `-m` appear as their path guesses (`pkg/mod.py`).
    pub files: Vec<String>,
    /// Whether the script carries code inline (`python -c`, a heredoc on stdin).
    pub inline: bool,
    /// Whether it runs a test runner (pytest, unittest, tox...) rather than one script.
    pub tests: bool,
    /// Whether it runs a whole test suite (a runner with no file, node id or `-k` filter, or
    /// `tox`/`nox`): the expensive kind that `hybrid` mode never runs for real.
    pub whole_suite: bool,
}

impl PythonRun {
    fn merge(&mut self, other: PythonRun) {
        for f in other.files {
            if !self.files.contains(&f) {
                self.files.push(f);
            }
        }
        self.inline |= other.inline;
        self.tests |= other.tests;
        self.whole_suite |= other.whole_suite;
    }
}

/// Classify `script` without looking at any file (a script with a Python shebang is only
/// recognised by its `.py` name). See [`classify_with`].
pub fn classify(script: &str) -> CommandClass {
    classify_with(script, &|_| false)
}

/// Classify `script`; `python_shebang(path)` says whether an executable the script runs by
/// path (`./run.sh`, `bin/tool`) starts with a Python shebang line.
pub fn classify_with(script: &str, python_shebang: &dyn Fn(&str) -> bool) -> CommandClass {
    classify_depth(script, python_shebang, 0)
}

fn classify_depth(script: &str, shebang: &dyn Fn(&str) -> bool, depth: usize) -> CommandClass {
    if let Some(reason) = bomb_pattern(script) {
        return CommandClass::Blocked(reason);
    }
    let mut python: Option<PythonRun> = None;
    let mut install = false;
    for seg in split(script) {
        let class = classify_segment(&seg, shebang, depth);
        match class {
            CommandClass::Blocked(_) => return class,
            CommandClass::Python(run) => match &mut python {
                Some(p) => p.merge(run),
                None => python = Some(run),
            },
            CommandClass::Install => install = true,
            CommandClass::Real => {}
        }
    }
    match (python, install) {
        (Some(p), _) => CommandClass::Python(p),
        (None, true) => CommandClass::Install,
        (None, false) => CommandClass::Real,
    }
}

/// Patterns refused wherever they appear: fork bombs and raw-device writes.
fn bomb_pattern(script: &str) -> Option<String> {
    let squeezed: String = script.chars().filter(|c| !c.is_whitespace()).collect();
    if squeezed.contains(":(){:|:&};:") || squeezed.contains("(){:|:&}") {
        return Some("a fork bomb".into());
    }
    if squeezed.contains(">/dev/sd") || squeezed.contains(">/dev/nvme") {
        return Some("writing to a raw disk device".into());
    }
    None
}

/// One simple command: its words (quotes removed, redirections dropped) and the heredoc body
/// fed to its stdin, if any.
#[derive(Debug, Default, Clone)]
struct Segment {
    words: Vec<String>,
    heredoc: Option<String>,
}

/// The word being read and what it is for, while [`split`] walks a script.
#[derive(Default)]
struct Words {
    /// The current segment.
    cur: Segment,
    word: String,
    in_word: bool,
    /// Delimiters of heredocs opened on the current line, with whether `<<-` strips tabs, and
    /// the segment index each feeds.
    pending: Vec<(String, bool, usize)>,
    /// After a redirection operator the next word is its target, not an argument.
    skip_next: bool,
    /// The next word is a heredoc delimiter (`Some(strip_tabs)`).
    heredoc_next: Option<bool>,
}

impl Words {
    /// End the current word: a heredoc delimiter, a redirection target (dropped) or an argument
    /// of the current segment (`seg_index` is that segment's index).
    fn end_word(&mut self, seg_index: usize) {
        if !self.in_word {
            return;
        }
        let w = std::mem::take(&mut self.word);
        self.in_word = false;
        if let Some(strip) = self.heredoc_next.take() {
            self.pending.push((w, strip, seg_index));
        } else if self.skip_next {
            self.skip_next = false;
        } else {
            self.cur.words.push(w);
        }
    }

    /// A single-quoted string starting at `i` (the quote): its text joins the word as is.
    /// Returns the index after the closing quote.
    fn single_quoted(&mut self, chars: &[char], mut i: usize) -> usize {
        self.in_word = true;
        i += 1;
        while i < chars.len() && chars[i] != '\'' {
            self.word.push(chars[i]);
            i += 1;
        }
        i + 1
    }

    /// A double-quoted string starting at `i` (the quote), with the backslash escapes the shell
    /// honours there. Returns the index after the closing quote.
    fn double_quoted(&mut self, chars: &[char], mut i: usize) -> usize {
        self.in_word = true;
        i += 1;
        while i < chars.len() && chars[i] != '"' {
            if chars[i] == '\\'
                && i + 1 < chars.len()
                && matches!(chars[i + 1], '"' | '\\' | '$' | '`')
            {
                i += 1;
            }
            self.word.push(chars[i]);
            i += 1;
        }
        i + 1
    }

    /// A redirection operator starting at `i` (`<` or `>`): dropped with its target (a file
    /// descriptor before it, a `&N` descriptor after it), except that a heredoc's body and a
    /// here-string's word are stdin. Returns the index after the operator.
    fn redirection(&mut self, chars: &[char], mut i: usize, seg_index: usize) -> usize {
        // A word made only of digits (or `&`) right before is a file descriptor.
        if self.in_word && self.word.chars().all(|c| c.is_ascii_digit() || c == '&') {
            self.word.clear();
            self.in_word = false;
        } else {
            self.end_word(seg_index);
        }
        let mut op = String::from(chars[i]);
        i += 1;
        while i < chars.len() && matches!(chars[i], '<' | '>' | '&' | '-' | '|') {
            op.push(chars[i]);
            i += 1;
        }
        if op == "<<" || op == "<<-" {
            self.heredoc_next = Some(op == "<<-");
        } else if op == "<<<" {
            // A here-string: its word is stdin, not an argument; keep it as such.
            self.skip_next = true;
        } else if op.ends_with('&') || op == ">&-" {
            // `2>&1`, `>&2`: the target is a descriptor.
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '-') {
                i += 1;
            }
        } else {
            self.skip_next = true;
        }
        i
    }
}

/// Split a script into simple commands at `;`, `&`, `&&`, `|`, `||`, newlines and
/// parentheses (so `$(...)` and subshells become commands of their own), with shell quoting,
/// backslash escapes, redirections (dropped with their target) and heredocs (kept as stdin).
fn split(script: &str) -> Vec<Segment> {
    let chars: Vec<char> = script.chars().collect();
    let mut segs: Vec<Segment> = Vec::new();
    let mut st = Words::default();
    let mut i = 0;

    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => i = st.single_quoted(&chars, i),
            '"' => i = st.double_quoted(&chars, i),
            '\\' => {
                if i + 1 < chars.len() {
                    if chars[i + 1] != '\n' {
                        st.in_word = true;
                        st.word.push(chars[i + 1]);
                    }
                    i += 2;
                } else {
                    i += 1;
                }
            }
            '#' if !st.in_word => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ' ' | '\t' => {
                st.end_word(segs.len());
                i += 1;
            }
            '<' | '>' => i = st.redirection(&chars, i, segs.len()),
            ';' | '&' | '|' | '(' | ')' | '`' | '\n' => {
                st.end_word(segs.len());
                segs.push(std::mem::take(&mut st.cur));
                st.skip_next = false;
                i += 1;
                if c == '\n' && !st.pending.is_empty() {
                    i = read_heredocs(&chars, i, &mut st.pending, &mut segs);
                }
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                st.end_word(segs.len());
                i += 1;
            }
            _ => {
                st.in_word = true;
                st.word.push(c);
                i += 1;
            }
        }
    }
    st.end_word(segs.len());
    segs.push(st.cur);
    segs.retain(|s| !s.words.is_empty());
    segs
}

/// Read the bodies of the heredocs opened on the line just ended, starting at `i`; attach each
/// body to its segment and return the index after the last delimiter line.
fn read_heredocs(
    chars: &[char],
    mut i: usize,
    pending: &mut Vec<(String, bool, usize)>,
    segs: &mut [Segment],
) -> usize {
    for (delim, strip_tabs, idx) in pending.drain(..) {
        let mut body = String::new();
        loop {
            if i >= chars.len() {
                break;
            }
            let start = i;
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            let line: String = chars[start..i].iter().collect();
            i += 1;
            let cmp = if strip_tabs {
                line.trim_start_matches('\t')
            } else {
                line.as_str()
            };
            if cmp == delim {
                break;
            }
            body.push_str(&line);
            body.push('\n');
        }
        if let Some(seg) = segs.get_mut(idx) {
            seg.heredoc = Some(body);
        }
    }
    i
}

fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

fn is_python_interpreter(name: &str) -> bool {
    let name = base(name);
    let rest = name
        .strip_prefix("python")
        .or_else(|| name.strip_prefix("pypy"));
    matches!(rest, Some(r) if r.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// Drop leading variable assignments and wrapper commands (`timeout 10`, `env X=1`, `time`,
/// `nice -n 5`, `uv run`, `poetry run`...) so the word that names the program comes first.
fn strip_wrappers(words: &[String]) -> &[String] {
    let mut w = words;
    loop {
        let Some(first) = w.first() else { return w };
        if is_assignment(first) {
            w = &w[1..];
            continue;
        }
        match base(first) {
            "time" | "nohup" | "exec" | "command" | "builtin" | "xvfb-run" => w = &w[1..],
            // Project runners: `uv run [--opts] pytest`, `poetry run python x.py`.
            "uv" | "poetry" | "pipenv" | "pdm" | "hatch"
                if w.get(1).is_some_and(|a| a == "run") =>
            {
                w = &w[2..];
                while w.first().is_some_and(|a| a.starts_with('-')) {
                    w = &w[1..];
                }
            }
            "env" => {
                w = &w[1..];
                while let Some(a) = w.first() {
                    if is_assignment(a) || a.starts_with('-') {
                        w = &w[1..];
                    } else {
                        break;
                    }
                }
            }
            "timeout" | "nice" | "stdbuf" | "ionice" | "taskset" => {
                w = &w[1..];
                while let Some(a) = w.first() {
                    if a.starts_with('-') {
                        // `-n 5`, `-s KILL`: options with a separate value.
                        let takes_value = matches!(a.as_str(), "-n" | "-s" | "-k" | "-c");
                        w = &w[1..];
                        if takes_value && !w.is_empty() {
                            w = &w[1..];
                        }
                    } else {
                        break;
                    }
                }
                // timeout's duration, taskset's mask.
                if matches!(base(first), "timeout" | "taskset")
                    && w.first().is_some_and(|a| {
                        a.chars()
                            .next()
                            .is_some_and(|c| c.is_ascii_digit() || c == '0')
                    })
                {
                    w = &w[1..];
                }
            }
            _ => return w,
        }
    }
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

const TEST_RUNNERS: &[&str] = &[
    "pytest",
    "py.test",
    "nosetests",
    "nose2",
    "trial",
    "tox",
    "nox",
    "green",
    "ward",
];
const TEST_MODULES: &[&str] = &[
    "pytest", "unittest", "nose", "nose2", "tox", "nox", "doctest",
];
const INSTALLERS: &[&str] = &[
    "pip",
    "pip3",
    "conda",
    "mamba",
    "micromamba",
    "apt",
    "apt-get",
    "aptitude",
    "yum",
    "dnf",
    "apk",
    "brew",
    "easy_install",
    "pipx",
];
/// Programs refused outright: process killers, privilege and container tools, power control.
const BLOCKED_PROGRAMS: &[&str] = &[
    "sudo", "su", "doas", "kill", "pkill", "killall", "shutdown", "reboot", "halt", "poweroff",
    "init", "docker", "podman", "kubectl", "mount", "umount", "fdisk", "parted", "chroot",
    "crontab",
];

fn classify_segment(seg: &Segment, shebang: &dyn Fn(&str) -> bool, depth: usize) -> CommandClass {
    let words = strip_wrappers(&seg.words);
    let Some(prog) = words.first() else {
        return CommandClass::Real;
    };
    let args = &words[1..];
    let name = base(prog);

    if BLOCKED_PROGRAMS.contains(&name) {
        return CommandClass::Blocked(format!("`{name}` is not available in this environment"));
    }
    if name.starts_with("mkfs") || name == "dd" && args.iter().any(|a| a.starts_with("of=/dev/")) {
        return CommandClass::Blocked(format!("`{name}` on a device is not allowed"));
    }
    if name == "rm" && rm_wipes(args) {
        return CommandClass::Blocked(
            "recursive deletion of the repository, the home directory or the root is not allowed"
                .into(),
        );
    }
    if matches!(name, "chmod" | "chown")
        && args.iter().any(|a| a == "-R" || a == "--recursive")
        && args.iter().any(|a| a == "/" || a == "/*")
    {
        return CommandClass::Blocked(format!("recursive `{name}` of the root is not allowed"));
    }
    if matches!(name, "bash" | "sh" | "dash" | "zsh")
        && let Some(pos) = args.iter().position(|a| a == "-c")
        && let Some(inner) = args.get(pos + 1)
        && depth < 4
    {
        return classify_depth(inner, shebang, depth + 1);
    }
    if INSTALLERS.contains(&name) {
        // `pip list`, `pip show`, `conda list` only read; still nothing is installed, and
        // there is no environment to list: treat every installer call as an install.
        return CommandClass::Install;
    }
    if name == "uv"
        && args
            .first()
            .is_some_and(|a| a == "pip" || a == "add" || a == "sync")
    {
        return CommandClass::Install;
    }
    if name == "poetry" && args.first().is_some_and(|a| a == "install" || a == "add") {
        return CommandClass::Install;
    }
    if is_python_interpreter(prog) {
        return python_invocation(args, seg.heredoc.is_some());
    }
    if TEST_RUNNERS.contains(&name) {
        return CommandClass::Python(test_run(name, args));
    }
    if name == "coverage" && args.first().is_some_and(|a| a == "run") {
        return python_invocation(&args[1..], false);
    }
    if prog.contains('/') && (prog.ends_with(".py") || shebang(prog)) {
        return CommandClass::Python(script_run(prog, args));
    }
    if prog.ends_with(".py") && shebang(prog) {
        return CommandClass::Python(script_run(prog, args));
    }
    CommandClass::Real
}

/// `rm` with a recursive flag on the repository, home or root (or a bare glob of them).
fn rm_wipes(args: &[String]) -> bool {
    let recursive = args.iter().any(|a| {
        a == "--recursive"
            || (a.starts_with('-') && !a.starts_with("--") && (a.contains('r') || a.contains('R')))
    });
    recursive
        && args.iter().filter(|a| !a.starts_with('-')).any(|a| {
            let t = a.trim_end_matches('/');
            matches!(
                t,
                "" | "/*"
                    | "*"
                    | "."
                    | ".."
                    | "~"
                    | "~/*"
                    | "$HOME"
                    | "/testbed"
                    | "/testbed/*"
                    | "/home"
                    | "/usr"
                    | "/etc"
                    | "/bin"
            ) || t == "./*"
        })
}

/// `python [options] (script | -m module | -c code | -) [args]`.
fn python_invocation(args: &[String], heredoc: bool) -> CommandClass {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-c" => {
                return CommandClass::Python(PythonRun {
                    inline: true,
                    ..Default::default()
                });
            }
            "-m" => {
                let Some(module) = args.get(i + 1) else {
                    return CommandClass::Python(PythonRun::default());
                };
                let rest = &args[i + 2..];
                let top = module.split('.').next().unwrap_or(module);
                if top == "pip" || top == "ensurepip" {
                    return CommandClass::Install;
                }
                if TEST_MODULES.contains(&top) {
                    return CommandClass::Python(test_run(top, rest));
                }
                let path = module.replace('.', "/");
                let mut run = PythonRun {
                    files: vec![format!("{path}.py")],
                    ..Default::default()
                };
                run.files.extend(path_args(rest));
                return CommandClass::Python(run);
            }
            "-" => {
                return CommandClass::Python(PythonRun {
                    inline: true,
                    ..Default::default()
                });
            }
            // Options that take a separate value.
            "-W" | "-X" | "-Q" => i += 2,
            _ if a.starts_with('-') => i += 1,
            _ => {
                let script = &args[i];
                if base(script) == "setup.py" && args[i + 1..].iter().any(|a| a == "test") {
                    return CommandClass::Python(PythonRun {
                        files: vec![script.clone()],
                        tests: true,
                        whole_suite: true,
                        ..Default::default()
                    });
                }
                if base(script) == "setup.py"
                    && args[i + 1..]
                        .iter()
                        .any(|a| matches!(a.as_str(), "install" | "develop"))
                {
                    return CommandClass::Install;
                }
                return CommandClass::Python(script_run(script, &args[i + 1..]));
            }
        }
    }
    // Bare `python`: reads its program from stdin (a heredoc or a pipe).
    CommandClass::Python(PythonRun {
        inline: heredoc || args.is_empty(),
        ..Default::default()
    })
}

fn script_run(script: &str, rest: &[String]) -> PythonRun {
    let name = base(script);
    // Test-runner scripts (Django's `tests/runtests.py`, sympy's `bin/test`).
    let runner = name.starts_with("runtests") || name == "run_tests.py" || name == "test";
    let mut files = vec![script.to_string()];
    let named: Vec<String> = path_args(rest);
    let filtered = !named.is_empty() || rest.iter().any(|a| !a.starts_with('-'));
    files.extend(named);
    PythonRun {
        files,
        inline: false,
        tests: runner,
        whole_suite: runner && !filtered,
    }
}

fn test_run(runner: &str, args: &[String]) -> PythonRun {
    let files = path_args(args);
    let filtered = !files.is_empty()
        || args
            .iter()
            .any(|a| a == "-k" || a.starts_with("-k") && a.len() > 2 || a.contains("::"));
    // unittest/doctest name modules or test ids positionally.
    let positional = args.iter().any(|a| !a.starts_with('-'));
    let whole = match runner {
        "tox" | "nox" => true,
        "unittest" | "doctest" | "trial" | "nose" | "nose2" | "nosetests" | "green" => {
            !filtered && !positional
        }
        _ => !filtered,
    };
    PythonRun {
        files,
        inline: false,
        tests: true,
        whole_suite: whole,
    }
}

/// Arguments that name files or directories (a `/`, a `.py` suffix or a pytest node id), with
/// node ids cut at `::`. Options and their values are skipped when they look like options.
fn path_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for a in args {
        if a.starts_with('-') {
            continue;
        }
        let p = a.split("::").next().unwrap_or(a);
        let looks_like_path =
            p.contains('/') || Path::new(p).extension().is_some_and(|e| e == "py");
        if looks_like_path && !p.is_empty() && !out.iter().any(|x: &String| x == p) {
            out.push(p.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn py(files: &[&str], inline: bool, tests: bool, whole: bool) -> CommandClass {
        CommandClass::Python(PythonRun {
            files: files.iter().map(|s| s.to_string()).collect(),
            inline,
            tests,
            whole_suite: whole,
        })
    }

    #[test]
    fn table() {
        let cases: Vec<(&str, CommandClass)> = vec![
            ("ls -la", CommandClass::Real),
            ("grep -rn python src/", CommandClass::Real),
            ("cat setup.py", CommandClass::Real),
            ("git diff", CommandClass::Real),
            ("echo 'python x.py'", CommandClass::Real),
            ("sed -n 1,20p foo.py", CommandClass::Real),
            ("find . -name '*.py' | head", CommandClass::Real),
            (
                "python reproduce.py",
                py(&["reproduce.py"], false, false, false),
            ),
            (
                "python3 /testbed/t.py --x 1",
                py(&["/testbed/t.py"], false, false, false),
            ),
            (
                "cd /testbed && python3.11 a/b.py",
                py(&["a/b.py"], false, false, false),
            ),
            (
                "python -c 'import foo; print(foo)'",
                py(&[], true, false, false),
            ),
            (
                "python -u -W ignore x.py",
                py(&["x.py"], false, false, false),
            ),
            ("pytest", py(&[], false, true, true)),
            ("pytest -q", py(&[], false, true, true)),
            (
                "pytest tests/test_a.py::test_b -x",
                py(&["tests/test_a.py"], false, true, false),
            ),
            ("python -m pytest -k foo", py(&[], false, true, false)),
            (
                "python -m pytest tests/",
                py(&["tests/"], false, true, false),
            ),
            ("python -m unittest", py(&[], false, true, true)),
            (
                "python -m unittest tests.test_x",
                py(&[], false, true, false),
            ),
            ("tox -e py39", py(&[], false, true, true)),
            ("nosetests", py(&[], false, true, true)),
            (
                "python -m mypkg.cli --help",
                py(&["mypkg/cli.py"], false, false, false),
            ),
            (
                "./tests/runtests.py",
                py(&["./tests/runtests.py"], false, true, true),
            ),
            (
                "python tests/runtests.py admin_views",
                py(&["tests/runtests.py"], false, true, false),
            ),
            ("python setup.py test", py(&["setup.py"], false, true, true)),
            ("timeout 30 python x.py", py(&["x.py"], false, false, false)),
            (
                "PYTHONPATH=. python x.py > out.txt 2>&1",
                py(&["x.py"], false, false, false),
            ),
            (
                "env -i FOO=1 pytest a_test.py",
                py(&["a_test.py"], false, true, false),
            ),
            ("bash -c 'python x.py'", py(&["x.py"], false, false, false)),
            ("coverage run -m pytest", py(&[], false, true, true)),
            (
                "python - <<'EOF'\nimport os\nEOF",
                py(&[], true, false, false),
            ),
            (
                "python <<EOF\nprint(1)\nEOF\nls",
                py(&[], true, false, false),
            ),
            (
                "cat > t.py <<'EOF'\nrm -rf /\nEOF\npython t.py",
                py(&["t.py"], false, false, false),
            ),
            ("echo $(python -V)", py(&[], false, false, false)),
            ("pip install -e .", CommandClass::Install),
            ("pip3 install numpy==1.2", CommandClass::Install),
            ("python -m pip install requests", CommandClass::Install),
            ("conda install -y scipy", CommandClass::Install),
            ("apt-get install -y libxml2", CommandClass::Install),
            ("python setup.py develop", CommandClass::Install),
            ("uv pip install x", CommandClass::Install),
            (
                "pip install -e . && pytest t/x.py",
                py(&["t/x.py"], false, true, false),
            ),
            ("rm -rf /", CommandClass::Blocked(String::new())),
            ("rm -rf /testbed", CommandClass::Blocked(String::new())),
            ("rm -fr ~", CommandClass::Blocked(String::new())),
            ("cd / && rm -r -f *", CommandClass::Blocked(String::new())),
            ("rm -f foo.py", CommandClass::Real),
            ("rm -rf build/", CommandClass::Real),
            ("kill -9 1", CommandClass::Blocked(String::new())),
            ("sudo apt install x", CommandClass::Blocked(String::new())),
            ("docker run ubuntu", CommandClass::Blocked(String::new())),
            (":(){ :|:& };:", CommandClass::Blocked(String::new())),
            (
                "dd if=/dev/zero of=/dev/sda",
                CommandClass::Blocked(String::new()),
            ),
            (
                "python x.py; shutdown now",
                CommandClass::Blocked(String::new()),
            ),
        ];
        for (cmd, want) in cases {
            let got = classify(cmd);
            match (&want, &got) {
                (CommandClass::Blocked(_), CommandClass::Blocked(reason)) => {
                    assert!(!reason.is_empty(), "{cmd}")
                }
                _ => assert_eq!(got, want, "{cmd}"),
            }
        }
    }

    #[test]
    fn shebang_scripts_are_python() {
        let sheb = |p: &str| p == "./bin/check";
        assert_eq!(
            classify_with("./bin/check --all", &sheb),
            py(&["./bin/check"], false, false, false)
        );
        assert_eq!(classify_with("./bin/other", &sheb), CommandClass::Real);
        assert_eq!(
            classify("./reproduce.py"),
            py(&["./reproduce.py"], false, false, false)
        );
    }

    fn class_tag(c: &CommandClass) -> u8 {
        match c {
            CommandClass::Python(_) => 0,
            CommandClass::Install => 1,
            CommandClass::Blocked(_) => 2,
            CommandClass::Real => 3,
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let _ = classify(&s);
        }

        #[test]
        fn shell_noise_never_panics(s in "[ a-z0-9'\"\\\\|&;<>()$`#\n-]{0,80}") {
            let _ = classify(&s);
        }

        #[test]
        fn cd_prefix_and_timeout_keep_the_class(
            cmd in prop::sample::select(vec![
                "python x.py", "pytest -q", "pip install foo", "ls -la", "rm -rf /",
                "python -m pytest tests/a.py", "grep -rn foo .",
            ]),
            dir in "[a-z]{1,8}",
        ) {
            let plain = classify(cmd);
            let cd = classify(&format!("cd {dir} && {cmd}"));
            let timed = classify(&format!("timeout 60 {cmd}"));
            prop_assert_eq!(class_tag(&plain), class_tag(&cd));
            prop_assert_eq!(class_tag(&plain), class_tag(&timed));
        }

        #[test]
        fn quoted_text_is_an_argument(text in "[a-z .;&|]{0,40}") {
            // Whatever an echo prints, single-quoted, runs nothing.
            let cmd = format!("echo 'python {text}'");
            prop_assert_eq!(classify(&cmd), CommandClass::Real);
        }

        #[test]
        fn python_scripts_are_named(name in "[a-z_]{1,10}", dir in "[a-z]{1,6}") {
            let path = format!("{dir}/{name}.py");
            match classify(&format!("python {path} --flag")) {
                CommandClass::Python(run) => prop_assert_eq!(run.files, vec![path]),
                other => prop_assert!(false, "{:?}", other),
            }
        }
    }
}
