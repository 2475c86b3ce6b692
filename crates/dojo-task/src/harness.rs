//! How a task's test log is read and judged: the log parser's name and the eval type, as the
//! task files and environment specs spell them (`log_parser = "pytest"`, `eval_type =
//! "fail_only"`). They are typed here, where tasks and specs are loaded, so a typo fails
//! `dojo tasks check` naming the file, the task and the field, instead of failing each grading
//! run later. The parsers themselves live in `dojo-grade` (one per [`LogParser`] kind).

use crate::TaskError;
use std::fmt;

/// A log parser name: `swebench`'s `PARSER_REGISTRY` Python entries, written with or without
/// their `parse_log_` prefix. Several repositories' names are aliases of the same parser (the
/// name is kept, for reports; `dojo-grade` maps each to its parser).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogParser {
    Pytest,
    PytestOptions,
    PytestV2,
    Django,
    Seaborn,
    Sympy,
    Matplotlib,
    Astroid,
    Flask,
    Marshmallow,
    Pvlib,
    Pyvista,
    Sqlfluff,
    Xarray,
    Pydicom,
    Requests,
    Pylint,
    Astropy,
    Scikit,
    Sphinx,
}

impl LogParser {
    /// Every name, in `PARSER_REGISTRY` order.
    pub const ALL: &[LogParser] = &[
        LogParser::Pytest,
        LogParser::PytestOptions,
        LogParser::Django,
        LogParser::PytestV2,
        LogParser::Seaborn,
        LogParser::Sympy,
        LogParser::Matplotlib,
        LogParser::Astroid,
        LogParser::Flask,
        LogParser::Marshmallow,
        LogParser::Pvlib,
        LogParser::Pyvista,
        LogParser::Sqlfluff,
        LogParser::Xarray,
        LogParser::Pydicom,
        LogParser::Requests,
        LogParser::Pylint,
        LogParser::Astropy,
        LogParser::Scikit,
        LogParser::Sphinx,
    ];

    /// The name without the `parse_log_` prefix.
    pub fn name(self) -> &'static str {
        match self {
            LogParser::Pytest => "pytest",
            LogParser::PytestOptions => "pytest_options",
            LogParser::PytestV2 => "pytest_v2",
            LogParser::Django => "django",
            LogParser::Seaborn => "seaborn",
            LogParser::Sympy => "sympy",
            LogParser::Matplotlib => "matplotlib",
            LogParser::Astroid => "astroid",
            LogParser::Flask => "flask",
            LogParser::Marshmallow => "marshmallow",
            LogParser::Pvlib => "pvlib",
            LogParser::Pyvista => "pyvista",
            LogParser::Sqlfluff => "sqlfluff",
            LogParser::Xarray => "xarray",
            LogParser::Pydicom => "pydicom",
            LogParser::Requests => "requests",
            LogParser::Pylint => "pylint",
            LogParser::Astropy => "astropy",
            LogParser::Scikit => "scikit",
            LogParser::Sphinx => "sphinx",
        }
    }

    /// `pytest` or `parse_log_pytest`.
    pub fn by_name(name: &str) -> Option<LogParser> {
        let short = name.strip_prefix("parse_log_").unwrap_or(name);
        LogParser::ALL.iter().copied().find(|p| p.name() == short)
    }

    /// The accepted names, for error messages.
    pub fn known() -> String {
        LogParser::ALL
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for LogParser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for LogParser {
    type Err = TaskError;
    fn from_str(s: &str) -> Result<LogParser, TaskError> {
        LogParser::by_name(s).ok_or_else(|| TaskError::UnknownLogParser {
            name: s.to_string(),
            known: LogParser::known(),
        })
    }
}

impl serde::Serialize for LogParser {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for LogParser {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<LogParser, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How FAIL_TO_PASS / PASS_TO_PASS are judged (SWE-bench's `EvalType`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalType {
    /// A test must be seen passing (the default).
    #[default]
    PassAndFail,
    /// A test counts as failed only when it is seen failing (logs that list failures only).
    FailOnly,
}

impl EvalType {
    pub fn by_name(s: &str) -> Option<EvalType> {
        match s {
            "pass_and_fail" => Some(EvalType::PassAndFail),
            "fail_only" => Some(EvalType::FailOnly),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            EvalType::PassAndFail => "pass_and_fail",
            EvalType::FailOnly => "fail_only",
        }
    }
}

impl fmt::Display for EvalType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for EvalType {
    type Err = TaskError;
    fn from_str(s: &str) -> Result<EvalType, TaskError> {
        EvalType::by_name(s).ok_or_else(|| TaskError::UnknownEvalType(s.to_string()))
    }
}

impl<'de> serde::Deserialize<'de> for EvalType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<EvalType, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_typos_name_the_known_ones() {
        for p in LogParser::ALL {
            assert_eq!(LogParser::by_name(p.name()), Some(*p));
            assert_eq!(LogParser::by_name(&format!("parse_log_{p}")), Some(*p));
            let json = serde_json::to_string(p).unwrap();
            assert_eq!(serde_json::from_str::<LogParser>(&json).unwrap(), *p);
        }
        let e = serde_json::from_str::<LogParser>("\"pytset\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pytset") && e.contains("pytest_v2"), "{e}");
        assert_eq!(
            serde_json::from_str::<EvalType>("\"fail_only\"").unwrap(),
            EvalType::FailOnly
        );
        assert!(serde_json::from_str::<EvalType>("\"fail-only\"").is_err());
    }
}
