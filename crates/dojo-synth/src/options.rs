//! What a synthesis run is asked to do ([`SynthOptions`]), with the model that writes mutants, if
//! any ([`LlmSource`]); shared by the run and the model-driven mutants.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dojo_llm::ChatBackend;
use dojo_sandbox::SandboxOptions;

use crate::operators::Operator;
use crate::project::Input;

/// How to run.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    pub input: Input,
    /// The tasks' `repo`; default: an env spec's repo whose name is the project's, else
    /// `pypi/<name>` (`local/<name>` for a directory).
    pub repo: Option<String>,
    /// Environment specs overriding the embedded ones; a spec `dojo synth` writes goes here.
    pub envs_dir: Option<PathBuf>,
    /// The task file (JSONL); `<out>.progress.jsonl` beside it.
    pub out: PathBuf,
    /// Stop after this many tasks (in the file, resumed ones included).
    pub max_tasks: usize,
    /// Stop after trying this many mutants in this session.
    pub max_tries: Option<usize>,
    pub seed: u64,
    pub workers: usize,
    pub operators: Vec<Operator>,
    /// Only mutate source files whose path contains one of these (all when empty).
    pub files: Vec<String>,
    /// Only mutate functions whose qualified name (`Class.method`) contains one of these (all
    /// when empty): a single-function curriculum step.
    pub functions: Vec<String>,
    /// Drop mutants that break more than this many tests (tasks with a short list of failing
    /// tests are easier to localize).
    pub max_fail_to_pass: Option<usize>,
    /// Drop mutants that break more than this share of the baseline-passing tests.
    pub max_break_share: f64,
    /// Wall-clock limit of one mutant test run; default: 3 × the slowest baseline run + 10 s,
    /// at most the environment's `timeout_s`.
    pub mutant_timeout: Option<Duration>,
    /// Validate each finished task as `dojo validate` does before writing it.
    pub final_validate: bool,
    /// Name the mutated module in `hints_text` (an easier curriculum step).
    pub hint_module: bool,
    /// Where progress goes (a count of tried mutants; quiet by default).
    pub progress: dojo_progress::Progress,
    pub sandbox: SandboxOptions,
    /// A model that also rewrites functions with a subtle bug (`llm_rewrite`).
    pub llm: Option<LlmSource>,
}

impl SynthOptions {
    /// Defaults for everything but the input and output.
    pub fn new(input: Input, out: PathBuf) -> SynthOptions {
        SynthOptions {
            input,
            repo: None,
            envs_dir: None,
            out,
            max_tasks: 10,
            max_tries: None,
            seed: 0,
            workers: 1,
            operators: Operator::ALL.to_vec(),
            files: Vec::new(),
            functions: Vec::new(),
            max_fail_to_pass: None,
            max_break_share: 0.5,
            mutant_timeout: None,
            final_validate: true,
            hint_module: false,
            progress: dojo_progress::Progress::quiet(),
            sandbox: SandboxOptions::default(),
            llm: None,
        }
    }

    /// Refuse settings out of range (`max_break_share` is a share of the suite), before
    /// anything is loaded or run.
    pub fn check(&self) -> Result<(), crate::SynthError> {
        if !(0.0..=1.0).contains(&self.max_break_share) {
            return Err(crate::SynthError::Input(
                "--max-break-share must be between 0 and 1".into(),
            ));
        }
        Ok(())
    }
}

/// The model and how to ask it.
#[derive(Clone)]
pub struct LlmSource {
    pub backend: Arc<dyn ChatBackend>,
    /// `model` of each request (the policy's model; the embedded engine takes `default`).
    pub model: String,
    /// What the provenance records (`openai:gpt-4o`, `embedded:default`).
    pub label: String,
    /// Functions to ask about (each one request).
    pub rewrites: usize,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// Sampling seed sent with each request (reproducible where the server honours it).
    pub seed: Option<u64>,
}

impl std::fmt::Debug for LlmSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmSource")
            .field("backend", &self.backend.describe())
            .field("model", &self.model)
            .field("label", &self.label)
            .field("rewrites", &self.rewrites)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn break_share_is_a_share() {
        let mut o = SynthOptions::new(Input::parse_requirement("a==1").unwrap(), "t".into());
        assert!(o.check().is_ok());
        o.max_break_share = 1.5;
        let e = o.check().unwrap_err().to_string();
        assert_eq!(e, "--max-break-share must be between 0 and 1");
    }
}
