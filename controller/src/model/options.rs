//! The decision options as the controller reads them: replaceable while it runs, so a reloaded
//! config file (new score weights, per-pool fair-share settings) applies from the next cycle
//! without a restart or a leadership change.

use std::sync::Arc;

use arc_swap::ArcSwap;
use gpufair_core::admission::DecideOptions;

/// Options shared between whoever reloads the config and the controller's cycles.
#[derive(Debug, Clone)]
pub struct SharedOptions(Arc<ArcSwap<DecideOptions>>);

impl SharedOptions {
    pub fn new(options: DecideOptions) -> Self {
        Self(Arc::new(ArcSwap::from_pointee(options)))
    }

    /// The options now; a cycle reads them once, so it never mixes two versions.
    pub fn current(&self) -> Arc<DecideOptions> {
        self.0.load_full()
    }

    /// Replaces the options for every cycle that starts from now on.
    pub fn replace(&self, options: DecideOptions) {
        self.0.store(Arc::new(options));
    }
}

impl Default for SharedOptions {
    fn default() -> Self {
        Self::new(DecideOptions::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_is_seen_by_every_clone() {
        let shared = SharedOptions::default();
        let controller_side = shared.clone();
        let before = controller_side.current();
        let mut options = DecideOptions::default();
        options.score.urgency = 7.0;
        shared.replace(options);
        assert_eq!(controller_side.current().score.urgency, 7.0);
        // What a cycle already read stays as it was.
        assert_eq!(before.score.urgency, DecideOptions::default().score.urgency);
    }
}
