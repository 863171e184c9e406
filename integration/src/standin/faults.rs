//! Faults on demand: a test arms a rule ("the next 3 PATCHes of pods/status answer 409") and the
//! HTTP layer consults the rules before serving each request.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

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
}

/// What an armed rule does to a matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// 500 InternalError.
    ServerError,
    /// 429 TooManyRequests with `Retry-After`.
    TooManyRequests { retry_after_seconds: u64 },
    /// The request is served normally after this delay.
    Delay(Duration),
    /// 410 Gone: a list answers 410 Expired; a watch gets an ERROR event with a 410 Status.
    Gone,
    /// 409 Conflict, as for a stale resourceVersion.
    Conflict,
    /// A watch is accepted and then closed at once, with no events.
    DropWatch,
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

    fn matches(&self, resource: &str, verb: Verb) -> bool {
        self.resource.as_deref().is_none_or(|r| r == resource)
            && self.verb.is_none_or(|v| v == verb)
    }
}

/// The armed rules, and a signal that ends every open watch.
pub struct Faults {
    rules: Mutex<Vec<FaultRule>>,
    drop_watches: watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            rules: Mutex::new(Vec::new()),
            drop_watches: watch::channel(0).0,
        }
    }
}

impl Faults {
    pub fn arm(&self, rule: FaultRule) {
        self.rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(rule);
    }

    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The fault for this request, if a rule matches; each hit uses up one of its requests.
    /// `resource` is `plural` or `plural/subresource`.
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
        Some(fault)
    }

    /// Closes every watch open now (each client sees its stream end and must re-watch).
    pub fn drop_all_watches(&self) {
        self.drop_watches.send_modify(|n| *n += 1);
    }

    pub fn watch_drops(&self) -> watch::Receiver<u64> {
        self.drop_watches.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_and_run_out() {
        let faults = Faults::default();
        faults.arm(FaultRule::new(
            Some("pods/status"),
            Some(Verb::Patch),
            Fault::Conflict,
            2,
        ));
        assert_eq!(faults.take("pods", Verb::Patch), None);
        assert_eq!(faults.take("pods/status", Verb::Update), None);
        assert_eq!(
            faults.take("pods/status", Verb::Patch),
            Some(Fault::Conflict)
        );
        assert_eq!(
            faults.take("pods/status", Verb::Patch),
            Some(Fault::Conflict)
        );
        assert_eq!(faults.take("pods/status", Verb::Patch), None);
        faults.arm(FaultRule::new(None, None, Fault::ServerError, 1));
        assert_eq!(faults.take("leases", Verb::Get), Some(Fault::ServerError));
        assert_eq!(faults.take("leases", Verb::Get), None);
    }
}
