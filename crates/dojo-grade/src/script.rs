//! The shell script one grading run executes in its sandbox, as one process: the patches
//! arrive (environment or stdin), the model patch applies with the harness's fallback chain,
//! the task's test files are restored, the eval script's pre-test commands run, the test patch
//! applies, and the test command runs with the observer around it. Each step logs to stderr
//! behind a marker ([`step_log`] reads them back).

use dojo_patch::{Change, Patch, shell_quote};
use dojo_task::Task;

use crate::grading::Semantics;
use crate::guard;

/// The files a test patch touches as the harness lists them (its `diff --git a/.* b/(.*)`
/// targets, which its eval script checks out), each with whether the patch creates it.
pub(crate) fn test_patch_files(test_patch: &str) -> Vec<(String, bool)> {
    let parsed = Patch::parse(test_patch);
    dojo_patch::harness_targets(test_patch)
        .into_iter()
        .map(|t| {
            let created = parsed
                .files
                .iter()
                .any(|f| f.change == Change::Create && f.path() == t);
            (t, created)
        })
        .collect()
}

/// The files grading restores, each with whether the test patch creates it: the test patch's
/// files, then (`classic`, or a task without a test patch) the other files its FAIL_TO_PASS /
/// PASS_TO_PASS ids name that are test files ([`guard::task_test_files`]). `swebench5` restores
/// what the harness's eval script checks out, the test patch's files alone, so a model edit of
/// another test file is graded as the harness grades it (the report still names the touch).
pub(crate) fn restorable_test_files(task: &Task, semantics: Semantics) -> Vec<(String, bool)> {
    let mut files = test_patch_files(&task.test_patch);
    if semantics == Semantics::Swebench5 && !files.is_empty() {
        return files;
    }
    for f in guard::task_test_files(task) {
        if !files.iter().any(|(p, _)| *p == f) {
            files.push((f, false));
        }
    }
    files
}

/// Shell lines restoring every test file of the task to its pristine state, so a model cannot
/// pre-empt the tests: files the test patch modifies (and the files the test ids name) are
/// checked out from the pristine commit (the harness's `git checkout <base> <files>`, one git
/// call for all), files it creates are removed (ours: a model that created the same test file
/// does not make the test patch fail). If the single checkout fails (a "modified" file the base
/// lacks), each file is handled alone.
pub(crate) fn restore_test_files_lines(files: &[(String, bool)]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let base = dojo_sandbox::pristine::BASE_TAG;
    let quoted = |created: bool| -> Vec<String> {
        files
            .iter()
            .filter(|(_, c)| *c == created)
            .map(|(f, _)| shell_quote(f))
            .collect()
    };
    let (modified, created) = (quoted(false), quoted(true));
    let mut s = String::new();
    if !modified.is_empty() {
        s.push_str(&format!(
            "if ! git checkout -q {base} -- {} 2>/dev/null; then\n",
            modified.join(" ")
        ));
        for q in &modified {
            s.push_str(&format!(
                "  if git cat-file -e {base}:{q} 2>/dev/null; then git checkout -q {base} -- {q} || exit 11; else rm -f -- {q} || exit 11; fi\n"
            ));
        }
        s.push_str("fi\n");
    }
    if !created.is_empty() {
        s.push_str(&format!("rm -f -- {} || exit 11\n", created.join(" ")));
    }
    s
}

/// Patches up to this size (each) reach the sandbox process in environment variables, written
/// to files by bash's builtin `printf` (no process, ~0.1 ms); larger ones, and any with a NUL
/// byte, come on stdin (`head -c` / `cat`: 5-10 ms, measured). Linux caps one environment
/// string at 128 KiB.
pub(crate) const ENV_PATCH_MAX: usize = 96 << 10;

/// How the patches reach the sandbox process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchTransport {
    /// `DOJO_MODEL_PATCH`, `DOJO_TEST_PATCH`.
    Env,
    /// Model patch first, then the test patch.
    Stdin,
}

impl PatchTransport {
    pub(crate) fn choose(model: Option<&str>, test_patch: &str) -> PatchTransport {
        let fits = |p: &str| p.len() <= ENV_PATCH_MAX && !p.contains('\0');
        if model.is_none_or(fits) && fits(test_patch) {
            PatchTransport::Env
        } else {
            PatchTransport::Stdin
        }
    }
}

/// The whole run as one process in the sandbox (each process costs a sandbox entry, which
/// matters next to a one-second test suite): the patches arrive (see [`PatchTransport`]), then
/// model patch, test-file restore (`restore`: empty unless the model patch touches a test file
/// of the task), the eval script's pre-test commands (`pre_test`, see
/// [`dojo_task::pre_test_commands`]; their failures do not stop the run, as in the harness's
/// script), test patch, all logged to stderr with step markers (exit
/// 10/11/12 = that step failed); then `@@DOJO_SETUP_OK` and the test command with stdout and
/// stderr merged on stdout, as in the harness's container log.
///
/// `observe`: the task's test files (absolute paths) for the test observer
/// ([`crate::observer`]); its run key then comes first on stdin, one line, read into a shell
/// variable (never the environment), and the records come back on stderr after the setup.
pub(crate) fn run_script(
    model: Option<&str>,
    test_patch: &str,
    restore: &str,
    pre_test: &[String],
    test_cmd: &str,
    transport: PatchTransport,
    observe: Option<&[String]>,
) -> String {
    let mut s = String::from(
        "exec 3>&1 1>&2\nset -u\nM=/tmp/.dojo-model-$$.diff T=/tmp/.dojo-test-$$.diff\ntrap 'rm -f \"$M\" \"$T\"' EXIT\n",
    );
    if observe.is_some() {
        s.push_str("IFS= read -r DOJO_K || exit 13\n");
    }
    // The harness's apply chain, the same one `Sandbox::apply_patch` runs.
    s.push_str(dojo_sandbox::patch::APPLY_FN);
    let has_test = !test_patch.trim().is_empty();
    match transport {
        PatchTransport::Env => {
            if model.is_some() {
                s.push_str("printf '%s' \"$DOJO_MODEL_PATCH\" > \"$M\" || exit 13\n");
            }
            if has_test {
                s.push_str("printf '%s' \"$DOJO_TEST_PATCH\" > \"$T\" || exit 13\n");
            }
            s.push_str("unset DOJO_MODEL_PATCH DOJO_TEST_PATCH\n");
        }
        PatchTransport::Stdin => {
            if let Some(m) = model {
                s.push_str(&format!("head -c {} > \"$M\" || exit 13\n", m.len()));
            }
            if has_test {
                s.push_str("cat > \"$T\" || exit 13\n");
            }
        }
    }
    if model.is_some() {
        s.push_str("echo @@DOJO_STEP model\ndojo_apply \"$M\" || exit 10\n");
    }
    s.push_str("echo @@DOJO_STEP restore\n");
    s.push_str(restore);
    if !pre_test.is_empty() {
        s.push_str("echo @@DOJO_STEP eval_script\nset +u\n");
        for l in pre_test {
            // Each command shown in the log before it runs, as the harness's `set -x` does.
            s.push_str(&format!("echo {}\n{l}\n", shell_quote(&format!("+ {l}"))));
        }
        s.push_str(&format!(
            "set -u\ncd {} || exit 13\n",
            dojo_sandbox::WORKSPACE
        ));
    }
    if has_test {
        s.push_str("echo @@DOJO_STEP test\ndojo_apply \"$T\" || exit 12\n");
    }
    s.push_str("rm -f \"$M\" \"$T\"\necho @@DOJO_SETUP_OK\n");
    if let Some(files) = observe {
        // fd 4 keeps the script's stderr for the observer's records; the test command in a
        // subshell, so that its `exit` or `cd` leaves the script its turn.
        s.push_str("exec 4>&2 1>&3 3>&- 2>&1 </dev/null\nset +u\n");
        s.push_str(&crate::observer::run_lines(test_cmd, files));
    } else {
        s.push_str("exec 1>&3 3>&- 2>&1 </dev/null\nset +u\n");
        s.push_str(test_cmd);
        s.push('\n');
    }
    s
}

/// One step's part of the setup output: its log (markers removed) and the apply method.
pub(crate) fn step_log(out: &str, step: &str) -> (String, Option<String>) {
    let marker = format!("@@DOJO_STEP {step}");
    let Some((_, rest)) = out.split_once(&marker) else {
        return (String::new(), None);
    };
    let body = rest.split("@@DOJO_STEP ").next().unwrap_or("");
    let mut method = None;
    let mut lines = Vec::new();
    for l in body.lines() {
        match l.strip_prefix("@@DOJO_APPLIED ") {
            Some(m) => method = Some(m.to_string()),
            None if lines.is_empty() && l.is_empty() => {}
            None => lines.push(l),
        }
    }
    (lines.join("\n"), method)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_lines_quote_paths_and_split_new_files() {
        let tp = "diff --git a/t/it's.py b/t/it's.py\n--- a/t/it's.py\n+++ b/t/it's.py\n@@ -1 +1 @@\n-a\n+b\n\
                  diff --git a/t/new.py b/t/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/t/new.py\n@@ -0,0 +1 @@\n+--- /dev/null\n";
        assert_eq!(
            test_patch_files(tp),
            [
                ("t/it's.py".to_string(), false),
                ("t/new.py".to_string(), true)
            ]
        );
        let s = restore_test_files_lines(&test_patch_files(tp));
        assert!(
            s.contains(r"git checkout -q dojo-base -- 't/it'\''s.py' 2>"),
            "{s}"
        );
        assert!(s.contains("rm -f -- 't/new.py' ||"), "{s}");
        assert!(restore_test_files_lines(&[]).is_empty());
    }

    #[test]
    fn swebench5_restores_the_test_patch_files_alone() {
        let loc = dojo_task::Location {
            file: "x".into(),
            unit: "line",
            index: 1,
        };
        let row = serde_json::json!({
            "instance_id": "o__r-1", "repo": "o/r", "base_commit": "x", "patch": "diff --git a/x b/x\n",
            "test_patch": "diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -1 +1 @@\n-a\n+b\n",
            "FAIL_TO_PASS": ["tests/test_a.py::test_a"],
            "PASS_TO_PASS": ["tests/test_b.py::test_b", "pkg/mod.py::pkg.mod.f"],
        });
        let task = Task::from_row(row.as_object().cloned().unwrap(), &loc).unwrap();
        let names = |s| -> Vec<String> {
            restorable_test_files(&task, s)
                .into_iter()
                .map(|(f, _)| f)
                .collect()
        };
        assert_eq!(names(Semantics::Swebench5), ["tests/test_a.py"]);
        assert_eq!(
            names(Semantics::Classic),
            ["tests/test_a.py", "tests/test_b.py"]
        );
        // Without a test patch both restore the ids' test files (never the doctest's module).
        let bare = Task {
            test_patch: String::new(),
            ..task.clone()
        };
        for s in [Semantics::Swebench5, Semantics::Classic] {
            let got: Vec<String> = restorable_test_files(&bare, s)
                .into_iter()
                .map(|(f, _)| f)
                .collect();
            assert_eq!(got, ["tests/test_a.py", "tests/test_b.py"]);
        }
    }

    #[test]
    fn setup_output_is_split_by_step() {
        let out = "@@DOJO_STEP model\n+ git apply --verbose\nerror: x\n+ git apply --verbose --reject\n@@DOJO_APPLIED git_apply_reject\n@@DOJO_STEP restore\n@@DOJO_STEP test\n+ git apply --verbose\nnope\n";
        assert_eq!(
            step_log(out, "model"),
            (
                "+ git apply --verbose\nerror: x\n+ git apply --verbose --reject".to_string(),
                Some("git_apply_reject".to_string())
            )
        );
        assert_eq!(step_log(out, "test").0, "+ git apply --verbose\nnope");
        assert_eq!(step_log(out, "restore"), (String::new(), None));
        let tp = "diff --git a/t/a.py b/t/a.py\n--- a/t/a.py\n+++ b/t/a.py\n";
        let s = run_script(None, "", "", &[], "pytest", PatchTransport::Env, None);
        assert!(
            s.contains("@@DOJO_STEP restore") && s.ends_with("set +u\npytest\n"),
            "{s}"
        );
        // With the observer: the command in a subshell, then the records, then its status.
        let files = ["/testbed/t/a b.py".to_string()];
        let s = run_script(
            None,
            "",
            "",
            &[],
            "pytest",
            PatchTransport::Env,
            Some(&files),
        );
        assert!(s.starts_with("exec 3>&1 1>&2\nset -u\n"), "{s}");
        assert!(s.contains("IFS= read -r DOJO_K || exit 13\n"), "{s}");
        assert!(
            s.contains("export DOJO_OBSERVER_RUN=\"4 5 \"'/testbed/t/a b.py'\n"),
            "{s}"
        );
        assert!(
            s.contains("(\npytest\n) 5<<<\"$DOJO_K\"\nrc=$?\n") && s.ends_with("exit $rc\n"),
            "{s}"
        );
        let m = "diff --git a/src/x.py b/src/x.py\n";
        let s = run_script(Some(m), tp, "", &[], "pytest", PatchTransport::Stdin, None);
        assert!(s.contains(&format!("head -c {} >", m.len())), "{s}");
        assert!(!s.contains("git checkout"), "{s}");
        let s = run_script(
            Some("diff --git a/t/a.py b/t/a.py\n"),
            tp,
            &restore_test_files_lines(&test_patch_files(tp)),
            &["export A=1".to_string()],
            "pytest",
            PatchTransport::Env,
            None,
        );
        assert!(s.contains("printf '%s' \"$DOJO_MODEL_PATCH\""), "{s}");
        assert!(s.contains("git checkout -q dojo-base -- 't/a.py'"), "{s}");
        // The eval script's commands after the restore, before the test patch.
        let (restore, eval, test) = (
            s.find("@@DOJO_STEP restore").unwrap(),
            s.find("@@DOJO_STEP eval_script\nset +u\necho '+ export A=1'\nexport A=1\nset -u\n")
                .unwrap(),
            s.find("@@DOJO_STEP test").unwrap(),
        );
        assert!(restore < eval && eval < test, "{s}");
        assert_eq!(PatchTransport::choose(Some("x"), "y"), PatchTransport::Env);
        assert_eq!(
            PatchTransport::choose(Some("x\0"), "y"),
            PatchTransport::Stdin
        );
        let big = "x".repeat(ENV_PATCH_MAX + 1);
        assert_eq!(PatchTransport::choose(None, &big), PatchTransport::Stdin);
    }
}
