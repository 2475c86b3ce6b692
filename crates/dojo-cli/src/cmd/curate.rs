//! `dojo curate` (dojo-curate): filter rollouts and export training data.

use crate::exit::{Exit, ensure_usage};
use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Args)]
pub struct CurateArgs {
    /// Rollout outputs of `dojo rollout` (directories searched for *.jsonl, or files).
    #[arg(long, num_args = 1.., required = true)]
    pub rollouts: Vec<PathBuf>,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Filters to run, comma-separated: dedup, difficulty, format, lsp, cap (or `none`).
    /// They always run in that order.
    #[arg(long, default_value = "dedup,difficulty,format,cap")]
    pub filters: String,
    /// Per-task cap (SWE-Gym: 2), preferring fewest turns, then fewest tokens.
    #[arg(long, default_value_t = 2, value_parser = crate::args::positive::<usize>())]
    pub cap: usize,
    /// Token budget with the target tokenizer (SWE-Master: 81,920).
    #[arg(long, default_value_t = 81_920, value_parser = crate::args::positive::<usize>())]
    pub max_tokens: usize,
    /// Assistant-turn budget.
    #[arg(long, default_value_t = 100, value_parser = crate::args::positive::<usize>())]
    pub max_turns: usize,
    /// Difficulty filter: keep tasks whose mean reward is strictly above this...
    #[arg(long, default_value_t = 0.0, value_parser = crate::args::finite)]
    pub difficulty_low: f64,
    /// ...and strictly below this.
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::finite)]
    pub difficulty_high: f64,
    /// With the `lsp` filter: minimum successful LSP-tool calls.
    #[arg(long, default_value_t = 2)]
    pub lsp_min: usize,
    /// Name of the LSP tool in the trajectories.
    #[arg(long, default_value = "lsp_tool")]
    pub lsp_tool: String,
    /// Target model for tokens and templates: `default` (the bundled SmolLM2), a GGUF path, a
    /// Hugging Face tokenizer directory (`tokenizer.json` + `tokenizer_config.json` with its
    /// `chat_template`, e.g. Qwen3's), or `none` (no tokenization: messages exports only,
    /// budgets from recorded usage).
    #[arg(long, default_value = "default")]
    pub model: String,
    /// Exports, comma-separated: parquet (pre-tokenized), messages (Parquet + JSONL; tool-call
    /// arguments are objects in both), sharegpt.
    #[arg(long, default_value = "parquet,messages")]
    pub format: String,
    /// How the messages exports write tool calls: `native` (OpenAI `tool_calls`, `role: tool`,
    /// `tools`), `inline` (in the text, Hermes style: what a template without tool support is
    /// given; for trainers that do not pass tools to the template, e.g. OpenRLHF), or `auto`
    /// (inline when the target template has no tool support, which would drop the calls).
    #[arg(long, default_value = "auto")]
    pub messages_style: String,
    /// Which assistant turns carry loss: all-assistant or last-turn.
    #[arg(long, default_value = "all-assistant")]
    pub masking: String,
    /// Rendering threads (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Skip the HTML/SVG report.
    #[arg(long)]
    pub no_report: bool,
    /// Keep trajectories whose recorded prompt token ids differ from the target tokenizer's
    /// (distilling another model's rollouts); by default they are reported and dropped.
    #[arg(long)]
    pub allow_tokenizer_mismatch: bool,
    /// Exit 3 when any input line could not be used.
    #[arg(long)]
    pub strict: bool,
    /// Write verifier training data instead: SWE-Gym-style YES/NO judgement samples over each
    /// graded rollout's interaction log (the prompt `dojo select --selector verifier` sends),
    /// at most --cap successes and --cap failures per task, balanced overall, within
    /// --max-tokens. --filters then only decides dedup.
    #[arg(long)]
    pub verifier: bool,
    /// Seed of the verifier data's balancing subsample.
    #[arg(long, default_value_t = 0)]
    pub verifier_seed: u64,
    /// Write world-model training data instead, from the `world.jsonl` records `dojo rollout`
    /// keeps beside its trajectories: `swt` (transition model: a command's stdout, stderr and
    /// exit code) or `swr` (reward model: test report and reward), in SWE-World's prompt layout.
    /// --filters does not apply; --max-tokens does.
    #[arg(long, value_name = "swt|swr")]
    pub world: Option<String>,
    /// With --world swt: samples kept per rollout (SWE-World: 6), its first commands.
    #[arg(long, default_value_t = 6)]
    pub world_cap: usize,
    /// With --world: give each sample the initial analysis this model generated for its task
    /// (cached under $DOJO_HOME/world-analysis by `dojo tasks analyze`); tasks without one
    /// are counted and say "No initial analysis provided.".
    #[arg(long, value_name = "MODEL")]
    pub world_analysis_model: Option<String>,
    /// With --world: render the prompts with the caps of this policy file's `[world.caps]`
    /// (default SWE-World's), the file the trained model is later used with, so it is trained on
    /// exactly what it is sent.
    #[arg(long, value_name = "POLICY")]
    pub world_policy: Option<std::path::PathBuf>,
    /// With --world: leave the gold patch out of every prompt, for a reward model that will
    /// score candidates at test time (`dojo select --selector swr` never shows it). By default
    /// the prompts show it, as SWE-World's training data does for rewarding RL rollouts.
    #[arg(long)]
    pub world_withhold_gold: bool,
}

pub fn run(args: CurateArgs) -> anyhow::Result<Exit> {
    let mut cfg = dojo_curate::Config::new(args.rollouts.clone(), args.out.clone());
    cfg.check_paths()?;
    cfg.filters = dojo_curate::FilterSet::parse(&args.filters, args.lsp_min)?;
    cfg.cap = args.cap;
    cfg.format.max_tokens = Some(args.max_tokens);
    cfg.format.max_turns = Some(args.max_turns);
    cfg.difficulty.low = args.difficulty_low;
    cfg.difficulty.high = args.difficulty_high;
    cfg.lsp_tool = args.lsp_tool.clone();
    cfg.masking = args.masking.parse()?;
    cfg.messages_style = args.messages_style.parse()?;
    cfg.formats = dojo_curate::Formats::parse(&args.format)?;
    cfg.threads = args.threads;
    cfg.report = !args.no_report;
    cfg.allow_tokenizer_mismatch = args.allow_tokenizer_mismatch;
    if args.verifier {
        cfg.verifier = Some(dojo_curate::verifier::VerifierConfig {
            cap: args.cap,
            seed: args.verifier_seed,
            ..Default::default()
        });
    }
    ensure_usage!(
        args.world.is_some() || !args.world_withhold_gold,
        "--world-withhold-gold applies to world-model data: it needs --world swt|swr"
    );
    ensure_usage!(
        args.world.is_some() || args.world_policy.is_none(),
        "--world-policy sets the prompt caps of world-model data: it needs --world swt|swr"
    );
    if let Some(kind) = &args.world {
        let kind = kind.parse().context("--world")?;
        let mut w = dojo_curate::world::WorldConfig::new(kind);
        w.max_per_trajectory = args.world_cap;
        if let Some(path) = &args.world_policy {
            let policy = dojo_rollout::policy::PolicyConfig::load(path)?;
            w.caps = policy
                .world
                .and_then(|w| w.caps)
                .with_context(|| format!("{}: no [world.caps] table", path.display()))?;
        }
        w.analysis = args
            .world_analysis_model
            .clone()
            .map(|m| (dojo_curate::world::default_analysis_root(), m));
        w.withhold_gold = args.world_withhold_gold;
        cfg.world = Some(w);
    }
    let model = if args.model == "none" {
        ensure_usage!(
            !cfg.formats.tokens,
            "--model none cannot write the pre-tokenized parquet; use --format messages"
        );
        None
    } else {
        Some(
            dojo_curate::target_model::load(&args.model)
                .with_context(|| format!("loading --model {}", args.model))?,
        )
    };
    let out = dojo_curate::run(&cfg, model.as_deref()).context("dojo curate")?;
    for w in out.warnings(&args.out.join("manifest.json")) {
        eprintln!("{w}");
    }
    print!("{}", out.report(cfg.world.as_ref()));
    // Problems in the rollouts are the data's failure.
    Ok(Exit::failure_if(args.strict && !out.problems.is_empty()))
}
