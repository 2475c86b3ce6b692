//! A SWE-bench `eval_script`'s commands before its test command, as dojo runs them.
//!
//! The harness runs the eval script in the container after applying the model patch: activate
//! the environment, print diagnostics, run the instance's pre-test commands (reinstall the
//! project, export variables, …), check the test files out from the base commit, apply the test
//! patch, run the test command. Grading (`dojo_grade::run`) runs the same order in a sandbox:
//! model patch, then [`pre_test_commands`], then the test patch and the test command.
//!
//! Each line before the start marker is one of:
//! - **container plumbing** (shebang, `set -uxo pipefail`, conda activation, `git config
//!   --global`, `git status` / `git show` / `git diff` diagnostics) and the test patch's own
//!   here-document (dojo applies the test patch itself): dropped;
//! - **a reinstall** (`pip install -e .`, `python setup.py develop`): run where the sandbox's
//!   `/venv` is writable (a grading sandbox's private copy-on-write view,
//!   `dojo_sandbox::SandboxOptions::writable_venv`) and has pip (`installer = "pip"`):
//!   offline by default (`PIP_NO_INDEX`, no build isolation: what the environment already
//!   holds), from the package index with the env's `reinstall_network = true`, the only way a
//!   dependency that the patch adds can be installed. Elsewhere (an agent's sandbox, a uv-built
//!   environment) it is not run and an `echo` line says so in the log: the editable install
//!   already serves `/testbed`;
//! - **a pip install of requirement specifiers** (astropy-8707's `pip install -q 'pytest<7.2'`):
//!   moved into the environment build ([`package_installs`]: the task's environment runs it
//!   after the spec's install commands, so it is its own environment), a log line says so;
//!   what the harness installs before the tests is then installed before the tests;
//! - **other package installs** (`pip install .`, `conda install`, `apt-get`): not run (they
//!   belong in the environment spec), also said in the log;
//! - **everything else** (`export`, `cd /testbed`, `sed`, …): run as written, except that
//!   `git checkout <base_commit> …` names dojo's pristine tag instead of the upstream commit
//!   (the sandbox's repository has one commit, tagged [`dojo_sandbox::pristine::BASE_TAG`]).

use dojo_patch::shell_quote;
use std::sync::LazyLock;

use regex::Regex;

static REINSTALL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[\s;&|])(?:(?:python\S*\s+-m\s+)?pip3?\s+install\s+.*(?:-e|--editable)\b|python\S*\s+setup\.py\s+(?:develop|install)\b)")
        .unwrap_or_else(|e| panic!("REINSTALL: {e}"))
});

static PACKAGE_INSTALL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[\s;&|])(?:(?:python\S*\s+-m\s+)?(?:pip3?|uv\s+pip|conda|mamba)\s+install\b|apt(?:-get)?\s+(?:-\S+\s+)*install\b)")
        .unwrap_or_else(|e| panic!("PACKAGE_INSTALL: {e}"))
});

static HEREDOC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?\s*$"#)
        .unwrap_or_else(|e| panic!("HEREDOC: {e}"))
});

/// The arguments of `l` when it is a pip install of requirement specifiers only
/// (`[python -m] pip install [-q|-U] 'pkg<2' other==1.0`), as written (shell quoting kept):
/// nothing of the project (`.`, paths, `-e`, `-r` files, URLs), no other options, no second
/// command on the line. Such an install is the same before or after the patch, so it can move
/// into the environment's build.
fn requirement_install_args(l: &str) -> Option<&str> {
    let c = REQUIREMENT_INSTALL.captures(l.trim())?;
    let args = c.get(1)?.as_str();
    let words = words(args)?;
    let reqs = words
        .iter()
        .filter(|w| !matches!(w.as_str(), "-q" | "--quiet" | "-U" | "--upgrade"))
        .collect::<Vec<_>>();
    let is_spec = |w: &str| REQUIREMENT_SPEC.is_match(w) && !w.contains("://") && !w.contains('/');
    (!reqs.is_empty() && reqs.iter().all(|w| is_spec(w))).then_some(args)
}

/// Shell words of `s`, which has no expansions, separators or backslashes
/// ([`REQUIREMENT_INSTALL`]), so quotes only group: `None` on an unclosed quote or an unquoted
/// `<` / `>` (a redirection).
fn words(s: &str) -> Option<Vec<String>> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for ch in s.chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => (quote, any) = (Some(ch), true),
            (None, '<' | '>') => return None,
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    quote.is_none().then_some(out)
}

static REQUIREMENT_INSTALL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:python[0-9.]*\s+-m\s+)?pip3?\s+install\s+([^;&|`$()\\]+)$")
        .unwrap_or_else(|e| panic!("REQUIREMENT_INSTALL: {e}"))
});

/// A PEP 508 name with optional extras and version constraints (no markers, no URLs).
static REQUIREMENT_SPEC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9._,-]+\])?(?:\s*(?:==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!-]+(?:\s*,\s*(?:==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!-]+)*)?$")
        .unwrap_or_else(|e| panic!("REQUIREMENT_SPEC: {e}"))
});

/// The pip installs of requirement specifiers that `script` runs before its test command, each
/// as its argument string (shell quoting kept), in order: what the task's environment installs
/// after its spec's install commands (the build's `dojo_pip_install`, its own installer and
/// `exclude_newer`), instead of the grading sandbox installing them from the network.
pub fn package_installs(script: &str) -> Vec<String> {
    before_test_lines(script)
        .filter_map(|l| requirement_install_args(l).map(str::to_string))
        .collect()
}

/// The lines of `script` before its test command that are not container plumbing, comments or
/// here-documents (the test patch's `git apply - <<'EOF_…'`: dojo applies the test patch itself).
fn before_test_lines(script: &str) -> impl Iterator<Item = &str> {
    let before = script
        .split(": '>>>>> Start Test Output'")
        .next()
        .unwrap_or("");
    let mut heredoc: Option<String> = None;
    before.lines().filter_map(move |line| {
        if let Some(end) = &heredoc {
            if line == end {
                heredoc = None;
            }
            return None;
        }
        if let Some(c) = HEREDOC.captures(line) {
            heredoc = c.get(1).map(|m| m.as_str().to_string());
            return None;
        }
        let l = line.trim();
        (!(l.is_empty() || l.starts_with('#') || is_plumbing(l))).then_some(l)
    })
}

/// Container plumbing that has no meaning in a sandbox.
fn is_plumbing(line: &str) -> bool {
    let l = line.trim();
    l.starts_with("#!")
        || l.starts_with("set -")
        || l.starts_with("source /opt/miniconda3/")
        || l.starts_with("conda activate")
        || l.starts_with("git config --global")
        || l == "git status"
        || l == "git show"
        || l.starts_with("git -c core.fileMode=false diff")
        || l.starts_with("git diff")
}

/// The shell lines to run, in order, for the commands `script` runs before its test command
/// (see the module docs); `base_commit` is the task's, rewritten to the pristine tag.
/// `reinstall_network`: a reinstall may reach the package index (else it runs offline).
pub fn pre_test_commands(script: &str, base_commit: &str, reinstall_network: bool) -> Vec<String> {
    let base = dojo_sandbox::pristine::BASE_TAG;
    let mut out = Vec::new();
    for l in before_test_lines(script) {
        let why = if REINSTALL.is_match(l) {
            out.push(reinstall_line(l, reinstall_network));
            continue;
        } else if requirement_install_args(l).is_some() {
            Some("package install run in the environment build instead (before any patch)")
        } else if PACKAGE_INSTALL.is_match(l) {
            Some(
                "package install not run: the sandbox environment is read-only (put it in the env spec)",
            )
        } else {
            None
        };
        match why {
            Some(why) => out.push(format!(
                "echo {}",
                shell_quote(&format!("dojo: {why}: {l}"))
            )),
            None if !base_commit.is_empty() && l.starts_with("git checkout ") => {
                out.push(l.replace(base_commit, base));
            }
            None => out.push(l.to_string()),
        }
    }
    out
}

/// A reinstall, run where the sandbox's venv is writable and has pip (see the module docs).
fn reinstall_line(l: &str, network: bool) -> String {
    let offline = if network {
        ""
    } else {
        // Offline: the index is unreachable in a sandbox without the network, and build
        // isolation would need one (`PIP_NO_BUILD_ISOLATION=0` turns isolation *off*).
        "export PIP_NO_INDEX=1 PIP_NO_BUILD_ISOLATION=0; "
    };
    let skipped = shell_quote(&format!(
        "dojo: reinstall not run: the environment is read-only in this sandbox or has no pip (installer = \"pip\"); its editable install already serves /testbed: {l}"
    ));
    format!(
        "if [ -w {v}/bin ] && [ -x {v}/bin/pip ]; then (export PIP_DISABLE_PIP_VERSION_CHECK=1; {offline}{l}) || echo {REINSTALL_FAILED}; else echo {skipped}; fi",
        v = dojo_sandbox::VENV_PATH
    )
}

/// The line a reinstall that ran and failed prints in the grading log: grading then knows the
/// tests would run on the build from before the patch.
pub const REINSTALL_FAILED: &str = "@@DOJO_REINSTALL_FAILED";

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "a820c139ccbe6d1865d73c4a459945cd69899f8f";

    fn script(pre: &str) -> String {
        format!(
            "#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\ncd /testbed\ngit config --global --add safe.directory /testbed\ncd /testbed\ngit status\ngit show\ngit -c core.fileMode=false diff {SHA}\nsource /opt/miniconda3/bin/activate\nconda activate testbed\n{pre}git checkout {SHA} test/a_test.py\ngit apply -v - <<'EOF_114329324912'\ndiff --git a/test/a_test.py b/test/a_test.py\n--- a/test/a_test.py\n+++ b/test/a_test.py\n@@ -1 +1 @@\n-x\n+export NOT_RUN=1\n\nEOF_114329324912\n: '>>>>> Start Test Output'\npytest -rA test/a_test.py\n: '>>>>> End Test Output'\ngit checkout {SHA} test/a_test.py\n"
        )
    }

    #[test]
    fn swebench_script_shape() {
        let s = script(
            "python -m pip install -e .\nexport LANG=C.UTF-8\nsed -i 's/a/b/' setup.cfg\npip install 'numpy<2'\n",
        );
        assert_eq!(
            pre_test_commands(&s, SHA, false),
            [
                "cd /testbed",
                "cd /testbed",
                "if [ -w /venv/bin ] && [ -x /venv/bin/pip ]; then (export PIP_DISABLE_PIP_VERSION_CHECK=1; export PIP_NO_INDEX=1 PIP_NO_BUILD_ISOLATION=0; python -m pip install -e .) || echo @@DOJO_REINSTALL_FAILED; else echo 'dojo: reinstall not run: the environment is read-only in this sandbox or has no pip (installer = \"pip\"); its editable install already serves /testbed: python -m pip install -e .'; fi",
                "export LANG=C.UTF-8",
                "sed -i 's/a/b/' setup.cfg",
                "echo 'dojo: package install run in the environment build instead (before any patch): pip install '\\''numpy<2'\\'''",
                "git checkout dojo-base test/a_test.py",
            ]
        );
        assert!(pre_test_commands("", SHA, false).is_empty());
    }

    /// astropy-8707's `pip install -q 'pytest<7.2'` moves into the environment build; what
    /// is not a plain requirement install stays "not run".
    #[test]
    fn requirement_installs_move_to_the_build() {
        let s = script(
            "python -m pip install -q 'pytest<7.2'\npip install \"numpy>=1.20,<2\" six==1.16.0\npython -m pip install .\npip install -r req.txt\npip install x; rm -rf /\npip install 'x' > /dev/null\npip install git+https://h/x.git\npip install ./local\n",
        );
        assert_eq!(
            package_installs(&s),
            ["-q 'pytest<7.2'", "\"numpy>=1.20,<2\" six==1.16.0"]
        );
        let cmds = pre_test_commands(&s, SHA, false).join("\n");
        assert!(cmds.contains("dojo: package install run in the environment build instead (before any patch): python -m pip install -q"), "{cmds}");
        for kept in [
            "install .",
            "-r req.txt",
            "rm -rf",
            "/dev/null",
            "git+https",
            "./local",
        ] {
            let line = cmds
                .lines()
                .find(|l| l.contains(kept))
                .unwrap_or_else(|| panic!("{kept}: {cmds}"));
            assert!(line.contains("package install not run"), "{line}");
        }
        assert_eq!(
            words("a 'b c' \"\" d"),
            Some(vec!["a".into(), "b c".into(), String::new(), "d".into()])
        );
        assert_eq!(words("'open"), None);
    }

    #[test]
    fn reinstall_forms() {
        for l in [
            "python -m pip install -e .",
            "python -m pip install -e .[all]",
            "python -m pip install -e '.[dev]'",
            "pip install --editable .",
            "python setup.py develop",
            "python3 -m pip install -v --no-use-pep517 --no-build-isolation -e .",
        ] {
            assert!(REINSTALL.is_match(l), "{l}");
        }
        assert!(!REINSTALL.is_match("pip install numpy"));
        assert!(PACKAGE_INSTALL.is_match("pip install numpy"));
        assert!(PACKAGE_INSTALL.is_match("apt-get install -y locales"));
        assert!(!PACKAGE_INSTALL.is_match("export PIP=1"));
    }

    /// Every real eval script we have: nothing of the container plumbing, the upstream commit
    /// or the test patch survives, and every reinstall is recognised.
    #[test]
    fn real_scripts() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/swebench");
        let mut n = 0;
        for f in ["swebench_dev.jsonl", "swebench_lite_dev.jsonl"] {
            let Ok(text) = std::fs::read_to_string(format!("{dir}/{f}")) else {
                println!("SKIPPED: {dir}/{f} not present");
                continue;
            };
            for line in text.lines() {
                let row: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
                let (Some(s), Some(base)) =
                    (row["eval_script"].as_str(), row["base_commit"].as_str())
                else {
                    continue;
                };
                n += 1;
                let cmds = pre_test_commands(s, base, false);
                let joined = cmds.join("\n");
                for bad in [base, "conda", "git apply", "diff --git", "git status"] {
                    assert!(!joined.contains(bad), "{bad:?} in {joined}");
                }
                assert!(
                    cmds.iter()
                        .any(|c| c.starts_with("git checkout dojo-base ")),
                    "{joined}"
                );
                if s.contains("pip install -e") {
                    assert!(joined.contains("dojo: reinstall not run"), "{joined}");
                }
            }
        }
        assert!(n == 0 || n >= 200, "{n}");
    }
}
