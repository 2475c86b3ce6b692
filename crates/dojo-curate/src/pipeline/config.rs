//! The settings of a curation run: which filters run, what is written, and the budgets and
//! options of each stage. Serialised as is into `manifest.json`, so an export says how it was
//! made.

use std::path::PathBuf;

use serde::Serialize;

use crate::error::CurateError;
use crate::filters::{DifficultyConfig, FormatConfig};
use crate::render::{Masking, MessagesStyle};

/// Which filters run (their order is fixed, see [`crate::filters`]).
#[derive(Debug, Clone, Serialize)]
pub struct FilterSet {
    pub dedup: bool,
    pub difficulty: bool,
    pub format: bool,
    pub cap: bool,
    /// Minimum successful LSP-tool calls; `None` = filter off.
    pub lsp_min: Option<usize>,
}

impl Default for FilterSet {
    fn default() -> Self {
        FilterSet {
            dedup: true,
            difficulty: true,
            format: true,
            cap: true,
            lsp_min: None,
        }
    }
}

impl FilterSet {
    /// Parses `format,difficulty,cap,dedup,lsp` (`none` for no filter). `lsp` takes its minimum
    /// from `lsp_min` (default 2, SWE-Master's `limit_lsp`).
    pub fn parse(list: &str, lsp_min: usize) -> Result<FilterSet, CurateError> {
        let mut f = FilterSet {
            dedup: false,
            difficulty: false,
            format: false,
            cap: false,
            lsp_min: None,
        };
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "dedup" => f.dedup = true,
                "difficulty" => f.difficulty = true,
                "format" => f.format = true,
                "cap" => f.cap = true,
                "lsp" => f.lsp_min = Some(lsp_min),
                "none" => {}
                other => {
                    return Err(CurateError::UnknownFilter(other.to_string()));
                }
            }
        }
        Ok(f)
    }
}

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Formats {
    /// `tokens.parquet` (needs a model).
    pub tokens: bool,
    /// `messages.jsonl` + `messages.parquet`.
    pub messages: bool,
    /// `sharegpt.jsonl`.
    pub sharegpt: bool,
}

impl Formats {
    /// Parses `parquet,messages,sharegpt` (`tokens` is `parquet`'s other name).
    pub fn parse(list: &str) -> Result<Formats, CurateError> {
        let mut f = Formats {
            tokens: false,
            messages: false,
            sharegpt: false,
        };
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "parquet" | "tokens" => f.tokens = true,
                "messages" => f.messages = true,
                "sharegpt" => f.sharegpt = true,
                other => {
                    return Err(CurateError::Config(format!(
                        "unknown --format {other:?} (parquet, messages, sharegpt)"
                    )));
                }
            }
        }
        Ok(f)
    }
}

/// A whole run's settings.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub inputs: Vec<PathBuf>,
    pub out: PathBuf,
    pub filters: FilterSet,
    pub difficulty: DifficultyConfig,
    pub format: FormatConfig,
    pub cap: usize,
    pub lsp_tool: String,
    pub masking: Masking,
    pub formats: Formats,
    /// Worker threads for rendering/tokenizing (0 = available parallelism).
    pub threads: usize,
    /// Write `report.html` and the SVG charts.
    pub report: bool,
    /// Keep trajectories whose recorded prompt ids differ from the target tokenizer's (e.g. to
    /// distil another model's rollouts); by default they are dropped as a tokenizer mismatch.
    pub allow_tokenizer_mismatch: bool,
    /// How the messages exports write tool calls.
    pub messages_style: MessagesStyle,
    /// Write verifier judgement samples instead of agent samples (the difficulty, format, LSP
    /// and cap filters do not apply; the verifier's own cap and balance do).
    pub verifier: Option<crate::verifier::VerifierConfig>,
    /// Write world-model samples (SWT or SWR) from `world.jsonl` records instead of agent
    /// samples (the agent filters do not apply; the `world` stage and the token budget do).
    pub world: Option<crate::world::WorldConfig>,
}

impl Config {
    pub fn new(inputs: Vec<PathBuf>, out: PathBuf) -> Config {
        Config {
            inputs,
            out,
            filters: FilterSet::default(),
            difficulty: DifficultyConfig::default(),
            format: FormatConfig::default(),
            cap: 2,
            lsp_tool: "lsp_tool".into(),
            masking: Masking::AllAssistant,
            formats: Formats {
                tokens: true,
                messages: true,
                sharegpt: false,
            },
            threads: 0,
            report: true,
            allow_tokenizer_mismatch: false,
            messages_style: MessagesStyle::Auto,
            verifier: None,
            world: None,
        }
    }
}

impl Config {
    /// Refuses inputs that do not exist and paths that are not UTF-8 (paths are recorded in the
    /// export's manifest), before any work.
    pub fn check_paths(&self) -> Result<(), CurateError> {
        if let Some(p) = self.inputs.iter().find(|p| !p.exists()) {
            return Err(CurateError::Config(format!(
                "--rollouts {}: no such file or directory",
                p.display()
            )));
        }
        if let Some(p) = self
            .inputs
            .iter()
            .chain([&self.out])
            .find(|p| p.to_str().is_none())
        {
            return Err(CurateError::Config(format!(
                "{}: not a UTF-8 path (paths are recorded in the export's manifest)",
                p.display()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_list_parses_and_rejects_unknown_names() {
        let f = FilterSet::parse("format, cap,lsp", 3).unwrap();
        assert!(f.format && f.cap && !f.dedup && !f.difficulty);
        assert_eq!(f.lsp_min, Some(3));
        assert!(
            FilterSet::parse("format,fancy", 2)
                .unwrap_err()
                .to_string()
                .contains("fancy")
        );
    }

    #[test]
    fn format_list_parses_and_rejects_unknown_names() {
        let f = Formats::parse("tokens, sharegpt").unwrap();
        assert!(f.tokens && f.sharegpt && !f.messages);
        let e = Formats::parse("parquet,csv").unwrap_err().to_string();
        assert_eq!(e, "unknown --format \"csv\" (parquet, messages, sharegpt)");
    }

    #[test]
    fn missing_inputs_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let ok = Config::new(vec![dir.path().to_path_buf()], dir.path().join("out"));
        assert!(ok.check_paths().is_ok());
        let missing = Config::new(vec![PathBuf::from("/nonexistent/r")], dir.path().into());
        assert_eq!(
            missing.check_paths().unwrap_err().to_string(),
            "--rollouts /nonexistent/r: no such file or directory"
        );
    }
}
