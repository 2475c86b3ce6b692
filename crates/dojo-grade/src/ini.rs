//! INI files read the way their readers read them, for the test-infrastructure guard: pytest
//! reads `tox.ini` / `setup.cfg` with [iniconfig] (2.x `_parseline`), and setuptools reads
//! `setup.cfg`'s `[options.entry_points]` with the standard library's `configparser`. The guard
//! compares what these readers would see before and after a patch, instead of matching words.
//!
//! [iniconfig]: https://github.com/pytest-dev/iniconfig/blob/main/src/iniconfig/_parse.py

use std::collections::BTreeMap;

/// Sections → (key → value, continuation lines joined with `\n`).
pub(crate) type Sections = BTreeMap<String, BTreeMap<String, String>>;

/// Which reader's rules.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dialect {
    /// pytest's iniconfig: section names and keys as written (case-sensitive); `name = value`,
    /// else `name: value`; comments only on lines starting with `#` or `;` (and after a
    /// section header); a duplicate section or key is an error (pytest refuses the file).
    IniConfig,
    /// `configparser` (setuptools): keys lowercased, `=` or `:` (the first of either),
    /// comment lines `#` / `;`, indented lines continue a value; later duplicates win
    /// (setuptools' reader is strict, so a duplicate fails its build: either way no plugin).
    ConfigParser,
}

/// Parse `text`; `None` where the reader would refuse the file.
pub(crate) fn parse(text: &str, dialect: Dialect) -> Option<Sections> {
    let mut out = Sections::new();
    let mut section: Option<String> = None;
    let mut key: Option<String> = None;
    for raw in text.lines() {
        let comment = matches!(raw.trim_start().chars().next(), Some('#' | ';'));
        let line = raw.trim_end();
        if comment || line.is_empty() {
            continue;
        }
        let first = line.chars().next()?;
        if first.is_whitespace() {
            // A continuation of the last value (iniconfig: stripped, joined by newlines).
            let (s, k) = (section.as_ref()?, key.as_ref()?);
            let v = out.get_mut(s)?.get_mut(k)?;
            if !v.is_empty() {
                v.push('\n');
            }
            v.push_str(line.trim());
            continue;
        }
        if first == '[' {
            let mut header = line;
            if dialect == Dialect::IniConfig {
                for c in ['#', ';'] {
                    header = header.split(c).next().unwrap_or("").trim_end();
                }
            }
            let name = header.strip_prefix('[')?.strip_suffix(']')?.to_string();
            if out.contains_key(&name) && dialect == Dialect::IniConfig {
                return None;
            }
            out.entry(name.clone()).or_default();
            section = Some(name);
            key = None;
            continue;
        }
        let (name, value) = match dialect {
            Dialect::IniConfig => match line.split_once('=') {
                Some((n, v)) if !n.contains(':') => (n, v),
                _ => line.split_once(": ")?,
            },
            Dialect::ConfigParser => {
                let at = line.find(['=', ':'])?;
                (&line[..at], &line[at + 1..])
            }
        };
        let name = match dialect {
            Dialect::IniConfig => name.trim().to_string(),
            Dialect::ConfigParser => name.trim().to_lowercase(),
        };
        let values = out.get_mut(section.as_ref()?)?;
        if values.contains_key(&name) && dialect == Dialect::IniConfig {
            return None;
        }
        values.insert(name.clone(), value.trim().to_string());
        key = Some(name);
    }
    Some(out)
}

/// What an INI file (`tox.ini` or `setup.cfg`, by `file_name`) tells pytest: the sections
/// pytest reads there, and setup.cfg's `pytest11` entry points (plugins after a reinstall).
/// `None` when a reader would refuse the text.
pub(crate) fn pytest_settings(file_name: &str, text: &str) -> Option<Vec<Option<String>>> {
    let ini = parse(text, Dialect::IniConfig);
    let section = |name: &str| -> Option<String> {
        // A file pytest cannot parse stops the run; as a setting it is "unreadable".
        match &ini {
            Some(s) => s.get(name).map(|v| format!("{v:?}")),
            None => Some("<unparsable>".into()),
        }
    };
    match file_name {
        // pytest reads `[pytest]` in tox.ini, `[tool:pytest]` in setup.cfg (and fails on a
        // `[pytest]` there, which is a change of outcome too).
        "tox.ini" => Some(vec![section("pytest")]),
        "setup.cfg" => {
            let cp = parse(text, Dialect::ConfigParser)?;
            let entry = cp
                .get("options.entry_points")
                .and_then(|e| e.get("pytest11"))
                .cloned();
            Some(vec![section("tool:pytest"), section("pytest"), entry])
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn iniconfig_rules() {
        let s = parse(
            "# top\n[pytest]\naddopts = -p a\n  -p b\n; note\npython_files: check_*.py\n[ pytest ]\nx=1\n",
            Dialect::IniConfig,
        )
        .unwrap();
        assert_eq!(s["pytest"]["addopts"], "-p a\n-p b");
        assert_eq!(s["pytest"]["python_files"], "check_*.py");
        // Not the section pytest looks up.
        assert_eq!(s[" pytest "]["x"], "1");
        // Duplicates: pytest refuses the file.
        assert!(parse("[pytest]\na=1\na=2\n", Dialect::IniConfig).is_none());
        assert!(parse("[pytest]\n[pytest]\n", Dialect::IniConfig).is_none());
        // A section header with a trailing comment.
        let s = parse("[pytest] # c\na = 1\n", Dialect::IniConfig).unwrap();
        assert_eq!(s["pytest"]["a"], "1");
    }

    #[test]
    fn configparser_lowercases_keys() {
        let s = parse(
            "[options.entry_points]\nPyTest11 =\n    p = plug\n",
            Dialect::ConfigParser,
        )
        .unwrap();
        assert_eq!(s["options.entry_points"]["pytest11"], "p = plug");
    }

    #[test]
    fn settings_ignore_other_sections_and_comments() {
        let before = "[metadata]\nname = x\n[tool:pytest]\nmarkers =\n    slow\n";
        let same =
            "[metadata]\nname = y\n# addopts = -p plug\n[tool:pytest]\nmarkers =\n    slow\n";
        let changed = "[metadata]\nname = x\n[tool:pytest]\nmarkers =\n    slow\naddopts=-p plug\n";
        let entry = "[metadata]\nname = x\n[tool:pytest]\nmarkers =\n    slow\n[options.entry_points]\npytest11 =\n  p = plug\n";
        let b = pytest_settings("setup.cfg", before);
        assert_eq!(b, pytest_settings("setup.cfg", same));
        assert_ne!(b, pytest_settings("setup.cfg", changed));
        assert_ne!(b, pytest_settings("setup.cfg", entry));
        assert_ne!(
            pytest_settings("tox.ini", "[tox]\nenvlist = py3\n"),
            pytest_settings(
                "tox.ini",
                "[tox]\nenvlist = py3\n[pytest]\nxfail_strict = false\n"
            )
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn never_panics(text in "[\\[\\]a-z:=#; \\n\\t]{0,200}") {
            let _ = parse(&text, Dialect::IniConfig);
            let _ = parse(&text, Dialect::ConfigParser);
            let _ = pytest_settings("setup.cfg", &text);
        }
    }
}
