//! The filters, each configurable and each reporting what it dropped and why.
//!
//! Order (fixed, whatever order the user lists them in), and why:
//! 1. **dedup_records** first, so a file passed twice does not skew a task's difficulty mean;
//! 2. **difficulty** on every rollout (failures included: the mean reward is over all N);
//! 3. **dedup**: identical conversations (distinct rollouts, e.g. greedy decoding) train once;
//! 4. **format** (SWE-Master `1_init_format_filter.py`): resolved only, clean submit, budgets;
//! 5. **lsp** (optional, SWE-Master's LSP data: at least m successful `lsp_tool` calls);
//! 6. **cap** last (SWE-Gym: at most k per task, fewest turns then fewest tokens), so the cap picks
//!    among trajectories that survived everything else.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::view::{StopKind, Traj, content_text, role};

/// One trajectory moving through the stages, with its token count once known.
#[derive(Debug, Clone)]
pub struct Cand {
    pub traj: Traj,
    /// Tokens of the whole conversation with the target tokenizer (set by the pipeline).
    pub n_tokens: Option<usize>,
}

/// What one stage did.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct StageReport {
    pub stage: String,
    pub input: usize,
    pub kept: usize,
    /// Reason → count; `input == kept + sum(dropped)` always.
    pub dropped: BTreeMap<String, usize>,
}

impl StageReport {
    pub(crate) fn new(stage: &str, input: usize) -> StageReport {
        StageReport {
            stage: stage.to_string(),
            input,
            ..Default::default()
        }
    }
    pub(crate) fn drop(&mut self, reason: &str) {
        *self.dropped.entry(reason.to_string()).or_default() += 1;
    }
    /// Total dropped.
    pub fn dropped_total(&self) -> usize {
        self.dropped.values().sum()
    }
}

/// Exact-duplicate removal: same task, messages and tools, byte for byte. The first occurrence
/// (in input order: files sorted, then line order) is kept.
///
/// With `same_sample`, only copies of one rollout (same task, sample index and conversation: a
/// file read twice) are removed; that runs before the difficulty filter so a re-read file does
/// not skew a task's mean, while distinct rollouts that happen to be identical (greedy decoding)
/// still count in the mean and are deduplicated afterwards.
pub fn dedup(cands: Vec<Cand>, same_sample: bool) -> (Vec<Cand>, StageReport) {
    let mut rep = StageReport::new(
        if same_sample {
            "dedup_records"
        } else {
            "dedup"
        },
        cands.len(),
    );
    let mut seen = HashSet::new();
    let mut kept = Vec::with_capacity(cands.len());
    for c in cands {
        let mut h = Sha256::new();
        h.update(c.traj.task_id.as_bytes());
        h.update([0]);
        if same_sample {
            h.update(c.traj.sample.to_le_bytes());
        }
        for m in &c.traj.messages {
            h.update(serde_json::to_vec(m).unwrap_or_default());
            h.update([0]);
        }
        h.update([1]);
        for t in &c.traj.tools {
            h.update(serde_json::to_vec(t).unwrap_or_default());
        }
        if seen.insert(h.finalize()) {
            kept.push(c);
        } else {
            rep.drop(if same_sample {
                "same_rollout_read_twice"
            } else {
                "exact_duplicate"
            });
        }
    }
    rep.kept = kept.len();
    (kept, rep)
}

/// Difficulty filter bounds: keep tasks with `low < mean reward < high` (strict, as SWE-Master's
/// `1e-7 <= mean < 0.9999999`).
#[derive(Debug, Clone, Serialize)]
pub struct DifficultyConfig {
    pub low: f64,
    pub high: f64,
}

impl Default for DifficultyConfig {
    fn default() -> Self {
        DifficultyConfig {
            low: 0.0,
            high: 1.0,
        }
    }
}

/// Per-task pass rates and how they split.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DifficultyStats {
    /// task → (rollouts, mean reward).
    pub tasks: BTreeMap<String, (usize, f64)>,
    pub always_fail: usize,
    pub always_pass: usize,
    pub mixed: usize,
    /// Tasks per mean-reward decile: bin i holds means in [i/10, (i+1)/10), the last bin includes 1.
    pub histogram: [usize; 10],
}

/// Per-task mean rewards over all given (graded) rollouts.
pub fn difficulty_stats(cands: &[Cand]) -> DifficultyStats {
    let mut sums: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    // Infrastructure failures say nothing about the task's difficulty for the agent.
    for c in cands
        .iter()
        .filter(|c| c.traj.graded && c.traj.stop != StopKind::InfraError)
    {
        let e = sums.entry(c.traj.task_id.clone()).or_default();
        e.0 += 1;
        e.1 += c.traj.reward;
    }
    let mut st = DifficultyStats::default();
    for (task, (n, sum)) in sums {
        let mean = sum / n as f64;
        if mean <= 0.0 {
            st.always_fail += 1;
        } else if mean >= 1.0 {
            st.always_pass += 1;
        } else {
            st.mixed += 1;
        }
        let bin = ((mean * 10.0).floor() as isize).clamp(0, 9) as usize;
        st.histogram[bin] += 1;
        st.tasks.insert(task, (n, mean));
    }
    st
}

/// Keeps trajectories of tasks whose mean reward lies strictly between the bounds.
pub fn difficulty(
    cands: Vec<Cand>,
    cfg: &DifficultyConfig,
) -> (Vec<Cand>, StageReport, DifficultyStats) {
    let st = difficulty_stats(&cands);
    let mut rep = StageReport::new("difficulty", cands.len());
    let mut kept = Vec::with_capacity(cands.len());
    for c in cands {
        if c.traj.stop == StopKind::InfraError {
            rep.drop("infra_error");
            continue;
        }
        if !c.traj.graded {
            rep.drop("ungraded");
            continue;
        }
        let mean = st.tasks.get(&c.traj.task_id).map_or(0.0, |t| t.1);
        if mean <= cfg.low {
            rep.drop("task_mean_at_or_below_low");
        } else if mean >= cfg.high {
            rep.drop("task_mean_at_or_above_high");
        } else {
            kept.push(c);
        }
    }
    rep.kept = kept.len();
    (kept, rep, st)
}

/// SWE-Master's format filter, each check switchable.
#[derive(Debug, Clone, Serialize)]
pub struct FormatConfig {
    pub require_resolved: bool,
    /// Drop if the agent loop sent a format-error reminder (counter, or a marker in a message).
    pub drop_format_errors: bool,
    /// Texts that identify a format-error reminder inside user/tool messages.
    pub reminder_markers: Vec<String>,
    /// Drop step/token/time-limit stops and forced submissions.
    pub drop_limit_stops: bool,
    /// Token budget with the target tokenizer (drop when above).
    pub max_tokens: Option<usize>,
    /// Assistant-turn budget (drop when above).
    pub max_turns: Option<usize>,
    /// The last action must be a bare submit (one call, no arguments).
    pub require_bare_submit: bool,
    pub submit_tool: String,
}

impl Default for FormatConfig {
    fn default() -> Self {
        FormatConfig {
            require_resolved: true,
            drop_format_errors: true,
            // R2E-Gym/SWE-Master's CONTINUE_MSG, which dojo-agent sends verbatim.
            reminder_markers: vec!["You forgot to use a function call".to_string()],
            drop_limit_stops: true,
            max_tokens: Some(81_920),
            max_turns: Some(100),
            require_bare_submit: true,
            submit_tool: "submit".to_string(),
        }
    }
}

/// The format checks that need no tokenizer; `None` means it passes them.
pub fn format_check(t: &Traj, cfg: &FormatConfig) -> Option<&'static str> {
    if t.stop == StopKind::InfraError {
        // Infrastructure failures are never the agent's, and never training data.
        return Some("infra_error");
    }
    if cfg.drop_format_errors && t.stop == StopKind::FormatErrors {
        return Some("format_error_stop");
    }
    if cfg.require_resolved && !(t.resolved && t.reward >= 1.0) {
        return Some("not_resolved");
    }
    if cfg.drop_limit_stops {
        match t.stop {
            StopKind::StepLimit => return Some("step_limit_stop"),
            StopKind::TokenLimit => return Some("token_limit_stop"),
            StopKind::TimeLimit => return Some("time_limit_stop"),
            _ => {}
        }
        if t.forced {
            return Some("forced_submission");
        }
    }
    if cfg.drop_format_errors && has_format_error(t, cfg) {
        return Some("format_error_reminder");
    }
    if let Some(max) = cfg.max_turns
        && t.num_turns() > max
    {
        return Some("over_turn_budget");
    }
    if cfg.require_bare_submit && !ends_with_bare_submit(t, &cfg.submit_tool) {
        return Some("last_action_not_bare_submit");
    }
    None
}

fn has_format_error(t: &Traj, cfg: &FormatConfig) -> bool {
    t.format_errors > 0
        || t.messages.iter().any(|m| {
            matches!(role(m), "user" | "tool")
                && cfg
                    .reminder_markers
                    .iter()
                    .any(|k| !k.is_empty() && content_text(m).contains(k.as_str()))
        })
}

/// True when the last assistant message is exactly one call of the submit tool with no arguments
/// (native tool calls), or, for text-based tool formats, its text ends with a bare
/// `<function=submit></function>` (SWE-Master's XML). In a trajectory that was offered R2E-Gym's
/// tool set, whose submit is `finish{command: "submit"}` with an optional `result` summary, that
/// call counts too: the command is the tool's one required argument, not extra content.
pub fn ends_with_bare_submit(t: &Traj, submit_tool: &str) -> bool {
    let Some(last) = t.messages.iter().rev().find(|m| role(m) == "assistant") else {
        return false;
    };
    let calls = Traj::tool_calls(last);
    if !calls.is_empty() {
        let [(name, args)] = calls.as_slice() else {
            return false;
        };
        let Some(args) = args.as_object() else {
            return false;
        };
        if name == submit_tool {
            return args.is_empty();
        }
        return name == R2E_SUBMIT
            && offers_tool(t, R2E_SUBMIT)
            && args.get("command").and_then(Value::as_str) == Some("submit")
            && args.keys().all(|k| k == "command" || k == "result");
    }
    let text = content_text(last);
    let text = text.trim_end();
    let xml = format!("<function={submit_tool}></function>");
    let xml_nl = format!("<function={submit_tool}>\n</function>");
    text.ends_with(&xml) || text.ends_with(&xml_nl)
}

/// R2E-Gym's submit tool (`finish{command: "submit", result}`).
const R2E_SUBMIT: &str = "finish";

/// Whether the trajectory's request offered a tool of this name.
fn offers_tool(t: &Traj, name: &str) -> bool {
    t.tools.iter().any(|spec| {
        spec.pointer("/function/name")
            .or_else(|| spec.get("name"))
            .and_then(Value::as_str)
            == Some(name)
    })
}

/// The format filter. `n_tokens` must already be set where a token budget is configured (the
/// pipeline counts tokens only for trajectories that pass the cheap checks).
pub fn format(cands: Vec<Cand>, cfg: &FormatConfig) -> (Vec<Cand>, StageReport) {
    let mut rep = StageReport::new("format", cands.len());
    let mut kept = Vec::with_capacity(cands.len());
    for c in cands {
        if let Some(reason) = format_check(&c.traj, cfg) {
            rep.drop(reason);
            continue;
        }
        if let (Some(max), Some(n)) = (cfg.max_tokens, c.n_tokens)
            && n > max
        {
            rep.drop("over_token_budget");
            continue;
        }
        kept.push(c);
    }
    rep.kept = kept.len();
    (kept, rep)
}

/// Successful calls of the LSP tool: its observation (matched by `tool_call_id`, else the next
/// tool message) does not report an error.
pub fn successful_lsp_calls(t: &Traj, lsp_tool: &str) -> usize {
    let mut by_id: HashMap<&str, &Value> = HashMap::new();
    for m in &t.messages {
        if role(m) == "tool"
            && let Some(id) = m.get("tool_call_id").and_then(Value::as_str)
        {
            by_id.insert(id, m);
        }
    }
    let mut n = 0;
    for (i, m) in t.messages.iter().enumerate() {
        if role(m) != "assistant" {
            continue;
        }
        let Some(calls) = m.get("tool_calls").and_then(Value::as_array) else {
            continue;
        };
        for (k, call) in calls.iter().enumerate() {
            let f = call.get("function").unwrap_or(call);
            if f.get("name").and_then(Value::as_str) != Some(lsp_tool) {
                continue;
            }
            let obs = call
                .get("id")
                .and_then(Value::as_str)
                .and_then(|id| by_id.get(id).copied())
                .or_else(|| {
                    t.messages[i + 1..]
                        .iter()
                        .filter(|m| role(m) == "tool")
                        .nth(k)
                });
            if let Some(o) = obs {
                let text = content_text(o);
                let head = text.trim_start().to_ascii_lowercase();
                let failed = head.starts_with("[status_code]: error")
                    || head.starts_with("error")
                    || head.starts_with("[error]");
                if !failed {
                    n += 1;
                }
            }
        }
    }
    n
}

/// Keeps trajectories with at least `min` successful LSP-tool calls.
pub fn lsp(cands: Vec<Cand>, lsp_tool: &str, min: usize) -> (Vec<Cand>, StageReport) {
    let mut rep = StageReport::new("lsp", cands.len());
    let mut kept = Vec::with_capacity(cands.len());
    for c in cands {
        if successful_lsp_calls(&c.traj, lsp_tool) >= min {
            kept.push(c);
        } else {
            rep.drop("too_few_successful_lsp_calls");
        }
    }
    rep.kept = kept.len();
    (kept, rep)
}

/// At most `k` per task, preferring fewest turns, then fewest tokens (then the lower sample index,
/// then input order, so the choice is deterministic).
pub fn cap(cands: Vec<Cand>, k: usize) -> (Vec<Cand>, StageReport) {
    let mut rep = StageReport::new("cap", cands.len());
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&cands[a], &cands[b]);
        x.traj
            .task_id
            .cmp(&y.traj.task_id)
            .then(x.traj.num_turns().cmp(&y.traj.num_turns()))
            .then(
                x.n_tokens
                    .unwrap_or(usize::MAX)
                    .cmp(&y.n_tokens.unwrap_or(usize::MAX)),
            )
            .then(x.traj.sample.cmp(&y.traj.sample))
            .then(a.cmp(&b))
    });
    let mut per_task: HashMap<String, usize> = HashMap::new();
    let mut keep = vec![false; cands.len()];
    for i in order {
        let n = per_task.entry(cands[i].traj.task_id.clone()).or_default();
        if *n < k {
            *n += 1;
            keep[i] = true;
        } else {
            rep.drop("over_per_task_cap");
        }
    }
    let kept: Vec<Cand> = cands
        .into_iter()
        .zip(keep)
        .filter_map(|(c, k)| k.then_some(c))
        .collect();
    rep.kept = kept.len();
    (kept, rep)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::view::Origin;
    use serde_json::json;

    /// A hand-built trajectory: `turns` assistant turns of bash, then a submit turn.
    pub fn traj(task: &str, sample: i64, reward: f64, turns: usize) -> Traj {
        let t = crate::fixtures::record(task, sample as u32, reward, turns);
        Traj::from_record(
            &t,
            Origin {
                file: "hand.jsonl".into(),
                line: sample as usize + 1,
            },
        )
    }

    pub fn cand(t: Traj) -> Cand {
        Cand {
            traj: t,
            n_tokens: None,
        }
    }

    #[test]
    fn difficulty_keeps_only_mixed_tasks_and_counts_buckets() {
        let cands: Vec<Cand> = [
            ("always_fail", 0.0),
            ("always_fail", 0.0),
            ("always_pass", 1.0),
            ("always_pass", 1.0),
            ("mixed", 1.0),
            ("mixed", 0.0),
            ("mixed", 0.0),
            ("mixed", 0.0),
        ]
        .iter()
        .enumerate()
        .map(|(i, (t, r))| cand(traj(t, i as i64, *r, 1)))
        .collect();
        let (kept, rep, st) = difficulty(cands, &DifficultyConfig::default());
        assert_eq!(kept.len(), 4);
        assert!(kept.iter().all(|c| c.traj.task_id == "mixed"));
        assert_eq!((st.always_fail, st.always_pass, st.mixed), (1, 1, 1));
        assert_eq!(st.tasks["mixed"], (4, 0.25));
        assert_eq!(st.histogram[0], 1);
        assert_eq!(st.histogram[2], 1);
        assert_eq!(st.histogram[9], 1);
        assert_eq!(rep.dropped["task_mean_at_or_below_low"], 2);
        assert_eq!(rep.dropped["task_mean_at_or_above_high"], 2);
        assert_eq!(rep.input, rep.kept + rep.dropped_total());
    }

    #[test]
    fn infra_failures_do_not_count_in_the_mean() {
        let mut infra = traj("t", 2, 0.0, 1);
        infra.stop = StopKind::InfraError;
        let cands = vec![
            cand(traj("t", 0, 1.0, 1)),
            cand(traj("t", 1, 0.0, 1)),
            cand(infra),
        ];
        let (kept, rep, st) = difficulty(cands, &DifficultyConfig::default());
        assert_eq!(st.tasks["t"], (2, 0.5));
        assert_eq!(kept.len(), 2);
        assert_eq!(rep.dropped["infra_error"], 1);
    }

    #[test]
    fn difficulty_bounds_are_configurable() {
        let cands: Vec<Cand> = (0..4)
            .map(|i| cand(traj("t", i, if i == 0 { 0.0 } else { 1.0 }, 1)))
            .collect();
        // mean 0.75: kept by default, dropped with high = 0.7.
        let (kept, _, _) = difficulty(cands.clone(), &DifficultyConfig::default());
        assert_eq!(kept.len(), 4);
        let (kept, _, _) = difficulty(
            cands,
            &DifficultyConfig {
                low: 0.0,
                high: 0.7,
            },
        );
        assert!(kept.is_empty());
    }

    #[test]
    fn format_filter_drops_each_kind_with_its_reason() {
        let cfg = FormatConfig {
            max_tokens: Some(1000),
            max_turns: Some(5),
            ..Default::default()
        };
        let ok = traj("t", 0, 1.0, 2);
        let unresolved = traj("t", 1, 0.0, 2);
        let mut step = traj("t", 2, 1.0, 2);
        step.stop = StopKind::StepLimit;
        let mut forced = traj("t", 3, 1.0, 2);
        forced.forced = true;
        let mut reminder = traj("t", 4, 1.0, 2);
        reminder.messages.insert(
            3,
            json!({"role": "user", "content": "You forgot to use a function call in your response."}),
        );
        let long = traj("t", 5, 1.0, 6);
        let mut not_submit = traj("t", 6, 1.0, 2);
        not_submit.messages.truncate(not_submit.messages.len() - 2);
        let mut submit_with_args = traj("t", 7, 1.0, 2);
        let n = submit_with_args.messages.len();
        submit_with_args.messages[n - 2]["tool_calls"][0]["function"]["arguments"] =
            json!("{\"x\": 1}");
        let mut counted = traj("t", 8, 1.0, 2);
        counted.format_errors = 2;
        let mut timeout = traj("t", 9, 1.0, 2);
        timeout.stop = StopKind::TimeLimit;
        let mut infra = traj("t", 10, 1.0, 2);
        infra.stop = StopKind::InfraError;
        let mut cands: Vec<Cand> = [
            ok,
            unresolved,
            step,
            forced,
            reminder,
            long,
            not_submit,
            submit_with_args,
            counted,
            timeout,
            infra,
        ]
        .into_iter()
        .map(cand)
        .collect();
        for c in &mut cands {
            c.n_tokens = Some(500);
        }
        let mut over = cand(traj("t", 11, 1.0, 2));
        over.n_tokens = Some(1001);
        cands.push(over);
        let (kept, rep) = format(cands, &cfg);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].traj.sample, 0);
        let expect: BTreeMap<String, usize> = [
            ("not_resolved", 1),
            ("step_limit_stop", 1),
            ("forced_submission", 1),
            ("format_error_reminder", 2),
            ("over_turn_budget", 1),
            ("last_action_not_bare_submit", 2),
            ("time_limit_stop", 1),
            ("infra_error", 1),
            ("over_token_budget", 1),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(rep.dropped, expect);
        assert_eq!(rep.input, 12);
    }

    #[test]
    fn xml_submit_counts_as_bare_submit() {
        let mut t = traj("t", 0, 1.0, 0);
        let n = t.messages.len();
        t.messages[n - 2] =
            json!({"role": "assistant", "content": "All good.\n\n<function=submit>\n</function>"});
        assert!(ends_with_bare_submit(&t, "submit"));
        t.messages[n - 2] = json!({"role": "assistant", "content": "<function=submit><parameter=x>1</parameter></function>"});
        assert!(!ends_with_bare_submit(&t, "submit"));
    }

    #[test]
    fn r2e_finish_submit_counts_as_bare_submit_where_offered() {
        let mut t = traj("t", 0, 1.0, 0);
        let n = t.messages.len();
        let call = |args: &str| {
            json!({"role": "assistant", "content": "Done.", "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": "finish", "arguments": args}}]})
        };
        t.messages[n - 2] = call(r#"{"command":"submit"}"#);
        // Not offered: `finish` is some other tool.
        assert!(!ends_with_bare_submit(&t, "submit"));
        t.tools =
            vec![json!({"type": "function", "function": {"name": "finish", "parameters": {}}})];
        assert!(ends_with_bare_submit(&t, "submit"));
        t.messages[n - 2] = call(r#"{"command":"submit","result":"fixed the bound"}"#);
        assert!(ends_with_bare_submit(&t, "submit"));
        t.messages[n - 2] = call(r#"{"command":"view"}"#);
        assert!(!ends_with_bare_submit(&t, "submit"));
        t.messages[n - 2] = call(r#"{"command":"submit","path":"x.py"}"#);
        assert!(!ends_with_bare_submit(&t, "submit"));
    }

    #[test]
    fn cap_prefers_fewest_turns_then_fewest_tokens() {
        let mut cands = vec![
            cand(traj("a", 0, 1.0, 5)),
            cand(traj("a", 1, 1.0, 2)),
            cand(traj("a", 2, 1.0, 3)),
            cand(traj("a", 3, 1.0, 2)),
            cand(traj("b", 0, 1.0, 9)),
        ];
        cands[1].n_tokens = Some(900);
        cands[3].n_tokens = Some(400);
        cands[2].n_tokens = Some(10);
        let (kept, rep) = cap(cands, 2);
        let ids: Vec<_> = kept
            .iter()
            .map(|c| (c.traj.task_id.as_str(), c.traj.sample))
            .collect();
        assert_eq!(ids, vec![("a", 1), ("a", 3), ("b", 0)]);
        assert_eq!(rep.dropped["over_per_task_cap"], 2);
    }

    #[test]
    fn dedup_removes_exact_copies_only() {
        let a = traj("a", 0, 1.0, 2);
        let mut b = a.clone();
        b.origin.line = 99;
        let mut c = a.clone();
        c.messages[1] = json!({"role": "user", "content": "Fix a!"});
        let mut other_sample = a.clone();
        other_sample.sample = 5;
        let all = vec![cand(a), cand(b), cand(c), cand(other_sample)];
        let (kept, rep) = dedup(all.clone(), false);
        assert_eq!(kept.len(), 2);
        assert_eq!(rep.dropped["exact_duplicate"], 2);
        assert_eq!(kept[0].traj.origin.line, 1);
        let (kept, rep) = dedup(all, true);
        assert_eq!(kept.len(), 3);
        assert_eq!(rep.dropped["same_rollout_read_twice"], 1);
    }

    #[test]
    fn lsp_counts_successful_calls_only() {
        let mut t = traj("a", 0, 1.0, 0);
        let calls = [
            ("l1", "[status_code]: success\n[Result]: def f"),
            ("l2", "[status_code]: error\n[Result]: no symbol"),
            ("l3", "[status_code]: success\n[Result]: refs"),
        ];
        for (id, obs) in calls.iter().rev() {
            t.messages.insert(
                2,
                json!({"role": "tool", "tool_call_id": id, "content": obs}),
            );
            t.messages.insert(2, json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "lsp_tool", "arguments": "{\"command\": \"get_hover\"}"}}]}));
        }
        assert_eq!(successful_lsp_calls(&t, "lsp_tool"), 2);
        let (kept, _) = lsp(vec![cand(t.clone())], "lsp_tool", 2);
        assert_eq!(kept.len(), 1);
        let (kept, rep) = lsp(vec![cand(t)], "lsp_tool", 3);
        assert!(kept.is_empty());
        assert_eq!(rep.dropped["too_few_successful_lsp_calls"], 1);
    }
}
