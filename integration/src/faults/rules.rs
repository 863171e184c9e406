//! Which requests a fault hits: each request is read as the API server reads it (resource,
//! subresource, verb) and checked against the armed rules, first match first.

use std::sync::Mutex;
use std::time::Duration;

/// The request verbs, as the API server's audit log names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

/// What an armed rule does to a matching request instead of forwarding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// 500 InternalError.
    ServerError,
    /// 429 TooManyRequests with `Retry-After`.
    TooManyRequests { retry_after_seconds: u64 },
    /// Forwarded after this delay.
    Delay(Duration),
    /// 410 Gone: a list (or get) answers a 410 `Expired` Status; a watch gets one ERROR event
    /// carrying that Status and is closed.
    Gone,
    /// 409 Conflict, as for a write from a stale resourceVersion.
    Conflict,
    /// A watch is forwarded, and closed this long after it was accepted (zero: at once, with
    /// no events): the client sees its stream end and must watch again.
    CutWatch { after: Duration },
}

/// One armed fault: which requests it hits and how many more times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    /// Resource plural, optionally with a subresource (`pods`, `pods/eviction`,
    /// `queues/status`); `None` for every resource.
    pub resource: Option<String>,
    /// `None` for every verb.
    pub verb: Option<Verb>,
    pub fault: Fault,
    /// Matching requests left to hit.
    pub remaining: usize,
}

impl FaultRule {
    pub fn new(resource: Option<&str>, verb: Option<Verb>, fault: Fault, times: usize) -> Self {
        Self {
            resource: resource.map(str::to_string),
            verb,
            fault,
            remaining: times,
        }
    }

    /// Whether the rule hits a request for `resource` (`plural` or `plural/subresource`).
    pub fn matches(&self, resource: &str, verb: Verb) -> bool {
        self.resource.as_deref().is_none_or(|r| r == resource)
            && self.verb.is_none_or(|v| v == verb)
    }
}

/// The armed rules and what they have done so far.
#[derive(Debug, Default)]
pub struct Rules {
    rules: Mutex<Vec<FaultRule>>,
    injected: Mutex<Vec<(String, Verb, Fault)>>,
}

impl Rules {
    pub fn arm(&self, rule: FaultRule) {
        if rule.remaining > 0 {
            self.rules
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(rule);
        }
    }

    /// Disarms every rule.
    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Requests the armed rules may still hit, all rules together.
    pub fn remaining(&self) -> usize {
        self.rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|r| r.remaining)
            .sum()
    }

    /// The fault for this request, if a rule matches; each hit uses up one of its requests.
    pub fn take(&self, resource: &str, verb: Verb) -> Option<Fault> {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        let index = rules
            .iter()
            .position(|r| r.remaining > 0 && r.matches(resource, verb))?;
        rules[index].remaining -= 1;
        let fault = rules[index].fault.clone();
        if rules[index].remaining == 0 {
            rules.remove(index);
        }
        drop(rules);
        self.injected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((resource.to_string(), verb, fault.clone()));
        Some(fault)
    }

    /// Every fault injected so far, in order: (resource, verb, fault).
    pub fn injected(&self) -> Vec<(String, Verb, Fault)> {
        self.injected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_and_run_out() {
        let rules = Rules::default();
        rules.arm(FaultRule::new(
            Some("pods/status"),
            Some(Verb::Patch),
            Fault::Conflict,
            2,
        ));
        assert_eq!(rules.remaining(), 2);
        assert_eq!(rules.take("pods", Verb::Patch), None);
        assert_eq!(rules.take("pods/status", Verb::Update), None);
        assert_eq!(
            rules.take("pods/status", Verb::Patch),
            Some(Fault::Conflict)
        );
        assert_eq!(
            rules.take("pods/status", Verb::Patch),
            Some(Fault::Conflict)
        );
        assert_eq!(rules.take("pods/status", Verb::Patch), None);
        assert_eq!(rules.remaining(), 0);
        rules.arm(FaultRule::new(None, None, Fault::ServerError, 1));
        assert_eq!(rules.take("leases", Verb::Get), Some(Fault::ServerError));
        assert_eq!(rules.take("leases", Verb::Get), None);
        assert_eq!(rules.injected().len(), 3);
    }

    #[test]
    fn first_armed_rule_wins_and_clear_disarms() {
        let rules = Rules::default();
        rules.arm(FaultRule::new(
            Some("pods"),
            Some(Verb::Watch),
            Fault::Gone,
            1,
        ));
        rules.arm(FaultRule::new(Some("pods"), None, Fault::ServerError, 5));
        rules.arm(FaultRule::new(Some("pods"), None, Fault::Conflict, 0));
        assert_eq!(rules.take("pods", Verb::Watch), Some(Fault::Gone));
        assert_eq!(rules.take("pods", Verb::Watch), Some(Fault::ServerError));
        assert_eq!(rules.take("pods/eviction", Verb::Create), None);
        rules.clear();
        assert_eq!(rules.take("pods", Verb::List), None);
        assert_eq!(rules.remaining(), 0);
    }
}
