//! SWE-Master's context manager: once a trajectory is long, older turns are replaced, one window
//! at a time, by an LLM-written memory with four sections (Investigation Progress, Key
//! Discoveries, Current Understanding, Memory Anchors); the system and task messages and the
//! most recent turns stay verbatim. Every compression is recorded in the trajectory.

use serde::{Deserialize, Serialize};

/// When and how much to compress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContextConfig {
    /// No compression before this many turns.
    pub trigger_step: u32,
    /// Turns folded into one summary.
    pub window: u32,
    /// Most recent turns that always stay verbatim.
    pub keep_recent: u32,
    /// Sampling temperature of the summarizer.
    pub temperature: f64,
    /// Cap on summary length in tokens.
    pub max_summary_tokens: Option<u32>,
    /// Each observation is clipped to this many characters in the summarizer's transcript.
    pub max_observation_chars: usize,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            trigger_step: 15,
            window: 10,
            keep_recent: 5,
            temperature: 0.7,
            max_summary_tokens: Some(2048),
            max_observation_chars: 4000,
        }
    }
}

impl ContextConfig {
    /// With `done` turns completed and `compressed` turns already summarized, the turns
    /// (1-based, inclusive) to compress now, if any. Fires when `done ≥ trigger`,
    /// `done ≥ window + keep_recent` and `done − keep_recent ≥ compressed + window`.
    pub fn due(&self, done: u32, compressed: u32) -> Option<(u32, u32)> {
        let fire = done >= self.trigger_step
            && done >= self.window + self.keep_recent
            && done.saturating_sub(self.keep_recent) >= compressed + self.window
            && self.window > 0;
        fire.then(|| (compressed + 1, compressed + self.window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_on_swe_master_schedule() {
        let c = ContextConfig::default();
        let mut compressed = 0;
        let mut fired = vec![];
        for done in 0..=40 {
            if let Some((a, b)) = c.due(done, compressed) {
                fired.push((done, a, b));
                compressed = b;
            }
        }
        assert_eq!(fired, vec![(15, 1, 10), (25, 11, 20), (35, 21, 30)]);
    }
}
