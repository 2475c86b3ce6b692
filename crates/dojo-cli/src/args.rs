//! Value parsers shared by the subcommands' flags: counts, budgets and sizes that must be
//! positive, and numbers that must be finite. clap refuses a bad value naming the flag, where a
//! silent clamp or a run that does nothing (`-n 0`, `--steps 0`) would hide the mistake.

use clap::builder::RangedU64ValueParser;

/// An integer flag that must be at least 1.
pub fn positive<T>() -> RangedU64ValueParser<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: std::fmt::Display + Send + Sync + 'static,
{
    RangedU64ValueParser::<T>::new().range(1..)
}

/// A finite number (`NaN` and infinities are refused).
pub fn finite(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{s} is not a finite number"))
    }
}
