//! The one rule for what counts as a test file, and which file a test id names.
//!
//! Used wherever the question comes up: grading (which files of a task are restored before its
//! tests run, and which edits of a model patch are edits of the task's tests), bug synthesis
//! (which files are never mutated), the world model (which paths in a command are tests),
//! selection (which files an agent wrote as tests).
//!
//! The rule is pytest's default discovery (`python_files = test_*.py *_test.py`) plus the
//! conventions of the benchmark repositories: Django's `tests.py`, `conftest.py`, and any file
//! under a directory named `tests`, `test` or `testing` (fixtures and helpers included). A
//! library module is never a test file by being named in a test id: doctest ids
//! (`src/pkg/mod.py::pkg.mod.func`) name library modules.

/// Whether a file name (no directory) is one pytest collects by default (`python_files =
/// test_*.py *_test.py`).
pub fn is_pytest_module(name: &str) -> bool {
    name.ends_with(".py") && (name.starts_with("test_") || name.ends_with("_test.py"))
}

/// Whether `path` (repository-relative, `/`-separated) is a test file (see the module docs).
pub fn is_test_file(path: &str) -> bool {
    let mut parts: Vec<&str> = path.split('/').collect();
    let name = parts.pop().unwrap_or(path);
    is_pytest_module(name)
        || name == "tests.py"
        || name == "conftest.py"
        || parts
            .iter()
            .any(|d| matches!(*d, "tests" | "test" | "testing"))
}

/// The file a pytest-style test id names (`path.py::Class::test[param]` → `path.py`); `None`
/// for other id styles (Django's `test (module.Class)`, sympy's bare `test_name`).
pub fn id_file(id: &str) -> Option<&str> {
    id.split_once("::")
        .map(|(f, _)| f)
        .filter(|f| f.ends_with(".py"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule() {
        for yes in [
            "tests/test_a.py",
            "pkg/a_test.py",
            "test_x.py",
            "app/tests.py",
            "conftest.py",
            "tests/helpers.py",
            "testing/python/raises.py",
            "tests/roots/test-ext/conf.py",
        ] {
            assert!(is_test_file(yes), "{yes}");
        }
        for no in [
            "src/pkg/mod.py",
            "pkg/testutils.py",
            "latest.py",
            "contest.py",
        ] {
            assert!(!is_test_file(no), "{no}");
        }
    }

    #[test]
    fn ids() {
        assert_eq!(
            id_file("tests/test_a.py::T::test_x[a::b]"),
            Some("tests/test_a.py")
        );
        assert_eq!(
            id_file("src/pkg/mod.py::pkg.mod.func"),
            Some("src/pkg/mod.py")
        );
        assert_eq!(id_file("test_x (app.tests.T)"), None);
        assert_eq!(id_file("test_name"), None);
    }
}
