//! A [`Duration`] as a number of seconds (fractions allowed) in serde formats:
//! `#[serde(with = "dojo_rundir::secs")]`. Writes an `f64`; reads any number, refusing
//! negative, non-finite and out-of-range values.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use std::time::Duration;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct T {
        #[serde(with = "super")]
        t: Duration,
    }

    #[test]
    fn seconds_round_trip_and_negatives_are_refused() {
        let t = T {
            t: Duration::from_millis(1500),
        };
        let s = serde_json::to_string(&t).unwrap();
        assert_eq!(s, r#"{"t":1.5}"#);
        assert_eq!(serde_json::from_str::<T>(&s).unwrap(), t);
        assert_eq!(
            serde_json::from_str::<T>(r#"{"t":600}"#).unwrap().t,
            Duration::from_secs(600)
        );
        assert!(serde_json::from_str::<T>(r#"{"t":-1}"#).is_err());
    }
}
