//! The policies a scenario can compare, by the names users type.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
pub enum PolicyName {
    /// gpufair: time-aware fair share with capacity held for the most deserving workload.
    #[serde(rename = "gpufair")]
    Gpufair,
    /// Classic fair share: the same division with K = 0, nothing held, no preemption.
    #[serde(rename = "stateless")]
    Stateless,
    /// Ablation: gpufair's ledger, but nothing held and no preemption.
    #[serde(rename = "gpufair-nohold")]
    GpufairNoHold,
    /// Ablation: K = 0, but capacity held (and preemption as gpufair).
    #[serde(rename = "stateless-hold")]
    StatelessHold,
    /// First come, first served; whatever fits starts.
    #[serde(rename = "fifo")]
    Fifo,
    /// KAI-Scheduler's additive time-based fair share with reclaim.
    #[serde(rename = "kai")]
    Kai,
    /// Kueue's admission fair sharing (usage-ordered admission, entry penalty).
    #[serde(rename = "kueue-afs")]
    KueueAfs,
}

impl PolicyName {
    pub const ALL: [Self; 7] = [
        Self::Gpufair,
        Self::Stateless,
        Self::Fifo,
        Self::Kai,
        Self::KueueAfs,
        Self::GpufairNoHold,
        Self::StatelessHold,
    ];

    pub const FORMS: &'static str =
        "gpufair, stateless, gpufair-nohold, stateless-hold, fifo, kai or kueue-afs";

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gpufair => "gpufair",
            Self::Stateless => "stateless",
            Self::GpufairNoHold => "gpufair-nohold",
            Self::StatelessHold => "stateless-hold",
            Self::Fifo => "fifo",
            Self::Kai => "kai",
            Self::KueueAfs => "kueue-afs",
        }
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is not one of [`PolicyName::FORMS`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {0:?}: expected {forms}", forms = PolicyName::FORMS)]
pub struct UnknownPolicy(pub String);

impl FromStr for PolicyName {
    type Err = UnknownPolicy;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|name| name.as_str() == text)
            .ok_or_else(|| UnknownPolicy(text.to_string()))
    }
}

/// Parses a comma-separated list such as `gpufair,stateless`; `all` means every policy.
pub fn parse_policy_list(text: &str) -> Result<Vec<PolicyName>, UnknownPolicy> {
    if text.trim() == "all" {
        return Ok(PolicyName::ALL.to_vec());
    }
    let mut names = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let name: PolicyName = part.parse()?;
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        return Err(UnknownPolicy(text.to_string()));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_is_refused() {
        for name in PolicyName::ALL {
            assert_eq!(name.as_str().parse::<PolicyName>(), Ok(name));
        }
        let err = "fairest".parse::<PolicyName>().unwrap_err().to_string();
        assert!(
            err.contains("\"fairest\"") && err.contains("kueue-afs"),
            "{err}"
        );
        assert_eq!(
            parse_policy_list("kai, fifo,kai").unwrap(),
            vec![PolicyName::Kai, PolicyName::Fifo]
        );
        assert_eq!(parse_policy_list("all").unwrap().len(), 7);
        assert!(parse_policy_list(" , ").is_err());
    }
}
