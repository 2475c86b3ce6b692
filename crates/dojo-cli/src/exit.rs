//! The one owner of `dojo`'s exit codes (the README's "Exit codes" table). Every command returns
//! an [`Exit`]; only `main` turns it, or the error a command stopped with, into a status, so a
//! script can tell a bad verdict from a broken run without knowing which command it called.

use std::fmt;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: the command did its job and the verdict, if any, is good.
    Success,
    /// 1: the agent's or the data's failure (a task unresolved, a task file or a prediction
    /// invalid, a validation failed), and any error a command stops with: the message and its
    /// causes are on stderr.
    Failure,
    /// 2: the command line is wrong. clap's own code for a flag it rejects; ours for flags that
    /// parse but do not fit together ([`UsageError`]).
    Usage,
    /// 3: the command finished, but infrastructure failures (sandbox, environment build, model
    /// server) left its result incomplete; running it again may help.
    Infrastructure,
    /// `dojo sandbox run/exec`: the sandboxed command's own exit code, passed through.
    PassThrough(i32),
}

impl Exit {
    /// The process exit status.
    pub fn code(self) -> i32 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::Infrastructure => 3,
            Exit::PassThrough(code) => code,
        }
    }

    /// [`Exit::Failure`] when `failed`, else success.
    pub fn failure_if(failed: bool) -> Self {
        if failed { Exit::Failure } else { Exit::Success }
    }

    /// [`Exit::Infrastructure`] when the result is `incomplete`, else success.
    pub fn infrastructure_if(incomplete: bool) -> Self {
        if incomplete {
            Exit::Infrastructure
        } else {
            Exit::Success
        }
    }

    /// The status for an error a command stopped with: [`Exit::Usage`] when a [`UsageError`] is
    /// anywhere in its chain, else [`Exit::Failure`]. An aborted command is not reported as
    /// infrastructure: 3 promises a result that exists but is incomplete.
    pub fn of_error(e: &anyhow::Error) -> Self {
        if e.chain().any(|c| c.is::<UsageError>()) {
            Exit::Usage
        } else {
            Exit::Failure
        }
    }
}

/// What `dojo` prints for an error it stops with: the message, then each cause under it that
/// the messages above do not already say (many library errors repeat their cause's message).
pub fn report(e: &anyhow::Error) -> String {
    let mut out = format!("Error: {e}");
    let mut said = e.to_string();
    let mut header = false;
    for cause in e.chain().skip(1) {
        let msg = cause.to_string();
        if said.contains(&msg) {
            continue;
        }
        if !header {
            out.push_str("\n\nCaused by:");
            header = true;
        }
        out.push_str(&format!("\n    {msg}"));
        said.push_str(&msg);
    }
    out
}

/// Flags that clap accepted one by one but that do not fit together: exits 2 like clap's own.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Return a [`UsageError`] from the enclosing function unless `cond` holds.
macro_rules! ensure_usage {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(anyhow::Error::new($crate::exit::UsageError(format!($($fmt)+))));
        }
    };
}
pub(crate) use ensure_usage;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_fixed() {
        let codes = [
            Exit::Success,
            Exit::Failure,
            Exit::Usage,
            Exit::Infrastructure,
        ]
        .map(Exit::code);
        assert_eq!(codes, [0, 1, 2, 3]);
        assert_eq!(Exit::PassThrough(137).code(), 137);
    }

    #[test]
    fn the_report_shows_each_cause_once() {
        use anyhow::Context;
        let io = std::io::Error::other("disk full");
        let e = Err::<(), _>(io).context("writing x").context("dojo eval");
        let shown = report(&e.unwrap_err());
        assert_eq!(
            shown,
            "Error: dojo eval\n\nCaused by:\n    writing x\n    disk full"
        );
        // A message that already says its cause: the cause is not repeated.
        #[derive(Debug)]
        struct Wrapped(std::io::Error);
        impl fmt::Display for Wrapped {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "tasks: {}", self.0)
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Wrapped(std::io::Error::other("gone")));
        assert_eq!(report(&e), "Error: tasks: gone");
    }

    #[test]
    fn usage_errors_are_found_under_context() {
        use anyhow::Context;
        let e: anyhow::Result<()> = Err(anyhow::Error::new(UsageError("--x".into())));
        let e = e.context("dojo x").unwrap_err();
        assert_eq!(Exit::of_error(&e), Exit::Usage);
        assert_eq!(Exit::of_error(&anyhow::anyhow!("disk full")), Exit::Failure);
    }
}
